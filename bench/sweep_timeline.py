"""Where a sweep's time goes: each JobSet's milestones, seen from the API server's watches.

``bench/e2e_sweep.py`` runs the same sweep on kubesim and on the real loopback cluster;
both serve the same API, so one :class:`Timeline` watches JobSets, Kueue Workloads and
pods of the sweep's namespace on either and notes, per JobSet name, the wall-clock
(``time.monotonic``) moment each milestone was first seen:

- **jobset** — the JobSet's ADDED event (created on the API server);
- **admitted** — its Workload (owner reference → JobSet) has ``Admitted`` True;
- **unsuspended** — the JobSet's ``spec.suspend`` is false (Kueue let it start);
- **pod** — its first pod exists (JobSet made the Job, the Job controller the pod);
- **scheduled** — its pod has a ``spec.nodeName`` (bound by the scheduler);
- **running** — its pod's phase is ``Running`` (or already finished);
- **ready** — the JobSet's status counts a ready pod (``replicatedJobsStatus[].ready``:
  what XMC's mapping needs to call the unit RUNNING, SPEC §8.1 R6);
- **finished** — its pod Succeeded (or Failed);
- **completed** — the JobSet has ``Completed`` True.

The bench adds the moments it sees itself: **created** (the create call answered) and,
for XMC, **running_stored** / **completed_stored** (a database poll first showed the
state). A watch event arrives after the write it reports, so each milestone is late by
the watch's delivery delay, the same on every milestone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from xmc.kjson import condition_of
from xmc.kube import JOBSETS, PODS, WORKLOADS, KubeError, KubeFailure, Resource
from xmc.kube_client import KubeClient

TICK: Final = os.sysconf("SC_CLK_TCK")
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
WORK_UNIT_ID: Final = "xmc.google.com/work-unit-id"
#: The milestones in the order a unit passes them, how each is printed, and the milestone
#: its per-unit gap is measured from (the stored ones are off the JobSet's own path).
MILESTONES: Final = (
    ("created", "create answered", ""),
    ("jobset", "JobSet created", "created"),
    ("admitted", "Workload admitted", "jobset"),
    ("unsuspended", "JobSet unsuspended", "admitted"),
    ("pod", "pod created", "unsuspended"),
    ("scheduled", "pod scheduled", "pod"),
    ("running", "pod Running", "scheduled"),
    ("ready", "JobSet ready", "running"),
    ("running_stored", "RUNNING stored", "ready"),
    ("finished", "pod Succeeded", "running"),
    ("completed", "JobSet Completed", "finished"),
    ("completed_stored", "COMPLETED stored", "completed"),
)

Event = dict[str, Any]


@dataclass
class Timeline:
    """Per JobSet name, the moment each milestone was first seen; ``wid_of`` maps a
    JobSet to its work unit (XMC's label) so the database's moments can join in."""

    began: float = 0.0
    marks: dict[str, dict[str, float]] = field(
        default_factory=lambda: {name: {} for name, _, _ in MILESTONES}
    )
    jobset_of_wid: dict[str, str] = field(default_factory=dict)

    def mark(self, milestone: str, name: str, at: float | None = None) -> None:
        self.marks[milestone].setdefault(name, time.monotonic() if at is None else at)

    def mark_wid(self, milestone: str, wid: str, at: float) -> None:
        """A moment known by work unit id (created, stored): kept under the wid until
        its JobSet is seen, then under the JobSet's name (see :meth:`joined`)."""
        self.marks[milestone].setdefault("wid:" + wid, at)

    def joined(self) -> dict[str, dict[str, float]]:
        """Every milestone keyed by JobSet name (wid-keyed moments translated)."""
        out: dict[str, dict[str, float]] = {}
        for milestone, moments in self.marks.items():
            out[milestone] = {}
            for key, at in moments.items():
                if key.startswith("wid:"):
                    name = self.jobset_of_wid.get(key[4:])
                    if name is None:
                        continue
                    key = name
                out[milestone][key] = at
        return out

    # --- what the watches report ----------------------------------------------------

    def on_jobset(self, event: Event) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name or event.get("type") == "DELETED":
            return
        self.mark("jobset", name)
        wid = (meta.get("labels") or {}).get(WORK_UNIT_ID)
        if wid is not None:
            self.jobset_of_wid.setdefault(str(wid), name)
        if (obj.get("spec") or {}).get("suspend") is False:
            self.mark("unsuspended", name)
        statuses = (obj.get("status") or {}).get("replicatedJobsStatus") or []
        if any(s.get("ready") for s in statuses):
            self.mark("ready", name)
        if condition_of(obj, "Completed", status="True"):
            self.mark("completed", name)

    def on_workload(self, event: Event) -> None:
        obj = event.get("object") or {}
        owners = (obj.get("metadata") or {}).get("ownerReferences") or []
        jobsets = [o["name"] for o in owners if o.get("kind") == "JobSet"]
        if jobsets and condition_of(obj, "Admitted", status="True"):
            self.mark("admitted", jobsets[0])

    def on_pod(self, event: Event) -> None:
        obj = event.get("object") or {}
        name = ((obj.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME)
        if not name or event.get("type") == "DELETED":
            return
        self.mark("pod", name)
        if (obj.get("spec") or {}).get("nodeName"):
            self.mark("scheduled", name)
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Running", "Succeeded", "Failed"):
            self.mark("running", name)
        if phase in ("Succeeded", "Failed"):
            self.mark("finished", name)


class Watches:
    """The three watches of one namespace feeding a :class:`Timeline`, each resumed from
    its last resourceVersion and re-listed after 410 Gone, until :meth:`stop`."""

    def __init__(self, kube: KubeClient, namespace: str, timeline: Timeline) -> None:
        self._kube, self._namespace, self._timeline = kube, namespace, timeline
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        t = self._timeline
        for resource, handler in ((JOBSETS, t.on_jobset), (WORKLOADS, t.on_workload),
                                  (PODS, t.on_pod)):  # fmt: skip
            self._tasks.append(asyncio.create_task(self._watch(resource, handler)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self, resource: Resource, handler: Callable[[Event], None]) -> None:
        version: str | None = None
        while True:
            try:
                if version is None:
                    page = await self._kube.list_page(resource, self._namespace)
                    for item in page["items"]:
                        handler({"type": "ADDED", "object": item})
                    version = page["metadata"]["resourceVersion"]
                async with self._kube.watch(
                    resource, self._namespace, resource_version=version, timeout_seconds=60
                ) as events:
                    async for event in events:
                        meta = (event.get("object") or {}).get("metadata") or {}
                        version = meta.get("resourceVersion", version)
                        if event.get("type") != "BOOKMARK":
                            handler(event)
            except KubeError as error:
                if error.failure is KubeFailure.EXPIRED:
                    version = None  # 410 Gone: list again
                else:
                    await asyncio.sleep(0.2)  # busy server: watch again


# --- figures ------------------------------------------------------------------------------


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_peak_rss_mb(pid: int) -> float:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_lines(timeline: Timeline) -> list[str]:
    """One line per milestone: how many units reached it, when (from the first create)
    half and all of them had, the rate between 10 % and 90 % of them, and the gap from
    the milestone before it (``MILESTONES``) per unit, p50 and p99. The milestone whose
    "all" jumps is where the time goes; a low rate names the stage that bounds
    throughput."""
    marks = timeline.joined()
    lines = [
        f"      {'milestone':<18} {'n':>5} {'p50 at':>8} {'all at':>8} {'rate/s':>7}"
        f" {'gap p50':>8} {'gap p99':>8}"
    ]
    for milestone, label, after in MILESTONES:
        moments = marks[milestone]
        if not moments:
            continue
        since = sorted(at - timeline.began for at in moments.values())
        lo, hi = since[int(0.1 * (len(since) - 1))], since[int(0.9 * (len(since) - 1))]
        rate = 0.8 * len(since) / (hi - lo) if hi > lo else float("nan")
        previous = marks.get(after, {})
        gaps = [at - previous[k] for k, at in moments.items() if k in previous]
        lines.append(
            f"      {label:<18} {len(since):>5} {percentile(since, 0.5):>7.1f}s"
            f" {since[-1]:>7.1f}s {rate:>7.1f} {_ms(percentile(gaps, 0.5)):>8}"
            f" {_ms(percentile(gaps, 0.99)):>8}"
        )
    return lines


def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.0f}ms"
