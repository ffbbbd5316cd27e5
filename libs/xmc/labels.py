"""Names XMC writes on JobSets (SPEC §7.1), kept in one place.

They are a contract between the Actuator (which writes them), the Reconciler (which
selects on :data:`MANAGED_BY`, reads the ids and owns :data:`FINALIZER`) and the guards of
SPEC §7.2 (:data:`EXECUTION_ID`, :data:`LAST_EDIT`); Kueue reads the two ``kueue.x-k8s.io``
labels. A typo in any of them would silently break a loop, so both services import the
constants from here, in the shared library, and neither imports the other.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

# Re-exported: the priority classes are part of the Actuator's labelling vocabulary.
from xmc.priority_classes import PRIORITY_CLASS_VALUES as PRIORITY_CLASS_VALUES
from xmc.priority_classes import PRIORITY_CLASSES as PRIORITY_CLASSES
from xmc.priority_classes import priority_class_name as priority_class_name
from xmc.timestamps import as_utc

EXPERIMENT_ID: Final = "xmc.google.com/experiment-id"
WORK_UNIT_ID: Final = "xmc.google.com/work-unit-id"
EXECUTION_ID: Final = "xmc.google.com/execution-id"
LAST_EDIT: Final = "xmc.google.com/last-edit"
QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"
#: Kueue labels each Workload with the uid of the job it was made for.
KUEUE_JOB_UID: Final = "kueue.x-k8s.io/job-uid"

MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "xmc"
#: The label selector the Reconciler watches JobSets with.
MANAGED_BY_SELECTOR: Final = f"{MANAGED_BY}={MANAGED_BY_VALUE}"

FINALIZER: Final = "jobset.xmanager.cloud/finalizer"
EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"

JOBSET_API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND: Final = "JobSet"

#: A label value's length limit (apimachinery ``IsValidLabelValue``).
MAX_LABEL_VALUE: Final = 63
_DNS_1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
# int64 microseconds never need more than 19 digits; a fixed width keeps the string
# order equal to the time order, so even a lexical comparison of two labels is right.
_LAST_EDIT_WIDTH: Final = 19


def jobset_name(xid: int, wid: int) -> str:
    """Deterministic, so a redelivered Create meets ``AlreadyExists`` instead of a twin."""
    return f"xmc-{xid}-{wid}"


_JOBSET_NAME: Final = re.compile(r"^xmc-([1-9][0-9]*)-([1-9][0-9]*)$")


def parse_jobset_name(name: str) -> tuple[int, int] | None:
    """(xid, wid) of a name :func:`jobset_name` made; None for any other name."""
    match = _JOBSET_NAME.match(name)
    return (int(match[1]), int(match[2])) if match else None


def last_edit_label(operation_time: datetime) -> str:
    """Microseconds since the epoch, zero-padded: label-safe and ordering-preserving.

    A naive datetime is taken as UTC, as everywhere in xmc. Times before the epoch have
    no label form (they would need a sign) and are refused.
    """
    micros = (as_utc(operation_time) - _EPOCH) // timedelta(microseconds=1)
    if micros < 0:
        raise ValueError(f"operation time {operation_time.isoformat()} is before the epoch")
    return str(micros).zfill(_LAST_EDIT_WIDTH)


def parse_last_edit_label(value: str) -> datetime:
    """Inverse of :func:`last_edit_label`; raises ``ValueError`` on anything else."""
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"last-edit label {value!r} is not a decimal number")
    return _EPOCH + timedelta(microseconds=int(value))


def queue_name_problem(queue: str) -> str | None:
    """Why ``queue`` cannot name a Kueue LocalQueue on a JobSet, or None if it can.

    It travels as the :data:`QUEUE_NAME` label, so it must be a label value (at most 63
    characters); Kueue's job webhook also requires it to be a DNS-1123 subdomain, the
    LocalQueue's own name (``jobframework.ValidateQueueName`` →
    ``ValidateLabelAsCRDName``). Checked when the work unit is created, so a bad name is
    the caller's INVALID_ARGUMENT, not a FAILED unit from the Actuator later.
    """
    if not queue:
        return "required"
    if len(queue) > MAX_LABEL_VALUE or not _DNS_1123_SUBDOMAIN.match(queue):
        return (
            f"{queue[:80]!r} is not a Kueue queue name (a label value and DNS-1123 "
            f"subdomain: at most {MAX_LABEL_VALUE} lowercase alphanumerics, '-' or '.', "
            "starting and ending with an alphanumeric)"
        )
    return None
