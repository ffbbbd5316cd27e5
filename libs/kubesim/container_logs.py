"""What a simulated container has written to its log (pure), for ``pods/{name}/log``.

A container prints its behaviour's ``logs`` (``controllers/behavior.py``) one line every
``log_every_seconds``: line ``i`` at ``startedAt + i × log_every_seconds`` of the run,
on the simulated clock. Every run starts the script over (a restart is a new run with a
new log), and a run prints only what falls before it exits. When the list is exhausted
the container prints nothing more until it exits — it does not cycle: a script is what a
test expects to read back, and repeating it would fabricate lines nobody wrote. A
container that failed (non-zero exit code) with a termination message ends its log with
that message, stamped when it exited, the way a crashing program's last words are its
error.

The run is read from the container's status — ``state`` for the current run,
``lastState.terminated`` for the previous one — so the same function serves kubesim's
API and the node agent of ``make cluster`` (``tools/cluster/nodeagent.py``), which keep
statuses the same way; the behaviour comes in as a ``LogScript`` so that this module
needs neither the store nor the controllers (the API serves logs without importing
them). Which run a request reads, and the errors when there is none,
follow the kubelet's ``validateContainerLogStatus`` (``pkg/kubelet/kubelet_pods.go``,
v1.36.3); tail, since, timestamps and byte limits follow the CRI log reader
(``k8s.io/cri-client/pkg/logs/logs.go`` v0.36.3, ``ReadLogs``/``logWriter.write``) and
``kuberuntime_logs.go`` (``ReadLogs``: how ``sinceSeconds``/``sinceTime`` become a
moment).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class LogScript:
    """What a container prints: ``lines``, one every ``every_seconds`` from its start;
    ``run_seconds`` is how long a run lasts (None: until stopped)."""

    lines: tuple[str, ...] = ()
    every_seconds: float = 1.0
    run_seconds: float | None = None


class NoLog(Exception):
    """There is no log to read (the kubelet's error, which the API answers with 400)."""


@dataclass(frozen=True)
class ContainerRun:
    """One run of a container: when it started, and for a finished run when it exited
    and the failure text that ends its log (None: it succeeded or said nothing)."""

    started_at: datetime
    finished_at: datetime | None = None
    failure: str | None = None


@dataclass(frozen=True)
class LogLine:
    at: datetime
    text: str


def _moment(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _finished_run(terminated: Mapping[str, Any]) -> ContainerRun | None:
    started = _moment(terminated.get("startedAt"))
    if started is None:
        return None
    failed = terminated.get("exitCode", 0) != 0
    failure = terminated.get("message") if failed else None
    return ContainerRun(started, _moment(terminated.get("finishedAt")) or started, failure)


def _waiting_error(container: str, pod: str, reason: str | None) -> NoLog:
    prefix = f'container "{container}" in pod "{pod}" is waiting to start'
    if reason == "ErrImagePull":
        return NoLog(f"{prefix}: image can't be pulled")
    if reason == "ImagePullBackOff":
        return NoLog(f"{prefix}: trying and failing to pull image")
    return NoLog(f"{prefix}: {reason}")


def _status_of(pod: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(key) or []:
            if entry.get("name") == container:
                return entry  # type: ignore[no-any-return]
    return None


def pick_run(pod: Mapping[str, Any], container: str, *, previous: bool) -> ContainerRun:
    """The run whose log a request reads: the previous one when asked, else the running
    one, else the one that ended last; ``NoLog`` with the kubelet's words otherwise."""
    name = (pod.get("metadata") or {}).get("name", "")
    status = _status_of(pod, container)
    if status is None:
        raise NoLog(f'container "{container}" in pod "{name}" is not available')
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated")
    last_run = _finished_run(last) if last and last.get("containerID") else None
    terminated = f'container "{container}" in pod "{name}" is terminated'
    if previous:
        if last_run is None:
            raise NoLog(f'previous terminated container "{container}" in pod "{name}" not found')
        return last_run
    if "running" in state:
        started = _moment((state["running"] or {}).get("startedAt"))
        if started is None:
            raise NoLog(terminated)
        return ContainerRun(started)
    if "terminated" in state:
        ended = state["terminated"] or {}
        run = _finished_run(ended) if ended.get("containerID") else last_run
        if run is None:
            raise NoLog(terminated)
        return run
    if last is not None:
        if last_run is None:
            raise NoLog(terminated)
        return last_run
    if "waiting" in state:
        raise _waiting_error(container, name, (state["waiting"] or {}).get("reason"))
    raise NoLog(f'container "{container}" in pod "{name}" is waiting to start - no logs yet')


def _end(script: LogScript, run: ContainerRun) -> datetime | None:
    """When the run stops printing: the exit its script plans (the status may say
    ``running`` a moment past it), and for a run that ended the end of the second of its
    ``finishedAt``: the status keeps that time to the second, so a container killed 0.4 s
    into the second in which it printed a line has printed it (cutting at the truncated
    time lost the last lines of every stopped container)."""
    planned = (
        None if script.run_seconds is None
        else run.started_at + timedelta(seconds=script.run_seconds)
    )  # fmt: skip
    if run.finished_at is None:
        return planned
    ended = run.finished_at + timedelta(seconds=1)
    return ended if planned is None else min(ended, planned)


def _schedule(script: LogScript, run: ContainerRun) -> list[LogLine]:
    end = _end(script, run)
    every = timedelta(seconds=script.every_seconds)
    lines = [LogLine(run.started_at + i * every, text) for i, text in enumerate(script.lines)]
    return [line for line in lines if end is None or line.at < end]


def written_lines(script: LogScript, run: ContainerRun, now: datetime) -> list[LogLine]:
    """Every line the run has written by ``now``, oldest first."""
    lines = [line for line in _schedule(script, run) if line.at <= now]
    if run.failure and run.finished_at is not None and run.finished_at <= now:
        lines.append(LogLine(run.finished_at, run.failure))
    return lines


def next_line_at(script: LogScript, run: ContainerRun, now: datetime) -> datetime | None:
    """When the run writes its next line after ``now`` (None: not before it exits)."""
    return next((line.at for line in _schedule(script, run) if line.at > now), None)


def since_moment(
    since_seconds: int | None, since_time: datetime | None, now: datetime
) -> datetime | None:
    """The kubelet's ``Since``: ``now - sinceSeconds``, or ``sinceTime`` when later."""
    since = None if since_seconds is None else now - timedelta(seconds=since_seconds)
    if since_time is not None and (since is None or since_time > since):
        since = since_time
    return since


def select(
    lines: Sequence[LogLine], *, tail_lines: int | None, since: datetime | None
) -> list[LogLine]:
    """The CRI reader's order: the last ``tail_lines`` lines, then those not before
    ``since``."""
    kept = list(lines) if tail_lines is None else list(lines)[max(len(lines) - tail_lines, 0) :]
    return [line for line in kept if since is None or line.at >= since]


def timestamp(moment: datetime) -> str:
    """``RFC3339NanoFixed`` (``2006-01-02T15:04:05.000000000Z07:00``) in UTC."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond * 1000:09d}Z"


def render(line: LogLine, *, timestamps: bool) -> bytes:
    """One line as written to the response: optional timestamp and a space, then the text
    and a newline."""
    text = line.text if line.text.endswith("\n") else line.text + "\n"
    prefix = timestamp(line.at) + " " if timestamps else ""
    return (prefix + text).encode()
