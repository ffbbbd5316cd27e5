"""The container runs of a pod whose logs can be read, off its status (pure).

A run is one life of one container: ``run`` is the restartCount it had. The current run
is ``state`` (running or terminated; a waiting container has printed nothing yet); a
container restarted in place also has its previous run in ``lastState.terminated``,
read with ``previous=true``. Upstream: ``ContainerStatus`` in
k8s.io/api/core/v1/types.go, and the kubelet's ``validateContainerLogStatus``
(pkg/kubelet/kubelet_pods.go), which refuses a waiting container's log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmc.kjson import as_int, as_mapping, as_sequence, as_str, metadata_of
from xmc.timestamps import parse_rfc3339


@dataclass(frozen=True)
class ContainerRun:
    pod_name: str
    pod_uid: str
    container: str
    run: int
    terminated: bool
    exit_code: int | None
    reason: str
    finished_at: datetime | None
    #: The run is the container's previous one (read with ``previous=true``).
    previous: bool = False

    @property
    def key(self) -> tuple[str, str, int]:
        """What names the run across reads: its pod's UID, the container and its run (the
        key XMC stores a capture under, ``container_logs``)."""
        return (self.pod_uid, self.container, self.run)


def _run(pod: Mapping[str, Any], container: str, run: int, state: Mapping[str, Any],
         *, previous: bool) -> ContainerRun | None:  # fmt: skip
    metadata = metadata_of(pod)
    terminated = as_mapping(state.get("terminated"))
    if not terminated and "running" not in state:
        return None
    code = terminated.get("exitCode")
    return ContainerRun(
        pod_name=as_str(metadata.get("name")),
        pod_uid=as_str(metadata.get("uid")),
        container=container,
        run=run,
        terminated=bool(terminated),
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        reason=as_str(terminated.get("reason")),
        finished_at=parse_rfc3339(terminated.get("finishedAt")),
        previous=previous,
    )


def container_runs(pod: Mapping[str, Any]) -> list[ContainerRun]:
    """Every run of the pod's (main) containers that has a log: previous runs first."""
    runs: list[ContainerRun] = []
    for status in as_sequence(as_mapping(pod.get("status")).get("containerStatuses")):
        status = as_mapping(status)
        name, restarts = as_str(status.get("name")), as_int(status.get("restartCount"))
        if not name:
            continue
        last = as_mapping(status.get("lastState"))
        if restarts > 0 and last.get("terminated"):
            previous = _run(pod, name, restarts - 1, last, previous=True)
            if previous is not None:
                runs.append(previous)
        current = _run(pod, name, restarts, as_mapping(status.get("state")), previous=False)
        if current is not None:
            runs.append(current)
    return runs
