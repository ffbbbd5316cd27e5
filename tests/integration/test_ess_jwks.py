"""OIDC tokens verified with the issuer's key set (``XMC_AUTH_JWKS_URL``), against a real
ESS over gRPC and a real local JWKS server (aiohttp) serving keys generated here: key
rotation, a flood of unknown key ids, the issuer down, and the first fetch."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import jwt

from tests.integration.ess_harness import Ess, EssFactory, auth_settings
from tests.integration.jwks_issuer import (
    AUDIENCE,
    ISSUER,
    Issuer,
)
from tests.integration.support import T0
from tests.waiting import eventually
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment


async def start_ess(ess_factory: EssFactory, issuer: Issuer, **auth: Any) -> Ess:
    settings = dataclasses.replace(
        auth_settings(), jwks_url=issuer.url, issuer=ISSUER, audience=AUDIENCE, **auth
    )
    ess: Ess = await ess_factory(auth=settings)
    return ess


async def call(ess: Ess, token: str) -> grpc.aio.AioRpcError | None:
    """None when ListExperiments answers; the error otherwise."""
    try:
        await ess.api.ListExperiments(
            api_pb2.ListExperimentsRequest(), metadata=(("authorization", f"Bearer {token}"),)
        )
    except grpc.aio.AioRpcError as error:
        return error
    return None


async def until_loaded(ess: Ess) -> None:
    jwks = ess.server.jwks
    assert jwks is not None
    await eventually(lambda: jwks.loaded, within=4, what="the key set fetched")


async def test_a_token_signed_by_the_issuer_names_its_caller(
    ess_factory: EssFactory, issuer: Issuer
) -> None:
    issuer.add_key("k2", "EC")
    ess = await start_ess(ess_factory, issuer)
    assert await call(ess, issuer.token("k1")) is None  # the first RPC waits for the keys
    # The refresher is one of the ESS's supervised tasks (its end would end the process).
    assert "jwks-refresher" in {task.get_name() for task in ess.server._background}
    assert await call(ess, issuer.token("k2", email="Bob@Example.com")) is None
    created = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="oidc")),
        metadata=(("authorization", f"Bearer {issuer.token('k1')}"),),
    )
    assert created.creator == "alice@example.com"
    # Still verified in full: audience, issuer, expiry; the static tokens still work.
    wrong_audience = await call(ess, issuer.token("k1", aud="another-app"))
    assert wrong_audience is not None
    assert wrong_audience.code() == grpc.StatusCode.UNAUTHENTICATED
    assert wrong_audience.details() == "token audience is not accepted"
    wrong_issuer = await call(ess, issuer.token("k1", iss="https://elsewhere"))
    assert wrong_issuer is not None
    assert wrong_issuer.details() == "token issuer is not accepted"
    expired = await call(ess, issuer.token("k1", exp=int(T0.timestamp()) - 3600))
    assert expired is not None
    assert expired.details() == "token has expired"
    assert await call(ess, "token-alice") is None
    # A key of one type cannot verify a token that claims another algorithm.
    forged = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "email": "x@example.com", "exp": 2**40},
        "a-secret-that-is-long-enough-for-hs256!!",
        algorithm="HS256",
        headers={"kid": "k1"},
    )
    refused = await call(ess, forged)
    assert refused is not None
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_rotated_key_is_accepted_after_one_refetch(
    ess_factory: EssFactory, issuer: Issuer
) -> None:
    ess = await start_ess(ess_factory, issuer, jwks_min_refetch_seconds=0.2)
    await until_loaded(ess)
    assert await call(ess, issuer.token("k1")) is None
    before = issuer.fetches
    issuer.add_key("k2")
    issuer.drop_key("k1")
    await asyncio.sleep(0.3)  # past the least interval between refetches
    assert await call(ess, issuer.token("k2")) is None  # this very call waited for the refetch
    assert issuer.fetches == before + 1
    # The dropped key is gone from the set held: its tokens are refused, by name.
    await asyncio.sleep(0.3)
    error = await call(ess, issuer.token("k1"))
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == (
        "token is signed with key id 'k1', which the issuer's key set (XMC_AUTH_JWKS_URL) "
        "does not hold"
    )


async def test_a_flood_of_unknown_key_ids_costs_the_issuer_one_fetch(
    ess_factory: EssFactory, issuer: Issuer
) -> None:
    ess = await start_ess(ess_factory, issuer, jwks_min_refetch_seconds=60.0)
    await until_loaded(ess)
    before = issuer.fetches
    stranger = Issuer()
    for i in range(50):
        stranger.add_key(f"bogus-{i}", "EC")
    errors = await asyncio.gather(*(call(ess, stranger.token(f"bogus-{i}")) for i in range(50)))
    assert all(e is not None and e.code() == grpc.StatusCode.UNAUTHENTICATED for e in errors)
    await asyncio.sleep(0.2)
    # Within one refetch interval: no fetch at all (the set was fetched a moment ago);
    # the one the flood asked for waits for the interval to pass.
    assert issuer.fetches == before
    assert await call(ess, issuer.token("k1")) is None


async def test_the_issuer_down_leaves_the_cached_keys_in_use(
    ess_factory: EssFactory, issuer: Issuer
) -> None:
    ess = await start_ess(ess_factory, issuer, jwks_min_refetch_seconds=0.1)
    await until_loaded(ess)
    issuer.down = True
    await asyncio.sleep(0.2)
    before = issuer.fetches
    unknown = Issuer()
    unknown.add_key("k9")
    # Asks for a refetch, which fails; the RPC is refused, the keys held stay.
    error = await call(ess, unknown.token("k9"))
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert issuer.fetches == before + 1
    for _ in range(5):
        assert await call(ess, issuer.token("k1")) is None
    checks = {c.name: c for c in await ess.server.readiness()}
    assert checks["jwks"].ok
    assert "last refresh failed: JwksError: HTTP 503" in checks["jwks"].detail
    issuer.down = False


async def test_an_unreachable_issuer_at_start_is_unready_and_says_so(
    ess_factory: EssFactory, issuer: Issuer
) -> None:
    issuer.down = True
    ess = await start_ess(ess_factory, issuer, jwks_wait_seconds=0.2)
    error = await call(ess, issuer.token("k1"))
    assert error is not None
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "could not be fetched yet" in error.details()
    checks = {c.name: c for c in await ess.server.readiness()}
    assert not checks["jwks"].ok
    assert checks["jwks"].detail.startswith(f"no key set fetched yet from {issuer.url}")
    assert await call(ess, "token-alice") is None  # static tokens do not depend on it
    issuer.down = False  # retried with backoff (1 s first)
    await eventually(
        lambda: call(ess, issuer.token("k1")), None, within=7.5, every=0.05, what="a token accepted"
    )
    assert {c.name: c.ok for c in await ess.server.readiness()}["jwks"]
