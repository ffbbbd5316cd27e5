"""Signed tasks on the ``xmc-tasks-stream`` (SPEC §6).

Anyone who can ``XADD`` to Redis could otherwise make the Actuator create or delete
JobSets, so every entry carries a JWT (HS256, key ``XMC_TASK_SIGNING_KEY``) next to the
serialized ``Task``. The token does not embed the task: it signs the SHA-256 ``digest`` of
the exact bytes in the entry, so verification never re-serializes (protobuf serialization
is not canonical across versions) and a flipped bit anywhere in the task is caught.

Entry layout (a Redis stream field map)::

    {"task": <Task bytes>, "token": <JWT>}

Other fields are ignored, so the stream can grow metadata without breaking verification.

Verification is ordered from "who made this" to "is it still current": signature,
issuer, audience, digest, then time. A task that fails is reported as :class:`TaskRejected`
with a low-cardinality :class:`TaskRejectReason` (a metric label and the DLQ reason) and,
when the bytes parse, the task itself, so the Actuator can still close its Operation.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import jwt
from google.protobuf.message import DecodeError

from xmc.claims import JwtProblem, TimeFault, TimeProblem, check_claim_times, classify_jwt_error
from xmc.timestamps import as_utc, set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

TASK_FIELD: Final = "task"
TOKEN_FIELD: Final = "token"

DEFAULT_ISSUER: Final = "xmc-ess"
DEFAULT_AUDIENCE: Final = "xmc-actuator"
DEFAULT_TTL: Final = timedelta(hours=24)
DEFAULT_LEEWAY: Final = timedelta(seconds=30)

#: A stream entry as redis-py returns it: bytes keys and values by default, str with
#: ``decode_responses=True``. A union because ``Mapping`` is invariant in its key type.
StreamFields = (
    Mapping[bytes, bytes | str] | Mapping[str, bytes | str] | Mapping[bytes | str, bytes | str]
)

_ALGORITHM: Final = "HS256"
_REQUIRED_CLAIMS: Final = ("iss", "aud", "iat", "exp", "digest")


class TaskRejectReason(enum.StrEnum):
    """Why a stream entry was refused; low-cardinality, fit for a metric label and the DLQ."""

    MISSING_FIELD = "missing_field"
    UNDECODABLE = "undecodable"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    WRONG_ISSUER = "wrong_issuer"
    WRONG_AUDIENCE = "wrong_audience"
    DIGEST_MISMATCH = "digest_mismatch"
    NOT_YET_VALID = "not_yet_valid"


class TaskRejected(Exception):
    """A stream entry that must not be executed; always permanent (DLQ, never retry).

    ``task`` is the parsed task when its bytes parse, even though it is not trusted: the
    Actuator needs its ``operation`` to close the Operation with an error.
    """

    def __init__(self, reason: TaskRejectReason, detail: str, task: Task | None = None) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.task = task


def build_task(
    kind: int,
    *,
    xid: int,
    wid: int,
    target_eid: int,
    operation: str,
    work_unit: WorkUnit,
    eid: int,
    experiment_priority: int,
    operation_time: datetime,
) -> Task:
    """A new task with a fresh id; ``eid`` is the execution it brings about (RESTART:
    ``target_eid + 1``), ``operation_time`` the intent's time (the last-edit label)."""
    task = Task(
        task_id=uuid.uuid4().hex,
        kind=kind,  # type: ignore[arg-type]
        xid=xid,
        wid=wid,
        target_eid=target_eid,
        operation=operation,
        payload=TaskPayload(
            work_unit=work_unit,
            eid=eid,
            experiment_priority=experiment_priority,  # type: ignore[arg-type]
        ),
    )
    set_timestamp(task.operation_time, operation_time)
    return task


def task_execution_id(task: Task) -> int:
    """The execution a task brings to life: ``payload.eid`` (RESTART's N+1), else the target."""
    return task.payload.eid or task.target_eid


def sign_task(
    task: Task,
    *,
    key: str,
    now: datetime,
    ttl: timedelta = DEFAULT_TTL,
    issuer: str = DEFAULT_ISSUER,
    audience: str = DEFAULT_AUDIENCE,
) -> dict[str, bytes | str]:
    """Serialize ``task`` and sign it; the result is the field map to ``XADD``."""
    task_bytes = task.SerializeToString(deterministic=True)
    token = _issue(
        task.task_id, task_bytes, key=key, now=now, ttl=ttl, issuer=issuer, audience=audience
    )
    return {TASK_FIELD: task_bytes, TOKEN_FIELD: token}


def verify_task(
    fields: StreamFields,
    *,
    key: str,
    now: datetime,
    issuer: str = DEFAULT_ISSUER,
    audience: str = DEFAULT_AUDIENCE,
    leeway: timedelta = DEFAULT_LEEWAY,
) -> Task:
    """Return the task of a stream entry, or raise :class:`TaskRejected`.

    ``fields`` is the entry as redis-py returns it (bytes keys and values unless
    ``decode_responses=True``). Expiry is judged against ``now``, not the host clock.
    """
    verified = _authenticate(fields, key=key, issuer=issuer, audience=audience)
    fault = check_claim_times(verified.claims, now=now, leeway=leeway)
    if fault is not None:
        raise verified.reject(*_time_rejection(fault))
    return verified.parsed()


def task_digest(task_bytes: bytes) -> str:
    """Hex SHA-256 of the serialized task: what the token vouches for."""
    return hashlib.sha256(task_bytes).hexdigest()


# --- internals -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Verified:
    """An entry whose signature, issuer, audience and digest checked out (time not yet)."""

    task_bytes: bytes
    task: Task | None
    claims: Mapping[str, Any]

    def reject(self, reason: TaskRejectReason, detail: str) -> TaskRejected:
        return TaskRejected(reason, detail, self.task)

    def parsed(self) -> Task:
        if self.task is None:
            raise self.reject(TaskRejectReason.UNDECODABLE, "task bytes are not a Task message")
        return self.task


def _issue(
    task_id: str,
    task_bytes: bytes,
    *,
    key: str,
    now: datetime,
    ttl: timedelta,
    issuer: str,
    audience: str,
) -> str:
    _require_key(key)
    issued_at = int(as_utc(now).timestamp())
    claims = {
        "iss": issuer,
        "aud": audience,
        "iat": issued_at,
        "exp": issued_at + int(ttl.total_seconds()),
        "sub": task_id,
        "jti": task_id,
        "digest": task_digest(task_bytes),
    }
    return hs256_token(claims, key)


#: ``{"alg":"HS256","typ":"JWT"}``, base64url: the header PyJWT writes for HS256.
_HS256_HEADER: Final = b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"


def hs256_token(claims: Mapping[str, Any], key: str) -> str:
    """The HS256 JWT of ``claims``, the very string ``jwt.encode`` makes (a unit test holds
    the two equal). Every published task is signed here, and PyJWT's encode cost ~20 µs a
    call, mostly looking at the key for PEM and SSH shapes each time, this ~4 µs; tokens
    are still verified by PyJWT."""
    body = urlsafe_b64encode(json.dumps(claims, separators=(",", ":")).encode()).rstrip(b"=")
    signed = _HS256_HEADER + b"." + body
    signature = hmac.new(key.encode(), signed, hashlib.sha256).digest()
    return (signed + b"." + urlsafe_b64encode(signature).rstrip(b"=")).decode()


def _authenticate(fields: StreamFields, *, key: str, issuer: str, audience: str) -> _Verified:
    """Check everything but time; attach the (untrusted) task to any rejection."""
    _require_key(key)
    task_bytes, token = _read_fields(fields)
    task = _parse(task_bytes)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[_ALGORITHM],
            issuer=issuer,
            audience=audience,
            # Time is checked against the injected ``now`` (check_claim_times), never the host
            # clock.
            options={
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
                "require": list(_REQUIRED_CLAIMS),
            },
        )
    except jwt.PyJWTError as exc:
        reason, detail = _classify_jwt_error(exc)
        raise TaskRejected(reason, detail, task) from exc
    verified = _Verified(task_bytes=task_bytes, task=task, claims=claims)
    if claims["digest"] != task_digest(task_bytes):
        raise verified.reject(TaskRejectReason.DIGEST_MISMATCH, "task bytes do not match the token")
    return verified


def _time_rejection(fault: TimeFault) -> tuple[TaskRejectReason, str]:
    match fault.problem:
        case TimeProblem.NOT_A_NUMBER:
            return TaskRejectReason.UNDECODABLE, "exp, iat and nbf must be numbers"
        case TimeProblem.EXPIRED:
            return TaskRejectReason.EXPIRED, f"token expired at {fault.value}"
        case TimeProblem.NOT_YET_VALID:
            return TaskRejectReason.NOT_YET_VALID, f"{fault.claim} is in the future"


def _read_fields(fields: StreamFields) -> tuple[bytes, str]:
    by_name: dict[str, bytes | str] = {}
    for name, value in fields.items():
        try:
            by_name[name.decode() if isinstance(name, bytes) else name] = value
        except UnicodeDecodeError:
            continue  # not one of ours
    raw_task, raw_token = by_name.get(TASK_FIELD), by_name.get(TOKEN_FIELD)
    if raw_task is None:
        raise TaskRejected(TaskRejectReason.MISSING_FIELD, f"entry lacks {TASK_FIELD!r}")
    task_bytes = raw_task.encode() if isinstance(raw_task, str) else raw_task
    if raw_token is None:
        # An unsigned entry: still hand back the task so its Operation can be closed.
        raise TaskRejected(
            TaskRejectReason.MISSING_FIELD, f"entry lacks {TOKEN_FIELD!r}", _parse(task_bytes)
        )
    try:
        token = raw_token.decode("ascii") if isinstance(raw_token, bytes) else raw_token
    except UnicodeDecodeError:
        raise TaskRejected(
            TaskRejectReason.UNDECODABLE, "token is not ASCII", _parse(task_bytes)
        ) from None
    return task_bytes, token


def _parse(task_bytes: bytes) -> Task | None:
    try:
        return Task.FromString(task_bytes)
    except DecodeError:
        return None


_JWT_REJECTIONS: Final[Mapping[JwtProblem, tuple[TaskRejectReason, str]]] = {
    JwtProblem.BAD_SIGNATURE: (TaskRejectReason.BAD_SIGNATURE, "signature does not verify"),
    JwtProblem.BAD_ALGORITHM: (TaskRejectReason.BAD_SIGNATURE, "algorithm is not HS256"),
    JwtProblem.MALFORMED: (TaskRejectReason.UNDECODABLE, "token is not a well-formed JWT"),
    JwtProblem.WRONG_ISSUER: (TaskRejectReason.WRONG_ISSUER, "issuer is not accepted"),
    JwtProblem.WRONG_AUDIENCE: (TaskRejectReason.WRONG_AUDIENCE, "audience is not accepted"),
}
_MISSING_CLAIM: Final[Mapping[str, TaskRejectReason]] = {
    "iss": TaskRejectReason.WRONG_ISSUER,
    "aud": TaskRejectReason.WRONG_AUDIENCE,
    "digest": TaskRejectReason.DIGEST_MISMATCH,
}


def _classify_jwt_error(exc: jwt.PyJWTError) -> tuple[TaskRejectReason, str]:
    fault = classify_jwt_error(exc)
    if fault.problem is JwtProblem.MISSING_CLAIM:
        reason = _MISSING_CLAIM.get(fault.claim, TaskRejectReason.UNDECODABLE)
        return reason, f"token lacks the {fault.claim!r} claim"
    default = (TaskRejectReason.UNDECODABLE, f"invalid token ({type(exc).__name__})")
    return _JWT_REJECTIONS.get(fault.problem, default)


def _require_key(key: str) -> None:
    # An empty HMAC key is a misconfiguration; accepting it would let anyone forge tasks.
    if not key:
        raise ValueError("task signing key is empty (set XMC_TASK_SIGNING_KEY)")
