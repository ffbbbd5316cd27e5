"""The JWT checks both of XMC's verifiers share: ESS's caller tokens (``ess.auth``) and
the Actuator's signed tasks (``xmc.tasks``).

Each returns what is wrong as data (a small enum plus the claim it is about), never a
message: the callers word their own errors and codes, which their clients and tests pin.
Time is judged against an injected ``now`` with a leeway, never pyjwt's host clock, so
both verifiers decode with ``verify_exp``/``verify_iat``/``verify_nbf`` off and call
:func:`check_claim_times` afterwards.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import jwt

from xmc.timestamps import as_utc

#: Claims that carry times (RFC 7519 §4.1.4–4.1.6); ``exp`` is required by both callers.
TIME_CLAIMS: Final = ("exp", "iat", "nbf")


class TimeProblem(enum.Enum):
    """Why a token's times do not admit it at ``now``."""

    NOT_A_NUMBER = "not_a_number"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"


@dataclass(frozen=True)
class TimeFault:
    problem: TimeProblem
    #: The claim at fault: ``exp`` for EXPIRED, ``iat`` or ``nbf`` for NOT_YET_VALID.
    claim: str = ""
    #: That claim's value (seconds since the epoch); None for NOT_A_NUMBER.
    value: float | None = None


def check_claim_times(
    claims: Mapping[str, Any], *, now: datetime, leeway: timedelta
) -> TimeFault | None:
    """None when ``exp``, ``iat`` and ``nbf`` admit the token at ``now`` (± ``leeway``).

    ``exp`` must be present (both callers make pyjwt require it). A naive ``now`` is UTC, as
    everywhere in xmc, never host-local time.
    """
    times = {name: claims[name] for name in TIME_CLAIMS if name in claims}
    if not all(_is_number(value) for value in times.values()):
        return TimeFault(TimeProblem.NOT_A_NUMBER)
    now_s = as_utc(now).timestamp()
    slack = leeway.total_seconds()
    # RFC 7519 §4.1.4: exp is the first instant at which the token is no longer accepted.
    if now_s >= times["exp"] + slack:
        return TimeFault(TimeProblem.EXPIRED, "exp", times["exp"])
    for name in ("iat", "nbf"):
        if name in times and times[name] > now_s + slack:
            return TimeFault(TimeProblem.NOT_YET_VALID, name, times[name])
    return None


class JwtProblem(enum.Enum):
    """What a ``jwt.decode`` failure means, whatever pyjwt class reported it."""

    BAD_SIGNATURE = "bad_signature"
    BAD_ALGORITHM = "bad_algorithm"
    MALFORMED = "malformed"
    WRONG_ISSUER = "wrong_issuer"
    WRONG_AUDIENCE = "wrong_audience"
    KEY_MISMATCH = "key_mismatch"
    MISSING_CLAIM = "missing_claim"
    OTHER = "other"


@dataclass(frozen=True)
class JwtFault:
    problem: JwtProblem
    #: The required claim that is absent (MISSING_CLAIM only).
    claim: str = ""


# Order matters: InvalidSignatureError is a DecodeError, and every class is an InvalidTokenError.
_JWT_PROBLEMS: Final[tuple[tuple[type[jwt.PyJWTError], JwtProblem], ...]] = (
    (jwt.InvalidSignatureError, JwtProblem.BAD_SIGNATURE),
    (jwt.InvalidAlgorithmError, JwtProblem.BAD_ALGORITHM),
    (jwt.DecodeError, JwtProblem.MALFORMED),
    (jwt.InvalidIssuerError, JwtProblem.WRONG_ISSUER),
    (jwt.InvalidAudienceError, JwtProblem.WRONG_AUDIENCE),
    (jwt.InvalidKeyError, JwtProblem.KEY_MISMATCH),
)


def classify_jwt_error(exc: jwt.PyJWTError) -> JwtFault:
    """The :class:`JwtFault` behind a pyjwt exception (most specific class first)."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return JwtFault(JwtProblem.MISSING_CLAIM, exc.claim)
    for error_type, problem in _JWT_PROBLEMS:
        if isinstance(exc, error_type):
            return JwtFault(problem)
    return JwtFault(JwtProblem.OTHER)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
