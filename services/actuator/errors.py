"""Kubernetes API errors, classified once at the Actuator's boundary (SPEC §6).

The shared client classifies every failed call once (``xmc.kube.KubeFailure``); here
:func:`classify_kubernetes_error` maps that value to what the Actuator does about it
(an ``xmc.retry.ErrorClass``), and ``xmc.retry.decide_retry`` decides when, so
"permanent → DLQ" and "transient → retry with backoff" are decided in exactly one place.
The gRPC code names match what the Actuator writes into the Operation's ``error``.

Permanent: INVALID (400/422) and any other 4xx ``INVALID_ARGUMENT`` (the request itself
is wrong), UNAUTHORIZED ``UNAUTHENTICATED``, FORBIDDEN ``PERMISSION_DENIED``, NOT_FOUND,
CONFLICT ``FAILED_PRECONDITION`` (a UID or resourceVersion precondition), ALREADY_EXISTS
(the Create handler verifies the duplicate). Transient: NO_RESPONSE (connection loss,
timeout) and THROTTLED and SERVER ``UNAVAILABLE``, TIMEOUT (408) ``DEADLINE_EXCEEDED``,
EXPIRED (410) ``ABORTED`` (re-read), and anything unexpected ``UNKNOWN``, which bounded
retries end anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from xmc.kube import KubeError, KubeFailure
from xmc.retry import ErrorClass

_F = KubeFailure
#: (gRPC code, permanent) per failure; a test checks every failure has a row.
ERROR_CLASSES: Final[Mapping[KubeFailure, tuple[str, bool]]] = {
    _F.NO_RESPONSE: ("UNAVAILABLE", False),
    _F.NOT_FOUND: ("NOT_FOUND", True),
    _F.CONFLICT: ("FAILED_PRECONDITION", True),
    _F.ALREADY_EXISTS: ("ALREADY_EXISTS", True),
    _F.EXPIRED: ("ABORTED", False),
    _F.INVALID: ("INVALID_ARGUMENT", True),
    _F.UNAUTHORIZED: ("UNAUTHENTICATED", True),
    _F.FORBIDDEN: ("PERMISSION_DENIED", True),
    _F.TIMEOUT: ("DEADLINE_EXCEEDED", False),
    _F.THROTTLED: ("UNAVAILABLE", False),
    _F.SERVER: ("UNAVAILABLE", False),
    _F.CLIENT: ("INVALID_ARGUMENT", True),
    _F.UNEXPECTED: ("UNKNOWN", False),
}


def classify_kubernetes_error(
    failure: KubeFailure, *, retry_after: float | None = None
) -> ErrorClass:
    """What a failed call means to the Actuator; ``retry_after`` (the server's, seconds)
    is kept only for a transient failure."""
    code, permanent = ERROR_CLASSES[failure]
    return ErrorClass(code, permanent, None if permanent else retry_after)


def classify(error: KubeError) -> ErrorClass:
    return classify_kubernetes_error(error.failure, retry_after=error.retry_after)
