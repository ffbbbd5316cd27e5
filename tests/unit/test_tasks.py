"""Signed tasks (SPEC §6): what the Actuator accepts, and why it refuses the rest."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from xmc.tasks import (
    TASK_FIELD,
    TOKEN_FIELD,
    TaskRejected,
    TaskRejectReason,
    hs256_token,
    sign_task,
    task_digest,
    verify_task,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

KEY = "k" * 32
OTHER_KEY = "o" * 32
T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
TTL = timedelta(hours=24)
LEEWAY = timedelta(seconds=30)

Fields = dict[bytes | str, bytes | str]


def make_task(task_id: str = "task-1") -> Task:
    return Task(
        task_id=task_id,
        kind=Task.RESTART,
        xid=7,
        wid=3,
        target_eid=2,
        operation="experiments/7/workUnits/3/operations/op-1",
        payload=TaskPayload(work_unit=WorkUnit(name="experiments/7/workUnits/3"), eid=3),
    )


def as_redis(fields: Mapping[str, bytes | str]) -> Fields:
    """The entry as redis-py returns it with ``decode_responses=False``: bytes everywhere."""
    return {
        name.encode(): value.encode() if isinstance(value, str) else value
        for name, value in fields.items()
    }


def signed(**overrides: Any) -> Fields:
    return as_redis(sign_task(make_task(), key=KEY, now=T0, **overrides))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade_token(header: Mapping[str, Any], claims: Mapping[str, Any], key: str) -> str:
    """A JWT with an arbitrary header, HMAC-SHA256-signed: what an attacker can build."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(key.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def good_claims(task_bytes: bytes) -> dict[str, Any]:
    iat = int(T0.timestamp())
    return {
        "iss": "xmc-ess",
        "aud": "xmc-actuator",
        "iat": iat,
        "exp": iat + 3600,
        "sub": "task-1",
        "jti": "task-1",
        "digest": task_digest(task_bytes),
    }


def with_token(token: str) -> Callable[[Fields], Fields]:
    return lambda fields: {**fields, b"token": token.encode()}


def with_claims(
    edit: Callable[[dict[str, Any]], object], key: str = KEY, algorithm: str = "HS256"
) -> Callable[[Fields], Fields]:
    def mutate(fields: Fields) -> Fields:
        task_bytes = fields[b"task"]
        assert isinstance(task_bytes, bytes)
        claims = good_claims(task_bytes)
        edit(claims)
        return {**fields, b"token": jwt.encode(claims, key, algorithm=algorithm).encode()}

    return mutate


def tampered(fields: Fields) -> Fields:
    other = make_task()
    other.kind = Task.DELETE
    return {**fields, b"task": other.SerializeToString()}


def without(name: bytes) -> Callable[[Fields], Fields]:
    return lambda fields: {k: v for k, v in fields.items() if k != name}


GARBAGE = b"\xff\xff\xff"


def garbage_task_signed(fields: Fields) -> Fields:
    claims = good_claims(GARBAGE)
    return {b"task": GARBAGE, b"token": jwt.encode(claims, KEY, algorithm="HS256").encode()}


def test_round_trip_through_redis_bytes() -> None:
    fields = signed()

    assert verify_task(fields, key=KEY, now=T0) == make_task()


def test_unknown_fields_and_str_keys_are_accepted() -> None:
    raw = sign_task(make_task(), key=KEY, now=T0)
    fields: Fields = {TASK_FIELD: raw[TASK_FIELD], TOKEN_FIELD: raw[TOKEN_FIELD]}
    fields["attempt"] = "3"
    fields[b"\xff"] = b"not utf-8"

    assert verify_task(fields, key=KEY, now=T0) == make_task()


def test_token_carries_the_documented_claims() -> None:
    raw = sign_task(make_task(), key=KEY, now=T0, ttl=timedelta(minutes=5))
    token, task_bytes = raw[TOKEN_FIELD], raw[TASK_FIELD]
    assert isinstance(token, str)
    assert isinstance(task_bytes, bytes)

    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})

    assert header["alg"] == "HS256"
    assert claims == {
        "iss": "xmc-ess",
        "aud": "xmc-actuator",
        "iat": int(T0.timestamp()),
        "exp": int(T0.timestamp()) + 300,
        "sub": "task-1",
        "jti": "task-1",
        "digest": hashlib.sha256(task_bytes).hexdigest(),
    }


@pytest.mark.parametrize(
    ("mutate", "reason", "task_attached"),
    [
        pytest.param(tampered, TaskRejectReason.DIGEST_MISMATCH, True, id="task bytes changed"),
        pytest.param(
            lambda f: {**f, b"task": GARBAGE},
            TaskRejectReason.DIGEST_MISMATCH,
            False,
            id="task bytes replaced by garbage",
        ),
        pytest.param(
            garbage_task_signed,
            TaskRejectReason.UNDECODABLE,
            False,
            id="validly signed garbage is undecodable",
        ),
        pytest.param(
            with_claims(lambda c: None, key=OTHER_KEY),
            TaskRejectReason.BAD_SIGNATURE,
            True,
            id="token signed with another key",
        ),
        pytest.param(
            with_claims(lambda c: None, key="", algorithm="none"),
            TaskRejectReason.BAD_SIGNATURE,
            True,
            id="alg none",
        ),
        pytest.param(
            with_claims(lambda c: None, key=KEY * 2, algorithm="HS512"),
            TaskRejectReason.BAD_SIGNATURE,
            True,
            id="HS512 is not accepted even with a valid signature",
        ),
        pytest.param(
            lambda f: with_token(
                handmade_token({"alg": "RS256", "typ": "JWT"}, good_claims(f[b"task"]), key=KEY)
            )(f),
            TaskRejectReason.BAD_SIGNATURE,
            True,
            id="RS256 header over an HMAC signature",
        ),
        pytest.param(
            with_claims(lambda c: c.update(aud="someone-else")),
            TaskRejectReason.WRONG_AUDIENCE,
            True,
            id="wrong audience",
        ),
        pytest.param(
            with_claims(lambda c: c.pop("aud")),
            TaskRejectReason.WRONG_AUDIENCE,
            True,
            id="no audience",
        ),
        pytest.param(
            with_claims(lambda c: c.update(iss="mallory")),
            TaskRejectReason.WRONG_ISSUER,
            True,
            id="wrong issuer",
        ),
        pytest.param(
            with_claims(lambda c: c.pop("digest")),
            TaskRejectReason.DIGEST_MISMATCH,
            True,
            id="no digest claim",
        ),
        pytest.param(
            with_claims(lambda c: c.pop("exp")),
            TaskRejectReason.UNDECODABLE,
            True,
            id="no expiry claim",
        ),
        pytest.param(
            with_claims(lambda c: c.update(exp="tomorrow")),
            TaskRejectReason.UNDECODABLE,
            True,
            id="non-numeric expiry",
        ),
        pytest.param(
            with_claims(lambda c: c.update(iat=c["iat"] + 3600, exp=c["exp"] + 3600)),
            TaskRejectReason.NOT_YET_VALID,
            True,
            id="issued in the future",
        ),
        pytest.param(without(b"token"), TaskRejectReason.MISSING_FIELD, True, id="unsigned task"),
        pytest.param(without(b"task"), TaskRejectReason.MISSING_FIELD, False, id="no task"),
        pytest.param(lambda f: {}, TaskRejectReason.MISSING_FIELD, False, id="empty entry"),
        pytest.param(
            with_token("not-a-jwt"), TaskRejectReason.UNDECODABLE, True, id="token is not a JWT"
        ),
        pytest.param(
            lambda f: {**f, b"token": b"\xff\xfe"},
            TaskRejectReason.UNDECODABLE,
            True,
            id="token is not text",
        ),
    ],
)
def test_rejections(
    mutate: Callable[[Fields], Fields], reason: TaskRejectReason, task_attached: bool
) -> None:
    fields = mutate(signed())

    with pytest.raises(TaskRejected) as caught:
        verify_task(fields, key=KEY, now=T0)

    assert caught.value.reason is reason
    assert (caught.value.task is not None) is task_attached
    assert str(caught.value).startswith(f"{reason.value}: ")


@pytest.mark.parametrize(
    ("now", "reason"),
    [
        pytest.param(T0 + TTL + LEEWAY - timedelta(seconds=1), None, id="within the leeway"),
        pytest.param(T0 + TTL + LEEWAY, TaskRejectReason.EXPIRED, id="at exp plus leeway"),
        pytest.param(T0 + timedelta(days=3), TaskRejectReason.EXPIRED, id="days later"),
        pytest.param(T0 - LEEWAY, None, id="host clock slightly behind the signer"),
        pytest.param(
            T0 - LEEWAY - timedelta(seconds=1),
            TaskRejectReason.NOT_YET_VALID,
            id="host clock far behind the signer",
        ),
        pytest.param(T0.replace(tzinfo=None) + TTL, None, id="naive now is taken as UTC"),
    ],
)
def test_time_is_judged_against_the_injected_now(
    now: datetime, reason: TaskRejectReason | None
) -> None:
    fields = signed(ttl=TTL)

    if reason is None:
        assert verify_task(fields, key=KEY, now=now, leeway=LEEWAY) == make_task()
        return
    with pytest.raises(TaskRejected) as caught:
        verify_task(fields, key=KEY, now=now, leeway=LEEWAY)
    assert caught.value.reason is reason
    assert caught.value.task == make_task(), "the Actuator closes the Operation of a stale task"


def test_custom_issuer_and_audience_must_match_on_both_sides() -> None:
    fields = signed(issuer="ess-b", audience="actuator-b")

    assert verify_task(fields, key=KEY, now=T0, issuer="ess-b", audience="actuator-b")
    with pytest.raises(TaskRejected, match="wrong_issuer"):
        verify_task(fields, key=KEY, now=T0, audience="actuator-b")


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: sign_task(make_task(), key="", now=T0), id="sign"),
        pytest.param(lambda: verify_task(signed(), key="", now=T0), id="verify"),
    ],
)
def test_an_empty_key_is_a_misconfiguration(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="XMC_TASK_SIGNING_KEY"):
        call()


@pytest.mark.parametrize(
    "claims",
    [
        {},
        {"sub": "t", "iat": 0, "exp": 2**40},
        {"iss": "xmc-ess", "aud": "xmc-actuator", "jti": "é\u2028", "digest": "d" * 64, "n": -1},
    ],
)
@pytest.mark.parametrize("key", ["k" * 32, "ü" * 40])
def test_the_token_is_the_one_pyjwt_makes(claims: dict[str, Any], key: str) -> None:
    token = hs256_token(claims, key)
    assert token == jwt.encode(claims, key, algorithm="HS256")
    assert jwt.decode(token, key, algorithms=["HS256"], options={"verify_aud": False}) == claims
