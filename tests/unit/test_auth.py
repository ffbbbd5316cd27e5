"""Caller identity and write permission (SPEC §2.4)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from ess.auth import (
    ALL_AUTHENTICATED_USERS,
    DEV_IDENTITY,
    Authenticator,
    Identity,
    Metadata,
    acl_writer_emails,
    can_write_experiment,
    require_experiment_writer,
    require_service,
)
from xmc.auth_settings import AuthSettings
from xmc.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError
from xmc.setting_values import ReadFile
from xmc.settings import load_settings
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
SECRET = "s" * 32
ISSUER = "https://issuer.example.com"
AUDIENCE = "xmc"

SETTINGS = AuthSettings(
    hs256_secret=SECRET,
    issuer=ISSUER,
    audience=AUDIENCE,
    static_tokens={"ci-token": "ci@example.com"},
    admins=frozenset({"root@example.com"}),
    service_accounts=frozenset({"reconciler@xmc.example.com"}),
)


def at(delta: timedelta = timedelta()) -> int:
    return int((NOW + delta).timestamp())


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": at(),
        "exp": at(timedelta(hours=1)),
        "email": "Alice@Example.com",
        "email_verified": True,
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def mint(key: Any = SECRET, algorithm: str = "HS256", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm=algorithm)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: Mapping[str, Any], body: Mapping[str, Any], key: str) -> str:
    """HMAC-SHA256 over an arbitrary header: the algorithm-confusion attacker's token."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(body).encode())}"
    signature = hmac.new(key.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def bearer(token: str) -> list[tuple[str, str | bytes]]:
    return [("authorization", f"Bearer {token}")]


def authenticate(metadata: Metadata, settings: AuthSettings = SETTINGS) -> Identity:
    return Authenticator(settings, clock=lambda: NOW).authenticate(metadata)


ALICE = Identity("alice@example.com")
GOOD = mint()


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        # Accepted.
        pytest.param(bearer(GOOD), ALICE, id="valid ID token; email lowercased"),
        pytest.param(
            [*bearer(GOOD), ("x-goog-user-email", "alice@EXAMPLE.com")],
            ALICE,
            id="user-email header agrees with the token",
        ),
        pytest.param({"authorization": f"Bearer {GOOD}"}, ALICE, id="metadata as a mapping"),
        pytest.param(
            [("Authorization", f"bearer {GOOD}".encode())],
            ALICE,
            id="bytes value, mixed-case name and scheme",
        ),
        pytest.param(bearer(mint(aud=["other", AUDIENCE])), ALICE, id="our audience among several"),
        pytest.param(
            bearer(mint(exp=at(timedelta(seconds=-29)))), ALICE, id="expired within the leeway"
        ),
        pytest.param(bearer(mint(email_verified=None)), ALICE, id="no email_verified claim"),
        pytest.param(
            bearer("ci-token"), Identity("ci@example.com"), id="static token maps to its email"
        ),
        pytest.param(
            bearer(mint(email="root@example.com")),
            Identity("root@example.com", is_admin=True, is_service=True),
            id="admins are also service identities",
        ),
        pytest.param(
            bearer(mint(email="reconciler@xmc.example.com")),
            Identity("reconciler@xmc.example.com", is_service=True),
            id="service account",
        ),
        # Missing or malformed header.
        pytest.param(None, "missing bearer token", id="no metadata"),
        pytest.param([], "missing bearer token", id="empty metadata"),
        pytest.param([("authorization", "  ")], "missing bearer token", id="blank header"),
        pytest.param(
            [("x-goog-user-email", "alice@example.com")],
            "missing bearer token",
            id="user-email header alone is never trusted",
        ),
        pytest.param(
            [("authorization", f"Basic {GOOD}")],
            "malformed authorization header",
            id="not a bearer scheme",
        ),
        pytest.param(
            [("authorization", "Bearer")], "malformed authorization header", id="no token"
        ),
        pytest.param(
            [*bearer(GOOD), *bearer(GOOD)],
            "more than one authorization header",
            id="repeated authorization header",
        ),
        pytest.param(
            [("authorization", b"Bearer \xff")], "header is not text", id="undecodable bytes"
        ),
        pytest.param(
            bearer("wrong-token"),
            "neither a known static token nor a JWT",
            id="unknown static token",
        ),
        pytest.param(bearer("a.b.c"), "malformed bearer token", id="garbage in JWT shape"),
        # Signature and algorithm.
        pytest.param(
            bearer(mint(key="x" * 32)), "token signature is invalid", id="signed with another key"
        ),
        pytest.param(
            bearer(mint(key=None, algorithm="none")),
            "token algorithm is not accepted",
            id="alg none",
        ),
        pytest.param(
            bearer(mint(key=SECRET * 2, algorithm="HS512")),
            "token algorithm is not accepted",
            id="HS512 with the right secret",
        ),
        pytest.param(
            bearer(handmade({"alg": "RS256", "typ": "JWT"}, claims(), SECRET)),
            "token algorithm is not accepted",
            id="RS256 header when no public key is configured",
        ),
        # Claims.
        pytest.param(
            bearer(mint(exp=at(timedelta(seconds=-30)))),
            "token has expired",
            id="expired past the leeway",
        ),
        pytest.param(bearer(mint(exp=None)), "token lacks the 'exp' claim", id="no expiry"),
        pytest.param(bearer(mint(exp="soon")), "must be numbers", id="non-numeric expiry"),
        pytest.param(
            bearer(mint(iat=at(timedelta(minutes=5)))),
            "token is not yet valid",
            id="issued in the future",
        ),
        pytest.param(
            bearer(mint(nbf=at(timedelta(minutes=5)))),
            "token is not yet valid",
            id="not before the future",
        ),
        pytest.param(
            bearer(mint(iss="https://evil.example.com")),
            "token issuer is not accepted",
            id="wrong issuer",
        ),
        pytest.param(bearer(mint(iss=None)), "token lacks the 'iss' claim", id="no issuer"),
        pytest.param(
            bearer(mint(aud="someone-else")), "token audience is not accepted", id="wrong audience"
        ),
        pytest.param(bearer(mint(aud=None)), "token lacks the 'aud' claim", id="no audience"),
        pytest.param(bearer(mint(email=None)), "token has no email claim", id="no email"),
        pytest.param(bearer(mint(email="alice")), "token has no email claim", id="not an email"),
        pytest.param(
            bearer(mint(email_verified=False)), "email is not verified", id="unverified email"
        ),
        pytest.param(
            bearer(mint(email_verified="false")),
            "email is not verified",
            id="unverified email as a string",
        ),
        # Header cross-check.
        pytest.param(
            [*bearer(GOOD), ("x-goog-user-email", "bob@example.com")],
            "x-goog-user-email does not match the token",
            id="user-email header names someone else",
        ),
        pytest.param(
            [*bearer("ci-token"), ("x-goog-user-email", "bob@example.com")],
            "does not match the token",
            id="static token with someone else's header",
        ),
        pytest.param(
            [*bearer(GOOD), ("x-goog-user-email", "a@x"), ("x-goog-user-email", "b@x")],
            "more than one x-goog-user-email header",
            id="repeated user-email header",
        ),
    ],
)
def test_authenticate(metadata: Metadata, expected: Identity | str) -> None:
    if isinstance(expected, Identity):
        assert authenticate(metadata) == expected
        return
    with pytest.raises(UnauthenticatedError, match=expected) as caught:
        authenticate(metadata)
    token = dict(metadata or {}).get("authorization", "")
    secret_part = str(token).removeprefix("Bearer ").strip()
    if len(secret_part) > 8:
        assert secret_part not in str(caught.value), "messages never echo the token"


def test_audience_and_issuer_are_optional_when_unconfigured() -> None:
    settings = AuthSettings(hs256_secret=SECRET)

    assert authenticate(bearer(mint(iss="anyone", aud="anything")), settings) == ALICE


def test_disabled_auth_makes_everyone_the_dev_admin() -> None:
    settings = AuthSettings(disabled=True)

    assert authenticate(None, settings) == DEV_IDENTITY
    assert authenticate(bearer("garbage"), settings) == DEV_IDENTITY
    assert Identity("dev@localhost", is_admin=True, is_service=True) == DEV_IDENTITY


@pytest.mark.parametrize(
    ("claimed", "email"),
    [
        ("You@Example.com", "you@example.com"),  # what XMC_USER_EMAIL sends, lowercased
        ("  you@example.com ", "you@example.com"),
        ("", "dev@localhost"),
        ("not-an-email", "dev@localhost"),
        ("@example.com", "dev@localhost"),
        ("you@", "dev@localhost"),
        ("a\nb@example.com", "dev@localhost"),
        ("x" * 250 + "@example.com", "dev@localhost"),
    ],
)
def test_disabled_auth_names_the_caller_by_the_email_it_claims(claimed: str, email: str) -> None:
    metadata = [*bearer("dev"), ("x-goog-user-email", claimed)]
    assert authenticate(metadata, AuthSettings(disabled=True)) == Identity(
        email, is_admin=True, is_service=True
    )


def test_settings_built_in_code_compare_emails_case_insensitively() -> None:
    settings = AuthSettings(
        static_tokens={"ci-token": "Root@Example.com"}, admins=frozenset({"ROOT@example.com"})
    )

    assert authenticate(bearer("ci-token"), settings) == Identity(
        "root@example.com", is_admin=True, is_service=True
    )


def test_no_verifier_rejects_every_jwt() -> None:
    with pytest.raises(UnauthenticatedError, match="algorithm is not accepted"):
        authenticate(bearer(GOOD), AuthSettings())


def test_the_clock_is_read_per_call() -> None:
    now = [NOW]
    authenticator = Authenticator(AuthSettings(hs256_secret=SECRET), clock=lambda: now[0])
    token = mint(iss=None, aud=None, exp=at(timedelta(minutes=1)))
    assert authenticator.authenticate(bearer(token)) == ALICE

    now[0] = NOW + timedelta(minutes=2)

    with pytest.raises(UnauthenticatedError, match="expired"):
        authenticator.authenticate(bearer(token))


# --- RS256 / ES256 (needs pyjwt[crypto]) -----------------------------------------------


def _keypair(kind: str) -> tuple[Any, str]:
    """A private key object and its public PEM; skips when cryptography is absent."""
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    asymmetric = pytest.importorskip("cryptography.hazmat.primitives.asymmetric")
    if kind == "rsa":
        private = asymmetric.rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        curve = asymmetric.ec.SECP256R1() if kind == "p256" else asymmetric.ec.SECP384R1()
        private = asymmetric.ec.generate_private_key(curve)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, pem.decode()


@pytest.mark.parametrize(
    ("kind", "algorithm"),
    [pytest.param("rsa", "RS256", id="RSA key"), pytest.param("p256", "ES256", id="P-256 key")],
)
def test_public_key_verifies_its_own_algorithm_only(kind: str, algorithm: str) -> None:
    private, pem = _keypair(kind)
    other, _ = _keypair("p256" if kind == "rsa" else "rsa")
    other_algorithm = "ES256" if kind == "rsa" else "RS256"
    settings = AuthSettings(public_key_pem=pem, issuer=ISSUER, audience=AUDIENCE)

    assert authenticate(bearer(mint(key=private, algorithm=algorithm)), settings) == ALICE
    with pytest.raises(UnauthenticatedError, match="algorithm is not accepted"):
        authenticate(bearer(mint(key=other, algorithm=other_algorithm)), settings)
    with pytest.raises(UnauthenticatedError, match="algorithm is not accepted"):
        # Classic confusion: HS256 keyed with the (public) PEM.
        authenticate(bearer(handmade({"alg": "HS256"}, claims(), pem)), settings)
    with pytest.raises(UnauthenticatedError, match="signature is invalid"):
        authenticate(bearer(mint(key=_keypair(kind)[0], algorithm=algorithm)), settings)


@pytest.mark.parametrize(
    ("pem", "fragment"),
    [
        pytest.param("not a key", "not an RSA or P-256", id="garbage"),
        pytest.param("-----BEGIN PRIVATE KEY-----\n…", "private key", id="a private key"),
        pytest.param("p384", "not an RSA or P-256", id="EC key on the wrong curve"),
    ],
)
def test_bad_public_keys_are_refused_at_load(pem: str, fragment: str) -> None:
    pytest.importorskip("cryptography")
    if pem == "p384":
        pem = _keypair("p384")[1]

    with pytest.raises(InvalidArgumentError, match=f"XMC_AUTH_PUBLIC_KEY_FILE: .*{fragment}"):
        AuthSettings(public_key_pem=pem).validate()


# --- settings ------------------------------------------------------------------------


def auth_from_env(env: dict[str, str], read_file: ReadFile | None = None) -> AuthSettings:
    """What the ESS takes from the environment (``EssOptions.from_settings``)."""
    auth = load_settings(env, read_file=read_file).auth
    auth.require_verifier()
    return auth


def test_from_env_parses_every_variable() -> None:
    env = {
        "XMC_AUTH_DISABLED": "false",
        "XMC_AUTH_HS256_SECRET": SECRET,
        "XMC_AUTH_ISSUER": f" {ISSUER} ",
        "XMC_AUTH_AUDIENCE": AUDIENCE,
        "XMC_AUTH_STATIC_TOKENS": "t1=CI@example.com, t2 = bot@example.com ,",
        "XMC_AUTH_ADMINS": "Root@Example.com,ops@example.com",
        "XMC_AUTH_SERVICE_ACCOUNTS": "reconciler@xmc.example.com",
    }

    assert auth_from_env(env) == AuthSettings(
        hs256_secret=SECRET,
        issuer=ISSUER,
        audience=AUDIENCE,
        static_tokens={"t1": "ci@example.com", "t2": "bot@example.com"},
        admins=frozenset({"root@example.com", "ops@example.com"}),
        service_accounts=frozenset({"reconciler@xmc.example.com"}),
    )


def test_from_env_reads_the_public_key_file() -> None:
    _, pem = _keypair("rsa")
    env = {"XMC_AUTH_PUBLIC_KEY_FILE": "/keys/oidc.pem"}

    settings = auth_from_env(env, read_file={"/keys/oidc.pem": pem}.__getitem__)

    assert settings.public_key_pem == pem


def test_disabled_needs_nothing_else() -> None:
    assert auth_from_env({"XMC_AUTH_DISABLED": "true"}) == AuthSettings(disabled=True)


def _unreadable(path: str) -> str:
    raise FileNotFoundError(2, "No such file or directory", path)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        pytest.param({}, "XMC_AUTH_\\*: no way to authenticate", id="nothing configured"),
        pytest.param(
            {"XMC_AUTH_DISABLED": "maybe"}, "XMC_AUTH_DISABLED: expected true or false", id="flag"
        ),
        pytest.param(
            {"XMC_AUTH_HS256_SECRET": "short"},
            "XMC_AUTH_HS256_SECRET: must be at least 32 bytes",
            id="short secret",
        ),
        pytest.param(
            {"XMC_AUTH_STATIC_TOKENS": "ok=a@b,sekrit"},
            "XMC_AUTH_STATIC_TOKENS: entry 2 must be token=email",
            id="static entry without an email",
        ),
        pytest.param(
            {"XMC_AUTH_STATIC_TOKENS": "sekrit=alice"},
            "XMC_AUTH_STATIC_TOKENS: entry 1 must be token=email",
            id="static entry mapping to a non-email",
        ),
        pytest.param(
            {"XMC_AUTH_STATIC_TOKENS": "=a@b"},
            "XMC_AUTH_STATIC_TOKENS: entry 1 must be token=email",
            id="static entry without a token",
        ),
        pytest.param(
            {"XMC_AUTH_STATIC_TOKENS": "sekrit=a@b,sekrit=c@d"},
            "XMC_AUTH_STATIC_TOKENS: entry 2 repeats an earlier token",
            id="repeated static token",
        ),
        pytest.param(
            {"XMC_AUTH_DISABLED": "1", "XMC_AUTH_ADMINS": "root"},
            "XMC_AUTH_ADMINS: not an email: 'root'",
            id="admin that is not an email",
        ),
        pytest.param(
            {"XMC_AUTH_DISABLED": "1", "XMC_AUTH_SERVICE_ACCOUNTS": "a@b,,reconciler"},
            "XMC_AUTH_SERVICE_ACCOUNTS: not an email",
            id="service account that is not an email",
        ),
        pytest.param(
            {"XMC_AUTH_PUBLIC_KEY_FILE": "/missing.pem"},
            "XMC_AUTH_PUBLIC_KEY_FILE: cannot read '/missing.pem'",
            id="unreadable key file",
        ),
        pytest.param(
            {"XMC_AUTH_PUBLIC_KEY_FILE": "/garbage.pem"},
            "XMC_AUTH_PUBLIC_KEY_FILE: ",
            id="key file without a usable key",
        ),
    ],
)
def test_from_env_rejects_malformed_values(env: dict[str, str], fragment: str) -> None:
    def read_file(path: str) -> str:
        return "garbage" if path == "/garbage.pem" else _unreadable(path)

    with pytest.raises(InvalidArgumentError, match=fragment) as caught:
        auth_from_env(env, read_file=read_file)

    assert "sekrit" not in str(caught.value), "messages never echo a token"


def test_settings_repr_hides_secrets() -> None:
    text = repr(AuthSettings(hs256_secret=SECRET, static_tokens={"sekrit": "a@b"}))

    assert SECRET not in text
    assert "sekrit" not in text


# --- authorization -------------------------------------------------------------------


def role(**principal: Any) -> XidAcls.Role:
    return XidAcls.Role(**principal)


def test_acl_writer_emails_takes_owners_and_writers() -> None:
    acls = XidAcls(
        owners=[role(user="Owner@Example.com")],
        writers=[
            role(user="writer@example.com"),
            role(service_account="bot@xmc.example.com"),
            role(group="team@example.com"),
            role(domain="example.com"),
            role(inherit_from_parent=True),
        ],
        readers=[role(user="reader@example.com"), role(all_authenticated_users=True)],
    )

    assert acl_writer_emails(acls) == [
        "owner@example.com",
        "writer@example.com",
        "bot@xmc.example.com",
    ]


def test_acl_all_authenticated_writers_become_the_sentinel() -> None:
    acls = XidAcls(writers=[role(all_authenticated_users=True), role(user=ALL_AUTHENTICATED_USERS)])

    assert acl_writer_emails(acls) == [ALL_AUTHENTICATED_USERS, "allauthenticatedusers"]


@pytest.mark.parametrize(
    ("identity", "writers", "allowed"),
    [
        pytest.param(Identity("alice@example.com"), [], True, id="creator"),
        pytest.param(Identity("ALICE@example.com"), [], True, id="creator in another case"),
        pytest.param(Identity("bob@example.com"), ["bob@example.com"], True, id="listed writer"),
        pytest.param(Identity("Bob@example.com"), ["bob@EXAMPLE.com"], True, id="writer, any case"),
        pytest.param(Identity("bob@example.com"), ["carol@example.com"], False, id="stranger"),
        pytest.param(
            Identity("root@example.com", is_admin=True, is_service=True), [], True, id="admin"
        ),
        pytest.param(
            Identity("reconciler@xmc.example.com", is_service=True),
            [],
            False,
            id="a service identity is not a writer",
        ),
        pytest.param(
            Identity("bob@example.com"),
            [ALL_AUTHENTICATED_USERS],
            True,
            id="all authenticated users may write",
        ),
        pytest.param(
            Identity("bob@example.com"),
            ["allauthenticatedusers"],
            False,
            id="a user entry that merely spells the sentinel grants nothing",
        ),
    ],
)
def test_can_write_experiment(identity: Identity, writers: list[str], allowed: bool) -> None:
    assert can_write_experiment(identity, creator="alice@example.com", writers=writers) is allowed


def test_require_experiment_writer_names_the_experiment() -> None:
    require_experiment_writer(
        ALICE, experiment_name="experiments/7", creator="alice@example.com", writers=[]
    )

    with pytest.raises(
        PermissionDeniedError, match=re.escape("experiments/7: bob@example.com may not")
    ):
        require_experiment_writer(
            Identity("bob@example.com"),
            experiment_name="experiments/7",
            creator="alice@example.com",
            writers=[],
        )


def test_require_service() -> None:
    require_service(Identity("reconciler@xmc.example.com", is_service=True), "Update")

    with pytest.raises(
        PermissionDeniedError,
        match=re.escape("UpdateWorkUnitExecutions: alice@example.com is not a service identity"),
    ):
        require_service(ALICE, "UpdateWorkUnitExecutions")
