"""Startup diagnostics from a JobSet's pods (SPEC §8.3): containers that cannot start."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from reconciler.observation import Observation, Source
from reconciler.observe.read import belongs_to, work_unit_ids
from xmc.kjson import as_mapping, as_sequence, as_str, condition_of, metadata_of
from xmc.names import work_unit_name
from xmc.timestamps import as_utc, parse_rfc3339
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

POD_MASK: Final = ("status.system_message",)

#: Container waiting reasons that will not clear on their own: the image cannot be pulled
#: or the container cannot be configured, so the user must be told.
STARTUP_FAILURE_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
DEFAULT_STARTUP_GRACE: Final = timedelta(minutes=2)


@dataclass(frozen=True)
class StuckContainer:
    pod: str
    container: str
    reason: str
    message: str


def _stuck_containers(pods: Iterable[Mapping[str, Any]]) -> list[StuckContainer]:
    """Regular containers only: init containers are retried by the kubelet on their own."""
    found: list[StuckContainer] = []
    for pod in sorted(pods, key=lambda p: as_str(metadata_of(p).get("name"))):
        statuses = as_sequence(as_mapping(pod.get("status")).get("containerStatuses"))
        for status in map(as_mapping, statuses):
            waiting = as_mapping(as_mapping(status.get("state")).get("waiting"))
            reason = as_str(waiting.get("reason"))
            if reason in STARTUP_FAILURE_REASONS:
                found.append(
                    StuckContainer(
                        pod=as_str(metadata_of(pod).get("name")),
                        container=as_str(status.get("name")),
                        reason=reason,
                        message=as_str(waiting.get("message")),
                    )
                )
    return found


def _admitted_since(jobset: Mapping[str, Any]) -> datetime | None:
    suspended = condition_of(jobset, "Suspended")
    if suspended is None or suspended.get("status") != "False":
        return None
    return parse_rfc3339(suspended.get("lastTransitionTime"))


def _diagnostic_text(stuck: Sequence[StuckContainer]) -> str:
    first = stuck[0]
    text = f'Container "{first.container}" of pod "{first.pod}" cannot start: {first.reason}'
    if first.message:
        text += f" ({first.message})"
    more = len(stuck) - 1
    if more:
        text += f"; {more} more container{'s' if more > 1 else ''} affected"
    return text + "."


def startup_diagnostics(
    jobset: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    grace: timedelta = DEFAULT_STARTUP_GRACE,
) -> StructuredMessage | None:
    """An ERROR naming the first container that cannot start, once admission is ``grace`` old.

    The grace keeps a slow first pull (``ErrImagePull`` flickers before it succeeds) from
    alarming anyone. Admission time is the ``Suspended=False`` transition; a JobSet never
    resumed, or suspended again, has nothing to diagnose. Deterministic: pods by name,
    then container order, so a resync does not produce a "different" message.
    """
    admitted_at = _admitted_since(jobset)
    if admitted_at is None or as_utc(now) - admitted_at < grace:
        return None
    stuck = _stuck_containers(p for p in pods if belongs_to(p, jobset))
    if not stuck:
        return None
    return cluster_error(jobset, _diagnostic_text(stuck))


def cluster_error(jobset: Mapping[str, Any], text: str) -> StructuredMessage:
    """An ERROR message whose text is the cluster's (source KUBERNETES), about the work
    unit the JobSet's labels name: startup diagnostics and failure reasons alike."""
    ids = work_unit_ids(jobset)
    return StructuredMessage(
        severity=StructuredMessage.ERROR,
        source=StructuredMessage.KUBERNETES,
        parent="" if ids is None else work_unit_name(ids[0], ids[1]),
        user_facing_text=text,
    )


def observe_pods(
    jobset: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    grace: timedelta = DEFAULT_STARTUP_GRACE,
) -> Observation | None:
    """The startup diagnostics as a POD-sourced observation; never touches the state.

    None when there is nothing to report: the message is left in place (a later state
    change clears it, §5.3) rather than being erased by every healthy pod event.
    """
    ids = work_unit_ids(jobset)
    if ids is None:
        return None
    message = startup_diagnostics(jobset, pods, now=now, grace=grace)
    if message is None:
        return None
    execution = WorkUnitExecution(status=WorkUnitStatus(system_message=message))
    return Observation(*ids, Source.POD, execution, POD_MASK)
