"""The pure log model of simulated containers (``kubesim.container_logs``) and the
``logs`` / ``log_every_seconds`` behaviour keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubesim.container_logs import (
    ContainerRun,
    LogLine,
    LogScript,
    NoLog,
    next_line_at,
    pick_run,
    render,
    select,
    since_moment,
    written_lines,
)
from kubesim.controllers.behavior import parse_behaviors

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def behaving(run: float | None = None, every: float = 1.0) -> LogScript:
    return LogScript(("a", "b", "c"), every, run)


# --- the annotation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "logs", "every"),
    [
        pytest.param({}, (), 1.0, id="prints nothing by default"),
        pytest.param({"logs": ["x", "y"]}, ("x", "y"), 1.0, id="one line a second"),
        pytest.param({"logs": ["x"], "log_every_seconds": 2.5}, ("x",), 2.5, id="slower"),
    ],
)
def test_logs_are_read_from_the_behavior(
    spec: dict[str, Any], logs: tuple[str, ...], every: float
) -> None:
    raw = {"kubesim.xmc/behavior": json.dumps(spec)}
    behavior = parse_behaviors(raw, ["main"], start_seconds=1.0, run_seconds=3.0)["main"]
    assert behavior.log_script == LogScript(logs, every, 3.0)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        pytest.param({"logs": "x"}, "logs must be a list of strings", id="not a list"),
        pytest.param({"logs": ["x", 1]}, "logs must be a list of strings", id="not strings"),
        pytest.param({"log_every_seconds": "1"}, "log_every_seconds must be", id="not a number"),
        pytest.param({"log_every_seconds": 0}, "log_every_seconds must be", id="zero"),
        pytest.param({"log_every_seconds": -1}, "log_every_seconds must be", id="negative"),
    ],
)
def test_bad_log_keys_are_a_config_error(spec: dict[str, Any], fragment: str) -> None:
    raw = {"kubesim.xmc/behavior": json.dumps(spec)}
    behavior = parse_behaviors(raw, ["main"], start_seconds=1.0, run_seconds=3.0)["main"]
    assert behavior.waiting_reason == "CreateContainerConfigError"
    assert behavior.message is not None
    assert fragment in behavior.message


# --- what a run has written -----------------------------------------------------------


@pytest.mark.parametrize(
    ("behavior", "run", "now", "expected"),
    [
        pytest.param(behaving(), ContainerRun(T0), at(-1), [], id="nothing before the start"),
        pytest.param(behaving(), ContainerRun(T0), at(0), [(0, "a")], id="first line at start"),
        pytest.param(
            behaving(), ContainerRun(T0), at(1.5), [(0, "a"), (1, "b")], id="one a second"
        ),
        pytest.param(
            behaving(every=10),
            ContainerRun(T0),
            at(25),
            [(0, "a"), (10, "b"), (20, "c")],
            id="log_every_seconds spaces them",
        ),
        pytest.param(
            behaving(),
            ContainerRun(T0),
            at(100),
            [(0, "a"), (1, "b"), (2, "c")],
            id="stops when the list is exhausted",
        ),
        pytest.param(
            behaving(),
            ContainerRun(T0, at(1)),
            at(100),
            [(0, "a"), (1, "b")],
            id="nothing after the second it exits in",
        ),
        pytest.param(
            behaving(run=1),
            ContainerRun(T0),
            at(5),
            [(0, "a")],
            id="a running status past the planned exit prints no more",
        ),
        pytest.param(
            behaving(),
            ContainerRun(T0, at(1), "boom"),
            at(100),
            [(0, "a"), (1, "b"), (1, "boom")],
            id="the failure text ends a failed run",
        ),
        pytest.param(
            behaving(),
            ContainerRun(T0, T0, "exit"),
            at(0),
            [(0, "a"), (0, "exit")],
            id="a crash in its first second prints that second's line and its failure",
        ),
    ],
)
def test_written_lines(
    behavior: LogScript,
    run: ContainerRun,
    now: datetime,
    expected: list[tuple[float, str]],
) -> None:
    assert written_lines(behavior, run, now) == [LogLine(at(s), t) for s, t in expected]


@pytest.mark.parametrize(
    ("behavior", "run", "now", "expected"),
    [
        pytest.param(behaving(), ContainerRun(T0), at(-1), at(0), id="the first line"),
        pytest.param(behaving(), ContainerRun(T0), at(0.5), at(1), id="the next line"),
        pytest.param(behaving(), ContainerRun(T0), at(2), None, id="list exhausted"),
        pytest.param(behaving(run=0.8), ContainerRun(T0), at(0.5), None, id="exits before it"),
    ],
)
def test_next_line_at(
    behavior: LogScript, run: ContainerRun, now: datetime, expected: datetime | None
) -> None:
    assert next_line_at(behavior, run, now) == expected


# --- which run a request reads --------------------------------------------------------


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


RUNNING = {"running": {"startedAt": stamp(0)}}
FAILED = {
    "terminated": {
        "exitCode": 3,
        "message": "boom",
        "startedAt": stamp(0),
        "finishedAt": stamp(4),
        "containerID": "kubesim://main",
    }
}
SUCCEEDED = {"terminated": {**FAILED["terminated"], "exitCode": 0}}
PREVIOUS = {"terminated": {**FAILED["terminated"], "startedAt": stamp(-10)}}


def pod_with(state: dict[str, Any], last_state: dict[str, Any] | None = None) -> dict[str, Any]:
    status = {"name": "main", "state": state, "lastState": last_state or {}}
    return {"metadata": {"name": "p"}, "status": {"containerStatuses": [status]}}


@pytest.mark.parametrize(
    ("pod", "previous", "expected"),
    [
        pytest.param(pod_with(RUNNING), False, ContainerRun(T0), id="the running run"),
        pytest.param(pod_with(FAILED), False, ContainerRun(T0, at(4), "boom"), id="a failed run"),
        pytest.param(pod_with(SUCCEEDED), False, ContainerRun(T0, at(4)), id="success: no text"),
        pytest.param(
            pod_with(RUNNING, PREVIOUS),
            True,
            ContainerRun(at(-10), at(4), "boom"),
            id="previous reads lastState",
        ),
        pytest.param(
            pod_with({"waiting": {"reason": "CrashLoopBackOff"}}, PREVIOUS),
            False,
            ContainerRun(at(-10), at(4), "boom"),
            id="waiting to restart reads the last run",
        ),
    ],
)
def test_pick_run(pod: dict[str, Any], previous: bool, expected: ContainerRun) -> None:
    assert pick_run(pod, "main", previous=previous) == expected


def refusal(
    state: dict[str, Any], message: str, name: str, container: str = "main", previous: bool = False
) -> Any:
    return pytest.param(pod_with(state), container, previous, message, id=name)


WAITING_TO_START = 'container "main" in pod "p" is waiting to start'


@pytest.mark.parametrize(
    ("pod", "container", "previous", "message"),
    [
        refusal(
            RUNNING,
            'previous terminated container "main" in pod "p" not found',
            "no previous run",
            previous=True,
        ),
        refusal(
            {"waiting": {"reason": "ContainerCreating"}},
            f"{WAITING_TO_START}: ContainerCreating",
            "not started",
        ),
        refusal(
            {"waiting": {"reason": "ImagePullBackOff"}},
            f"{WAITING_TO_START}: trying and failing to pull image",
            "image pull back-off",
        ),
        refusal(
            {"waiting": {"reason": "ErrImagePull"}},
            f"{WAITING_TO_START}: image can't be pulled",
            "image pull error",
        ),
        refusal(
            {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}},
            'container "main" in pod "p" is terminated',
            "terminated before it ever ran",
        ),
        refusal(
            RUNNING,
            'container "other" in pod "p" is not available',
            "no status for it",
            container="other",
        ),
        refusal({}, f"{WAITING_TO_START} - no logs yet", "no state"),
    ],
)
def test_pick_run_refuses(
    pod: dict[str, Any], container: str, previous: bool, message: str
) -> None:
    with pytest.raises(NoLog) as raised:
        pick_run(pod, container, previous=previous)
    assert str(raised.value) == message


# --- options and output ---------------------------------------------------------------

LINES = [LogLine(at(i), t) for i, t in enumerate("abcd")]


@pytest.mark.parametrize(
    ("tail", "since", "expected"),
    [
        pytest.param(None, None, "abcd", id="everything"),
        pytest.param(2, None, "cd", id="the last two"),
        pytest.param(0, None, "", id="tail zero"),
        pytest.param(9, None, "abcd", id="tail longer than the log"),
        pytest.param(None, at(2), "cd", id="since keeps a line stamped at it"),
        pytest.param(3, at(2), "cd", id="tail first, then since"),
    ],
)
def test_select(tail: int | None, since: datetime | None, expected: str) -> None:
    assert "".join(line.text for line in select(LINES, tail_lines=tail, since=since)) == expected


@pytest.mark.parametrize(
    ("seconds", "time", "expected"),
    [
        pytest.param(None, None, None, id="neither"),
        pytest.param(10, None, at(90), id="sinceSeconds counts back from now"),
        pytest.param(None, at(5), at(5), id="sinceTime as given"),
        pytest.param(10, at(95), at(95), id="the later of the two"),
        pytest.param(10, at(5), at(90), id="sinceTime earlier is ignored"),
    ],
)
def test_since_moment(
    seconds: int | None, time: datetime | None, expected: datetime | None
) -> None:
    assert since_moment(seconds, time, at(100)) == expected


@pytest.mark.parametrize(
    ("line", "timestamps", "expected"),
    [
        pytest.param(LogLine(T0, "hi"), False, b"hi\n", id="plain"),
        pytest.param(
            LogLine(at(0.25), "hi"),
            True,
            b"2026-01-02T03:04:05.250000000Z hi\n",
            id="RFC3339NanoFixed and a space",
        ),
        pytest.param(LogLine(T0, "a\n"), False, b"a\n", id="one newline"),
    ],
)
def test_render(line: LogLine, timestamps: bool, expected: bytes) -> None:
    assert render(line, timestamps=timestamps) == expected
