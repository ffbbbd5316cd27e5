"""The cells of built-in kinds' ``Table`` rows, as kubernetes
``pkg/printers/internalversion/printers.go`` prints them (``printPod``, ``printJob``,
``printNamespace``, ``printEvent``, ``printLease``), and apimachinery's
``duration.HumanDuration`` — pure. ``tables.py`` builds the Table around them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kubesim.resources import EVENT, JOB, LEASE, NAMESPACE, POD

Obj = dict[str, Any]
Cell = str | int | bool | None


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: two significant units while short."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _parse(timestamp: Any) -> datetime | None:
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def since(timestamp: Any, now: datetime) -> str:
    moment = _parse(timestamp)
    return "<unknown>" if moment is None else human_duration((now - moment).total_seconds())


def _age(obj: Obj, now: datetime) -> str:
    return since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _true(conditions: Any, kind: str) -> bool:
    for condition in conditions or []:
        if condition.get("type") == kind:
            return bool(condition.get("status") == "True")
    return False


def _restartable(container: Obj) -> bool:
    return container.get("restartPolicy") == "Always"


def pod_cells(pod: Obj, now: datetime) -> list[Cell]:
    """``printPod``: Ready is ready/total containers; Status is the phase overridden by the
    pod's reason, its init containers' and its containers' waiting/terminated reasons, and
    ``Terminating`` while a deleted pod has not finished."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    inits = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in inits.values() if _restartable(c))
    ready = 0
    restarts = 0
    last_restart: str = ""
    init_statuses = status.get("initContainerStatuses") or []
    initializing = False
    for index, container in enumerate(init_statuses):
        restarts += int(container.get("restartCount") or 0)
        last_restart = max(last_restart, _finished_at(container))
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if _restartable(inits.get(container.get("name"), {})) and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        if terminated:
            reason = "Init:" + (
                terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}"
            )
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{len(inits)}"
        initializing = True
        break
    if not initializing or _true(status.get("conditions"), "Initialized"):
        restarts = sum(
            int(c.get("restartCount") or 0)
            for c in init_statuses
            if _restartable(inits.get(c.get("name"), {}))
        )
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            last_restart = max(last_restart, _finished_at(container))
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = f"ExitCode:{terminated.get('exitCode')}"
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _true(status.get("conditions"), "Ready") else "NotReady"
    deleted = pod.get("metadata", {}).get("deletionTimestamp")
    if deleted and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleted and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart:
        restarts_text = f"{restarts} ({since(last_restart, now)} ago)"
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        wanted = {g.get("conditionType") for g in gates}
        met = sum(
            1
            for c in status.get("conditions") or []
            if c.get("type") in wanted and c.get("status") == "True"
        )
        gates_text = f"{met}/{len(gates)}"
    return [
        pod.get("metadata", {}).get("name", ""),
        f"{ready}/{total}",
        reason,
        restarts_text,
        _age(pod, now),
        (ips[0].get("ip") if ips else None) or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


def _finished_at(container: Obj) -> str:
    terminated = (container.get("lastState") or {}).get("terminated") or {}
    return str(terminated.get("finishedAt") or "")


def job_cells(job: Obj, now: datetime) -> list[Cell]:
    """``printJob``: Status from the conditions (Complete, Failed, Terminating, Suspended,
    FailureTarget, else Running), Completions ``succeeded/completions``, Duration from
    ``startTime`` to ``completionTime`` (or now)."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    started, finished = _parse(status.get("startTime")), _parse(status.get("completionTime"))
    duration = ""
    if started is not None:
        duration = human_duration(((finished or now) - started).total_seconds())
    conditions = status.get("conditions")
    if _true(conditions, "Complete"):
        state = "Complete"
    elif _true(conditions, "Failed"):
        state = "Failed"
    elif job.get("metadata", {}).get("deletionTimestamp"):
        state = "Terminating"
    elif _true(conditions, "Suspended"):
        state = "Suspended"
    elif _true(conditions, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    labels = ((spec.get("selector") or {}).get("matchLabels")) or {}
    return [
        job.get("metadata", {}).get("name", ""),
        state,
        completions,
        duration,
        _age(job, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>",
    ]


def _namespace_cells(namespace: Obj, now: datetime) -> list[Cell]:
    phase = (namespace.get("status") or {}).get("phase") or "Active"
    return [namespace["metadata"]["name"], phase, _age(namespace, now)]


def _event_cells(event: Obj, now: datetime) -> list[Cell]:
    first = event.get("firstTimestamp") or event.get("eventTime")
    last = event.get("lastTimestamp") or first
    count = event.get("count") or 1
    series = event.get("series")
    if series:
        last, count = series.get("lastObservedTime"), series.get("count") or count
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    source_text = ", ".join(str(source[k]) for k in ("component", "host") if source.get(k))
    return [
        since(last, now),
        event.get("type") or "",
        event.get("reason") or "",
        target,
        involved.get("fieldPath") or "",
        source_text,
        event.get("message") or "",
        since(first, now),
        int(count),
        event.get("metadata", {}).get("name", ""),
    ]


def _lease_cells(lease: Obj, now: datetime) -> list[Cell]:
    holder = (lease.get("spec") or {}).get("holderIdentity") or ""
    return [lease["metadata"]["name"], holder, _age(lease, now)]


PRINTERS: Mapping[str, Callable[[Obj, datetime], list[Cell]]] = {
    POD.key: pod_cells,
    JOB.key: job_cells,
    NAMESPACE.key: _namespace_cells,
    EVENT.key: _event_cells,
    LEASE.key: _lease_cells,
}
