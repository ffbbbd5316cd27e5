"""Domain errors, classified once.

Every layer raises these; each boundary maps them exactly once (the gRPC interceptor to a
``StatusCode``, the Actuator to permanent/transient). Messages name the offending field so
a user can fix the request without reading server logs.
"""

from __future__ import annotations


class XmcError(Exception):
    """Base of all errors a caller can act on; ``code`` is the gRPC status code name."""

    code = "INTERNAL"


class InvalidArgumentError(XmcError, ValueError):
    code = "INVALID_ARGUMENT"


class NotFoundError(XmcError, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(XmcError):
    code = "ALREADY_EXISTS"


class FailedPreconditionError(XmcError):
    code = "FAILED_PRECONDITION"


class PermissionDeniedError(XmcError):
    code = "PERMISSION_DENIED"


class UnauthenticatedError(XmcError):
    code = "UNAUTHENTICATED"


class OutOfRangeError(XmcError):
    """A position past what is kept (a watch cursor older than its retention)."""

    code = "OUT_OF_RANGE"


class ResourceExhaustedError(XmcError):
    code = "RESOURCE_EXHAUSTED"


class UnavailableError(XmcError):
    """A dependency (Redis, Postgres) cannot be reached; the caller may retry."""

    code = "UNAVAILABLE"


class UnimplementedError(XmcError):
    code = "UNIMPLEMENTED"


class QuotaExceededError(ResourceExhaustedError):
    """A create past a quota (docs/quotas.md): which principal, which limit, its value,
    and how many seconds to wait before trying again (the RetryInfo the ESS sends)."""

    def __init__(
        self, message: str, *, principal: str, limit: str, value: float, retry_after: float
    ) -> None:
        super().__init__(message)
        self.principal = principal
        self.limit = limit
        self.value = value
        self.retry_after = retry_after
