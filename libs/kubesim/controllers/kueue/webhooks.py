"""Kueue's JobSet webhooks, as kubesim's API server runs them: the mutating one
(``mjobset.kb.io``) and the one validating rule kept (``vjobset.kb.io``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubesim.controllers.jobset_plan import QUEUE_NAME_LABEL
from kubesim.errors import ApiError
from kubesim.resources import JOBSET

Obj = dict[str, Any]


def default_jobset_create(jobset: Obj) -> Obj:
    """Kueue's mutating JobSet webhook (``mjobset.kb.io``, create only): a JobSet naming a
    queue is created suspended, so no pod starts before admission (upstream
    ``ApplyDefaultForSuspend`` / ``WorkloadShouldBeSuspended``; kubesim runs with
    ``manageJobsWithoutQueueName`` off, as upstream's default configuration)."""
    labels = (jobset.get("metadata") or {}).get("labels") or {}
    spec = jobset.get("spec")
    if not labels.get(QUEUE_NAME_LABEL) or not isinstance(spec, dict) or spec.get("suspend"):
        return jobset
    return {**jobset, "spec": {**spec, "suspend": True}}


def validate_jobset_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Kueue's JobSet webhook (``vjobset.kb.io``), the one rule kubesim keeps: the
    queue-name label is immutable unless the updated JobSet is suspended (upstream
    ``validateUpdateForQueueName``)."""
    if (new.get("spec") or {}).get("suspend"):
        return
    before = ((old.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, "")
    after = ((new.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, "")
    if before == after:
        return
    name = (new.get("metadata") or {}).get("name", "")
    raise ApiError(
        422,
        "Invalid",
        f'admission webhook "vjobset.kb.io" denied the request: '
        f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "{after}": field is immutable',
        {"name": name, "group": JOBSET.group, "kind": "JobSet"},
    )
