"""Parsing the issuer's key set (``ess.jwks.parse_key_set``): only RS256/ES256 signature
keys with a ``kid`` are kept, each with the one algorithm it verifies."""

from __future__ import annotations

import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ess.jwks import JwksError, parse_key_set


def rsa_jwk(**fields: Any) -> dict[str, Any]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key)), **fields}


def ec_jwk(**fields: Any) -> dict[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key)), **fields}


def test_signature_keys_are_kept_by_kid_with_their_algorithm() -> None:
    keys = parse_key_set(
        {
            "keys": [
                rsa_jwk(kid="r", use="sig", alg="RS256"),
                ec_jwk(kid="e"),  # neither use nor alg: a P-256 key verifies ES256
                rsa_jwk(use="sig"),  # no kid: a token could not name it
                rsa_jwk(kid="enc", use="enc"),
                rsa_jwk(kid="r512", alg="RS512"),  # an algorithm the ESS does not accept
                {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},  # a shared secret, never
                {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
                "not a key",
            ]
        }
    )
    assert {kid: key.algorithm for kid, key in keys.items()} == {"r": "RS256", "e": "ES256"}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "not a JSON Web Key Set"),
        ({"keys": {}}, "not a JSON Web Key Set"),
        ({"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}, "no RS256 or ES256"),
    ],
)
def test_a_document_without_usable_keys_is_an_error(document: Any, message: str) -> None:
    with pytest.raises(JwksError, match=message):
        parse_key_set(document)
