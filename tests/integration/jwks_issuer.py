"""A local OIDC issuer for tests: a real JWKS endpoint (aiohttp) serving keys generated
here, that signs ID tokens, rotates keys, counts fetches and can go down."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.integration.support import T0

ISSUER = "https://issuer.example.com"
AUDIENCE = "xmc-client-id"


class Issuer:
    """An OIDC issuer's JWKS endpoint: its keys can rotate, it counts fetches, it can fail."""

    def __init__(self) -> None:
        self.private: dict[str, Any] = {}
        self.public: list[dict[str, Any]] = []
        self.fetches = 0
        self.down = False
        self.url = ""
        self._runner: web.AppRunner | None = None

    def add_key(self, kid: str, kind: str = "RSA") -> None:
        private: Any
        if kind == "RSA":
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
        else:
            private = ec.generate_private_key(ec.SECP256R1())
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
        jwk.update(kid=kid, use="sig")
        self.private[kid] = private
        self.public.append(jwk)

    def drop_key(self, kid: str) -> None:
        self.public = [k for k in self.public if k["kid"] != kid]

    def token(self, kid: str, *, email: str = "alice@example.com", **claims: Any) -> str:
        algorithm = (
            "ES256" if isinstance(self.private[kid], ec.EllipticCurvePrivateKey) else "RS256"
        )
        now = int(T0.timestamp())
        body = {"iss": ISSUER, "aud": AUDIENCE, "email": email, "iat": now, "exp": now + 3600}
        body.update(claims)
        return jwt.encode(body, self.private[kid], algorithm=algorithm, headers={"kid": kid})

    async def _serve(self, request: web.Request) -> web.Response:
        self.fetches += 1
        if self.down:
            return web.Response(status=503, text="down")
        return web.json_response({"keys": self.public})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/keys", self._serve)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/keys"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    """A running issuer holding one key, ``k1``."""
    started = Issuer()
    started.add_key("k1")
    await started.start()
    yield started
    await started.stop()
