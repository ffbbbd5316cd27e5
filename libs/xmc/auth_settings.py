"""How the ESS authenticates callers (``ess.auth``, SPEC §2.4): the ``XMC_AUTH_*``
variables, read by :func:`xmc.settings.load_settings` like every other group; in a module
of its own because its checks (key sizes, the JWKS URL and what must come with it) are
most of its length."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from xmc.errors import InvalidArgumentError
from xmc.setting_values import (
    PUBLIC_KEY_VARIABLE,
    Env,
    ReadFile,
    emails,
    flag,
    load_public_key,
    memberships,
    read_authorization,
    read_key_file,
    seconds,
    static_tokens,
)

READ_AUTHORIZATION_VARIABLE: Final = "XMC_READ_AUTHORIZATION"
MIN_HS256_SECRET_BYTES: Final = 32  # RFC 7518 §3.2: at least the hash output size


@dataclass(frozen=True)
class AuthSettings:
    """How the ESS authenticates callers (``ess.auth``, SPEC §2.4)."""

    #: XMC_AUTH_DISABLED — development only: every caller is an admin, named by the
    #: x-goog-user-email it sends (else ``dev@localhost``).
    disabled: bool = False
    #: XMC_AUTH_HS256_SECRET — verifies HS256 ID tokens (local runs); >= 32 bytes.
    hs256_secret: str = field(default="", repr=False)
    #: Contents of XMC_AUTH_PUBLIC_KEY_FILE — an RSA or P-256 public key (PEM) for OIDC tokens.
    public_key_pem: str = ""
    #: XMC_AUTH_JWKS_URL — the issuer's JSON Web Key Set (its discovery document's
    #: ``jwks_uri``) for OIDC tokens: fetched in the background, cached, refetched every
    #: XMC_AUTH_JWKS_REFRESH_SECONDS and when a token names an unknown ``kid``. Needs
    #: XMC_AUTH_ISSUER and XMC_AUTH_AUDIENCE; ``https://`` (``http://`` on loopback only).
    jwks_url: str = ""
    #: XMC_AUTH_JWKS_REFRESH_SECONDS — how long a fetched key set is used before it is
    #: fetched again (a failed fetch keeps the old keys and is retried sooner).
    jwks_refresh_seconds: float = 900.0
    #: Least seconds between two fetches that unknown ``kid``s ask for (so a flood of
    #: made-up key ids costs the issuer one request per interval).
    jwks_min_refetch_seconds: float = 30.0
    #: Seconds an RPC whose token names an unknown ``kid`` waits for the fetch it asked for.
    jwks_wait_seconds: float = 3.0
    #: XMC_AUTH_ISSUER — required ``iss`` when non-empty.
    issuer: str = ""
    #: XMC_AUTH_AUDIENCE — required ``aud`` when non-empty.
    audience: str = ""
    #: XMC_AUTH_STATIC_TOKENS — ``token=email,token2=email2``, for local runs and CI.
    static_tokens: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: XMC_AUTH_ADMINS — comma-separated emails allowed to change any experiment.
    admins: frozenset[str] = frozenset()
    #: XMC_AUTH_SERVICE_ACCOUNTS — comma-separated emails allowed on internal RPCs.
    service_accounts: frozenset[str] = frozenset()
    #: XMC_READ_AUTHORIZATION — ``off`` (default: any authenticated caller reads every
    #: experiment) or ``restricted``: an experiment is readable only by its creator, the
    #: principals of its ACL, admins and services, on every surface (decision 0048).
    restricted_reads: bool = False
    #: XMC_AUTH_GROUPS_CLAIM — the JWT claim listing the caller's groups (a list of
    #: strings, or one string): group quotas (docs/quotas.md) and restricted reads.
    groups_claim: str = "groups"
    #: XMC_AUTH_STATIC_GROUPS — ``email=group,…`` (an email may repeat): the groups of
    #: static-token callers, which carry no claims (tests, CI, local runs).
    static_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def _from_env(cls, env: Env, read_file: ReadFile) -> AuthSettings:
        key_path = env.get(PUBLIC_KEY_VARIABLE, "").strip()
        return cls(
            disabled=flag(env, "XMC_AUTH_DISABLED"),
            hs256_secret=env.get("XMC_AUTH_HS256_SECRET", ""),
            public_key_pem=read_key_file(key_path, read_file) if key_path else "",
            jwks_url=env.get("XMC_AUTH_JWKS_URL", "").strip(),
            jwks_refresh_seconds=seconds(
                env, "XMC_AUTH_JWKS_REFRESH_SECONDS", cls.jwks_refresh_seconds
            ),
            issuer=env.get("XMC_AUTH_ISSUER", "").strip(),
            audience=env.get("XMC_AUTH_AUDIENCE", "").strip(),
            static_tokens=static_tokens(env, "XMC_AUTH_STATIC_TOKENS"),
            admins=emails(env, "XMC_AUTH_ADMINS"),
            service_accounts=emails(env, "XMC_AUTH_SERVICE_ACCOUNTS"),
            restricted_reads=read_authorization(env, READ_AUTHORIZATION_VARIABLE),
            groups_claim=env.get("XMC_AUTH_GROUPS_CLAIM", "").strip() or cls.groups_claim,
            static_groups=memberships(env, "XMC_AUTH_STATIC_GROUPS"),
        )

    def validate(self) -> None:
        """Each value that is set is usable (fail at startup rather than on every call)."""
        if self.hs256_secret and len(self.hs256_secret.encode()) < MIN_HS256_SECRET_BYTES:
            raise InvalidArgumentError(
                f"XMC_AUTH_HS256_SECRET: must be at least {MIN_HS256_SECRET_BYTES} bytes "
                "(RFC 7518 §3.2)"
            )
        if self.public_key_pem:
            load_public_key(self.public_key_pem)
        if self.jwks_url:
            self._validate_jwks()

    def _validate_jwks(self) -> None:
        if self.public_key_pem:
            raise InvalidArgumentError(
                "XMC_AUTH_JWKS_URL: set it or XMC_AUTH_PUBLIC_KEY_FILE, not both (the key "
                "set holds the issuer's current keys)"
            )
        url = urlsplit(self.jwks_url)
        loopback = url.hostname in ("localhost", "127.0.0.1", "::1")
        if not url.hostname or not (url.scheme == "https" or (url.scheme == "http" and loopback)):
            raise InvalidArgumentError(
                "XMC_AUTH_JWKS_URL: must be an https:// URL (http:// only on loopback), "
                f"got {self.jwks_url!r}"
            )
        # A public provider's keys sign tokens for every application it serves: without
        # both checks, any of its tokens would be accepted here.
        for variable, value in (
            ("XMC_AUTH_ISSUER", self.issuer),
            ("XMC_AUTH_AUDIENCE", self.audience),
        ):
            if not value:
                raise InvalidArgumentError(
                    f"{variable}: required with XMC_AUTH_JWKS_URL (the issuer's tokens "
                    "are accepted only for this issuer and audience)"
                )
        if not 60 <= self.jwks_refresh_seconds <= 86400:
            raise InvalidArgumentError(
                "XMC_AUTH_JWKS_REFRESH_SECONDS: must be between 60 and 86400 seconds, "
                f"got {self.jwks_refresh_seconds!r}"
            )

    def require_verifier(self) -> None:
        """The ESS's own check: some way to authenticate callers is configured."""
        if not (
            self.disabled
            or self.hs256_secret
            or self.public_key_pem
            or self.jwks_url
            or self.static_tokens
        ):
            raise InvalidArgumentError(
                "XMC_AUTH_*: no way to authenticate callers; set XMC_AUTH_HS256_SECRET, "
                "XMC_AUTH_JWKS_URL, XMC_AUTH_PUBLIC_KEY_FILE or XMC_AUTH_STATIC_TOKENS "
                "(or XMC_AUTH_DISABLED=true for development)"
            )
