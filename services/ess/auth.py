"""Who is calling ESS, and what they may change (SPEC §2.4).

The published client sends ``authorization: Bearer <OIDC ID token>`` and
``x-goog-user-email``. Only the token is evidence: its ``email`` claim becomes the caller
(``Experiment.creator``, ``original_requester``). The header is a claim the client makes
about itself, so it is never trusted alone, only cross-checked against the token.

Verifiers, chosen by settings (``xmc.settings.AuthSettings``) rather than by the token:

* ``HS256`` with ``XMC_AUTH_HS256_SECRET`` (local runs mint their own tokens);
* ``RS256`` or ``ES256`` with the issuer's key set from ``XMC_AUTH_JWKS_URL`` (production
  OIDC, ``ess.jwks``): the token's ``kid`` picks the key, and the key fixes the one
  algorithm it verifies; a ``kid`` not held waits for at most one rate-limited refetch
  (:meth:`Authenticator.authenticate_after_refresh`, the only path that awaits);
* ``RS256`` or ``ES256`` with the public key in ``XMC_AUTH_PUBLIC_KEY_FILE`` (one fixed
  key); the key's type fixes the one accepted algorithm, so an attacker cannot pick
  the algorithm (``alg: none``, or HS256 keyed with the public key);
* ``XMC_AUTH_STATIC_TOKENS``, opaque tokens mapped to emails, for local runs and CI.

Time checks use an injected clock (30 s leeway), never pyjwt's host clock, so tests can
pin time. Error messages say what is wrong but never echo the token.

Emails are lowercased: the creator stored from one call must match the ACL entry or the
admin list typed in another case.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Final

import jwt

from ess.jwks import ACCEPTED_ALGORITHMS, JwksKeys
from xmc.auth_settings import AuthSettings
from xmc.claims import JwtProblem, TimeProblem, check_claim_times, classify_jwt_error
from xmc.errors import PermissionDeniedError, UnauthenticatedError, UnavailableError
from xmc.model.read_access import (
    ALL_AUTHENTICATED_USERS as ALL_AUTHENTICATED_USERS,  # in writer lists too
)
from xmc.model.read_access import READS_EVERYTHING, ReadScope, caller_principals
from xmc.setting_values import load_public_key
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

AUTHORIZATION: Final = "authorization"
USER_EMAIL_HEADER: Final = "x-goog-user-email"
CLOCK_LEEWAY: Final = timedelta(seconds=30)

Metadata = Iterable[tuple[str, str | bytes]] | Mapping[str, str] | None


@dataclass(frozen=True)
class Identity:
    email: str
    is_admin: bool = False
    #: An internal service (Reconciler, Actuator, jobs posting user messages).
    is_service: bool = False
    #: The caller's groups (the token's XMC_AUTH_GROUPS_CLAIM claim, or
    #: XMC_AUTH_STATIC_GROUPS): whose group quotas its creates count against
    #: (docs/quotas.md) and, when reads are restricted, what it may read.
    groups: frozenset[str] = frozenset()
    #: XMC_READ_AUTHORIZATION=restricted: this caller reads only what :attr:`reads` allows.
    restricted_reads: bool = False

    @cached_property
    def reads(self) -> ReadScope:
        """What this caller may read (decision 0048): everything unless reads are
        restricted; admins and services read everything regardless."""
        if not self.restricted_reads or self.is_admin or self.is_service:
            return READS_EVERYTHING
        return ReadScope(caller_principals(self.email, self.groups))


DEV_IDENTITY: Final = Identity("dev@localhost", is_admin=True, is_service=True)


def development_identity(claimed_email: str | None) -> Identity:
    """Auth disabled (a local run): every caller is an admin, named by the email it claims
    (``x-goog-user-email``, which the published client sends from XMC_USER_EMAIL) so the
    creator a user sees is theirs; ``dev@localhost`` when it claims none. Nothing is
    verified here, so a claim that is not an email is ignored, never stored."""
    email = (claimed_email or "").strip().lower()
    if not _plausible_email(email):
        return DEV_IDENTITY
    return Identity(email, is_admin=True, is_service=True)


def _plausible_email(email: str) -> bool:
    local, at, domain = email.partition("@")
    return bool(at and local and domain) and len(email) <= 254 and email.isprintable()


class UnknownKeyId(UnauthenticatedError):
    """The token names a ``kid`` the issuer's key set (as last fetched) does not hold."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        shown = kid if len(kid) <= 64 and kid.isprintable() else "(unprintable or long)"
        super().__init__(
            f"token is signed with key id {shown!r}, which the issuer's key set "
            "(XMC_AUTH_JWKS_URL) does not hold"
        )


class Authenticator:
    """Turns gRPC invocation metadata into an :class:`Identity` or UnauthenticatedError."""

    def __init__(
        self,
        settings: AuthSettings,
        *,
        clock: Callable[[], datetime] = utc_now,
        jwks: JwksKeys | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._jwks = jwks
        # Lowercased again here so settings built in code (not by load_settings) behave the same.
        self._admins = frozenset(email.lower() for email in settings.admins)
        self._services = self._admins | {email.lower() for email in settings.service_accounts}
        self._static = {token: email.lower() for token, email in settings.static_tokens.items()}
        # Algorithm -> verification key. Only what is configured is accepted.
        self._keys: dict[str, Any] = {}
        if settings.hs256_secret:
            self._keys["HS256"] = settings.hs256_secret
        if settings.public_key_pem:
            algorithm, key = load_public_key(settings.public_key_pem)
            self._keys[algorithm] = key

    def authenticate(self, metadata: Metadata) -> Identity:
        headers = _headers(metadata)
        if self._settings.disabled:
            return development_identity(_single(headers, USER_EMAIL_HEADER))
        token = _bearer_token(headers)
        email = self._static_email(token)
        if email is not None:
            groups = self._settings.static_groups.get(email, frozenset())
        else:
            email, groups = self._token_caller(token)
        claimed = _single(headers, USER_EMAIL_HEADER)
        if claimed is not None and claimed.strip().lower() != email:
            raise UnauthenticatedError(f"{USER_EMAIL_HEADER} does not match the token")
        restricted = self._settings.restricted_reads
        return Identity(
            email,
            is_admin=email in self._admins,
            is_service=email in self._services,
            groups=groups,
            restricted_reads=restricted,
        )

    async def authenticate_after_refresh(
        self, metadata: Metadata, unknown: UnknownKeyId
    ) -> Identity:
        """:meth:`authenticate` again once the issuer's keys have been refetched for the
        ``kid`` it did not know (at most one bounded wait; ``ess.jwks``)."""
        if self._jwks is None:
            raise unknown
        if await self._jwks.refreshed_key(unknown.kid) is None:
            if not self._jwks.loaded:
                raise UnavailableError(
                    "the issuer's signing keys (XMC_AUTH_JWKS_URL) could not be fetched "
                    "yet; try again shortly"
                )
            raise unknown
        return self.authenticate(metadata)

    def _static_email(self, token: str) -> str | None:
        # Compare every entry in constant time, so response timing does not leak a prefix.
        found = None
        for candidate, email in self._static.items():
            if hmac.compare_digest(candidate.encode(), token.encode()):
                found = email
        return found

    def _token_caller(self, token: str) -> tuple[str, frozenset[str]]:
        """The verified token's email and groups."""
        if token.count(".") != 2:
            raise UnauthenticatedError("bearer token is neither a known static token nor a JWT")
        claims = self._decode(token)
        fault = check_claim_times(claims, now=self._clock(), leeway=CLOCK_LEEWAY)
        if fault is not None:
            raise UnauthenticatedError(_TIME_MESSAGES[fault.problem])
        return _email_claim(claims), groups_claim(claims, self._settings.groups_claim)

    def _decode(self, token: str) -> dict[str, Any]:
        settings = self._settings
        try:
            algorithm, key = self._key_for(jwt.get_unverified_header(token))
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=settings.issuer or None,
                audience=settings.audience or None,
                options={
                    # Time is checked against the injected clock (check_claim_times).
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                    "verify_iss": bool(settings.issuer),
                    "verify_aud": bool(settings.audience),
                    "require": ["exp"],
                },
            )
        except jwt.PyJWTError as exc:
            raise UnauthenticatedError(_jwt_error_message(exc)) from None
        return claims

    def _key_for(self, header: Mapping[str, Any]) -> tuple[str, Any]:
        """The header only selects among configured keys; it never introduces an algorithm."""
        algorithm = header.get("alg")
        if not isinstance(algorithm, str):
            raise jwt.InvalidAlgorithmError("algorithm not configured")
        if algorithm in self._keys:
            return algorithm, self._keys[algorithm]
        if self._jwks is None or algorithm not in ACCEPTED_ALGORITHMS:
            raise jwt.InvalidAlgorithmError("algorithm not configured")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise UnauthenticatedError("token header names no signing key ('kid')")
        key = self._jwks.get(kid)
        if key is None:
            raise UnknownKeyId(kid)
        if key.algorithm != algorithm:
            raise jwt.InvalidAlgorithmError("algorithm does not fit the key")
        return algorithm, key.key


# --- authorization (pure) --------------------------------------------------------------


def require_service(identity: Identity, rpc: str) -> None:
    """Internal RPCs (UpdateWorkUnitExecutions, SchedulingService) are for our services only."""
    if not identity.is_service:
        raise PermissionDeniedError(f"{rpc}: {identity.email} is not a service identity")


def acl_writer_emails(acls: XidAcls) -> list[str]:
    """Emails that may change an experiment according to its ACL: owners and writers.

    ``user`` and ``service_account`` principals are emails. ``all_authenticated_users``
    becomes :data:`ALL_AUTHENTICATED_USERS`. Groups and domains grant nothing: ESS has no
    directory to resolve them, and guessing would widen access.
    """
    emails: list[str] = []
    for role in (*acls.owners, *acls.writers):
        principal = role.WhichOneof("principal")
        if principal in ("user", "service_account"):
            emails.append(getattr(role, principal).strip().lower())
        elif principal == "all_authenticated_users" and role.all_authenticated_users:
            emails.append(ALL_AUTHENTICATED_USERS)
    return emails


def can_write_experiment(identity: Identity, *, creator: str, writers: Sequence[str]) -> bool:
    """Admin, creator, or a listed writer; :data:`ALL_AUTHENTICATED_USERS` admits anyone."""
    email = identity.email.lower()
    return (
        identity.is_admin
        or email == creator.lower()
        or ALL_AUTHENTICATED_USERS in writers
        or email in (writer.lower() for writer in writers)
    )


def require_experiment_writer(
    identity: Identity, *, experiment_name: str, creator: str, writers: Sequence[str]
) -> None:
    if not can_write_experiment(identity, creator=creator, writers=writers):
        raise PermissionDeniedError(
            f"{experiment_name}: {identity.email} may not change this experiment "
            "(only its creator, an ACL owner or writer, or an admin)"
        )


def require_admin(identity: Identity, rpc: str) -> None:
    """PERMISSION_DENIED unless ``identity`` is an admin (XMC_AUTH_ADMINS)."""
    if not identity.is_admin:
        raise PermissionDeniedError(f"{rpc}: {identity.email} is not an admin (XMC_AUTH_ADMINS)")


def require_writer_of(identity: Identity, experiment: Experiment) -> None:
    """:func:`require_experiment_writer` on an experiment as the store returns it."""
    require_experiment_writer(
        identity,
        experiment_name=experiment.name,
        creator=experiment.creator,
        writers=acl_writer_emails(experiment.acls),
    )


# --- token checks ----------------------------------------------------------------------

_JWT_MESSAGES: Final[Mapping[JwtProblem, str]] = {
    JwtProblem.BAD_SIGNATURE: "token signature is invalid",
    JwtProblem.BAD_ALGORITHM: "token algorithm is not accepted",
    JwtProblem.MALFORMED: "malformed bearer token",
    JwtProblem.WRONG_ISSUER: "token issuer is not accepted",
    JwtProblem.WRONG_AUDIENCE: "token audience is not accepted",
    JwtProblem.KEY_MISMATCH: "token algorithm does not fit the configured key",
}
_TIME_MESSAGES: Final[Mapping[TimeProblem, str]] = {
    TimeProblem.NOT_A_NUMBER: "token exp, iat and nbf must be numbers",
    TimeProblem.EXPIRED: "token has expired",
    TimeProblem.NOT_YET_VALID: "token is not yet valid",
}


def _jwt_error_message(exc: jwt.PyJWTError) -> str:
    fault = classify_jwt_error(exc)
    if fault.problem is JwtProblem.MISSING_CLAIM:
        return f"token lacks the {fault.claim!r} claim"
    return _JWT_MESSAGES.get(fault.problem, "invalid bearer token")


def groups_claim(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """The groups a token lists under ``name``: a list of strings, or one string (as some
    providers send a single group); anything else, or no such claim, is no groups."""
    value = claims.get(name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return frozenset()
    return frozenset(g.strip() for g in value if isinstance(g, str) and g.strip())


def _email_claim(claims: Mapping[str, Any]) -> str:
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise UnauthenticatedError("token has no email claim")
    # Some providers send the flag as a string; absent means the provider vouches for it.
    if claims.get("email_verified") in (False, "false"):
        raise UnauthenticatedError("token email is not verified")
    return email.strip().lower()


# --- metadata --------------------------------------------------------------------------


def _headers(metadata: Metadata) -> dict[str, list[str]]:
    """gRPC metadata as lowercase name -> values; a name may repeat."""
    if metadata is None:
        return {}
    pairs = metadata.items() if isinstance(metadata, Mapping) else metadata
    headers: dict[str, list[str]] = {}
    for name, value in pairs:
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                raise UnauthenticatedError(f"{name.lower()} header is not text") from None
        headers.setdefault(name.lower(), []).append(value)
    return headers


def _single(headers: Mapping[str, list[str]], name: str) -> str | None:
    values = headers.get(name, [])
    if len(values) > 1:
        # Two answers to "who is this" is an ambiguity a proxy could exploit; refuse it.
        raise UnauthenticatedError(f"more than one {name} header")
    return values[0] if values else None


def _bearer_token(headers: Mapping[str, list[str]]) -> str:
    value = (_single(headers, AUTHORIZATION) or "").strip()
    if not value:
        raise UnauthenticatedError("missing bearer token")
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise UnauthenticatedError("malformed authorization header: expected 'Bearer <token>'")
    return token
