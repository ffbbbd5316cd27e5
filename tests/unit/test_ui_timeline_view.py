"""The dashboard's timeline layout (pure): durations as text, segment widths with their
minimum, the words beside the colours, and the views of the wire messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ui.timeline_view import (
    MIN_WIDTH,
    bar_widths,
    execution_view,
    fmt_duration,
    segment_notes,
    segments_view,
    timeline_view,
    timings_view,
)
from xmc.model.states import WorkUnitState
from xmc.model.timeline import Segment
from xmc_api.xmc.v1 import timeline_pb2

S = WorkUnitState
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("seconds", "want"),
    [
        (0, "0s"),
        (0.04, "0s"),
        (0.7, "0.7s"),
        (2, "2s"),
        (2.5, "2.5s"),
        (9.96, "10s"),
        (42.4, "42s"),
        (60, "1m00s"),
        (184, "3m04s"),
        (3600, "1h00m00s"),
        (7205, "2h00m05s"),
        (86_400 * 3 + 4 * 3600 + 5 * 60 + 9, "3d04h05m"),
    ],
)
def test_fmt_duration(seconds: float, want: str) -> None:
    assert fmt_duration(timedelta(seconds=seconds)) == want


@pytest.mark.parametrize(
    ("durations", "want"),
    [
        ([], []),
        ([5], [100.0]),
        ([1, 3], [25.0, 75.0]),
        ([0, 0, 0, 0], [25.0] * 4),  # no time passed: equal
        # A zero-length end and a second beside an hour get the minimum; the hour the rest.
        ([3600, 1, 0], [96.0, MIN_WIDTH, MIN_WIDTH]),
        # Raising one to the minimum can push another under it: both are raised.
        ([1000, 20.5, 1], [96.0, MIN_WIDTH, MIN_WIDTH]),
        ([1] * 60, [100 / 60] * 60),  # the minimum leaves no room: equal
    ],
)
def test_bar_widths(durations: list[float], want: list[float]) -> None:
    got = bar_widths(durations)
    assert got == pytest.approx(want)
    if got:
        assert sum(got) == pytest.approx(100)


def segment(
    state: S, start: float, end: float | None, *, duration: float = 0, ongoing: bool = False
) -> Segment:
    return Segment(
        state, at(start), None if end is None else at(end), timedelta(seconds=duration), ongoing
    )


@pytest.mark.parametrize(
    ("seg", "after_admission", "superseded", "want"),
    [
        (segment(S.SCHEDULING, 0, 5, duration=5), False, False, []),
        (segment(S.RUNNING, 0, None, duration=9, ongoing=True), True, False, ["ongoing"]),
        (segment(S.SCHEDULING, 5, 4), False, False, ["clocks disagree: counted as 0s"]),
        (segment(S.DESCHEDULING, 0, 5, duration=5), True, False, ["preempted"]),
        (segment(S.SCHEDULING, 0, 5, duration=5), True, False, ["re-queued"]),
        (segment(S.SCHEDULING_PAUSED, 0, 5, duration=5), True, False, ["re-queued"]),
        (
            segment(S.SCHEDULING, 0, None, duration=5, ongoing=True),
            True,
            False,
            ["re-queued", "ongoing"],  # waiting again right now
        ),
        (
            segment(S.DESCHEDULING, 5, 4),
            True,
            False,
            ["preempted", "clocks disagree: counted as 0s"],
        ),
        (segment(S.COMPLETED, 9, None), True, False, ["end"]),
        (segment(S.RUNNING, 0, 5, duration=5), True, True, ["replaced by a restart"]),
        (
            segment(S.DESCHEDULING, 0, 5, duration=5),
            False,
            False,
            [],
        ),  # not admitted: no preemption
    ],
)
def test_segment_notes(
    seg: Segment, after_admission: bool, superseded: bool, want: list[str]
) -> None:
    assert segment_notes(seg, after_admission=after_admission, superseded=superseded) == want


def change(old: S, new: S, seconds: float, writer: str = "reconciler") -> timeline_pb2.StateChange:
    made = timeline_pb2.StateChange(from_state=old, to_state=new, writer=writer)  # type: ignore[arg-type]
    made.time.FromDatetime(at(seconds))
    return made


#: A preempted run: (state, start, seconds in it); ends COMPLETED at 100 s.
PREEMPTED = [
    (S.INITIALIZING, 0, 2),
    (S.SCHEDULING, 2, 8),
    (S.RUNNING, 10, 30),
    (S.DESCHEDULING, 40, 5),
    (S.SCHEDULING, 45, 25),
    (S.RUNNING, 70, 30),
    (S.COMPLETED, 100, 0),
]


def preempted_segments() -> tuple[list[Segment], list[timeline_pb2.StateChange]]:
    segments, changes = [], []
    previous = S.WORK_UNIT_STATE_UNSPECIFIED
    for state, start, seconds in PREEMPTED:
        end = None if state is S.COMPLETED else start + seconds
        segments.append(segment(state, start, end, duration=seconds))
        changes.append(change(previous, state, start, "ess" if start == 0 else "reconciler"))
        previous = state
    return segments, changes


def test_segments_view_lays_out_a_preempted_run() -> None:
    segments, changes = preempted_segments()
    rows = segments_view(segments, changes, superseded=False)
    assert [(r["state"], r["duration"], r["note"]) for r in rows] == [
        ("INITIALIZING", "2s", ""),
        ("SCHEDULING", "8s", ""),
        ("RUNNING", "30s", ""),
        ("DESCHEDULING", "5s", "preempted"),
        ("SCHEDULING", "25s", "re-queued"),
        ("RUNNING", "30s", ""),
        ("COMPLETED", "0s", "end"),
    ]
    assert [r["requeue"] for r in rows] == [False, False, False, True, True, False, False]
    # INITIALIZING (2 s of 100: under the minimum) and the zero-length end get the
    # minimum; the other 98 s share the remaining 96 % in proportion.
    share = 96 / 98
    widths = [MIN_WIDTH, 8 * share, 30 * share, 5 * share, 25 * share, 30 * share, MIN_WIDTH]
    assert [r["width"] for r in rows] == pytest.approx(widths, abs=0.001)
    offsets = [sum(widths[:i]) for i in range(len(widths))]
    assert [r["offset"] for r in rows] == pytest.approx(offsets, abs=0.002)
    assert rows[0]["from"] == ""  # the creation
    assert rows[3]["from"] == "RUNNING"
    assert rows[0]["writer"] == "ess"
    assert rows[2]["start"] == "2026-05-01 12:00:10Z"
    assert rows[3]["label"] == "DESCHEDULING 5s"


def test_an_ongoing_segment_is_labelled_as_such() -> None:
    rows = segments_view(
        [
            segment(S.INITIALIZING, 0, 0.7, duration=0.7),
            segment(S.RUNNING, 1, None, duration=90, ongoing=True),
        ],
        [
            change(S.WORK_UNIT_STATE_UNSPECIFIED, S.INITIALIZING, 0),
            change(S.INITIALIZING, S.RUNNING, 1),
        ],
        superseded=False,
    )
    assert [(r["label"], r["note"], r["ongoing"]) for r in rows] == [
        ("INITIALIZING 0.7s", "", False),
        ("RUNNING 1m30s …", "ongoing", True),
    ]
    assert rows[0]["width"] == MIN_WIDTH


def wire_execution(
    eid: int, rows: list[tuple[S, float, float | None, float, bool]], **flags: bool
) -> timeline_pb2.ExecutionTimeline:
    """An execution as the ESS sends it, from (state, start, end, seconds, ongoing)."""
    made = timeline_pb2.ExecutionTimeline(execution_id=eid, state=rows[-1][0], **flags)  # type: ignore[arg-type]
    previous = S.WORK_UNIT_STATE_UNSPECIFIED
    for state, start, end, seconds, ongoing in rows:
        made.changes.append(change(previous, state, start))
        wire = made.segments.add(state=state, ongoing=ongoing)
        wire.start_time.FromDatetime(at(start))
        if end is not None:
            wire.end_time.FromDatetime(at(end))
        wire.duration.FromTimedelta(timedelta(seconds=seconds))
        previous = state
    return made


@pytest.mark.parametrize(
    ("execution", "status", "end"),
    [
        (
            wire_execution(
                1,
                [(S.INITIALIZING, 0, 2, 2, False), (S.COMPLETED, 50, None, 0, False)],
                terminal=True,
            ),
            "ended",
            "2026-05-01 12:00:50Z",
        ),
        (
            wire_execution(
                1,
                [(S.INITIALIZING, 0, 2, 2, False), (S.RUNNING, 2, 200, 198, False)],
                superseded=True,
            ),
            "replaced by a restart",
            "2026-05-01 12:03:20Z",
        ),
        (
            wire_execution(
                2, [(S.RESTARTING, 200, 203, 3, False), (S.RUNNING, 203, None, 97, True)]
            ),
            "live",
            "2026-05-01 12:05:00Z (now)",
        ),
    ],
)
def test_execution_view_status_and_bar_end(
    execution: timeline_pb2.ExecutionTimeline, status: str, end: str
) -> None:
    view = execution_view(execution, "2026-05-01 12:05:00Z")
    assert (view["status"], view["end"]) == (status, end)
    assert view["start"] == fmt_start(execution)


def fmt_start(execution: timeline_pb2.ExecutionTimeline) -> str:
    return execution.segments[0].start_time.ToDatetime().isoformat(sep=" ") + "Z"


def test_timeline_view_puts_the_current_execution_first_with_its_phases() -> None:
    timeline = timeline_pb2.WorkUnitTimeline(name="experiments/1/workUnits/2")
    timeline.now.FromDatetime(at(300))
    timeline.executions.append(
        wire_execution(
            1, [(S.INITIALIZING, 0, 2, 2, False), (S.RUNNING, 2, 200, 198, False)], superseded=True
        )
    )
    current = wire_execution(
        2, [(S.RESTARTING, 200, 203, 3, False), (S.RUNNING, 203, None, 97, True)]
    )
    current.phases.queue_wait.FromTimedelta(timedelta(seconds=3))
    current.phases.startup.FromTimedelta(timedelta(0))
    current.phases.run.FromTimedelta(timedelta(seconds=97))
    current.phases.run_ongoing = True
    current.phases.requeue.FromTimedelta(timedelta(0))
    timeline.executions.append(current)
    first, second = timeline_view(timeline)
    assert (first["eid"], second["eid"]) == (2, 1)
    assert first["phases"] == [
        {"label": "queue wait", "value": "3s", "ongoing": False},
        {"label": "start-up", "value": "0s", "ongoing": False},
        {"label": "run", "value": "1m37s", "ongoing": True},
    ]
    assert [p["value"] for p in second["phases"]] == ["—", "—", "—"]  # never set: absent
    assert (first["requeue"], first["preemptions"]) == ("0s", 0)


def test_timings_view() -> None:
    timings = timeline_pb2.ExperimentTimings(name="experiments/7", work_units=3)
    timings.now.FromDatetime(at(300))
    timings.queue_wait.median.FromTimedelta(timedelta(seconds=155))
    timings.queue_wait.p90.FromTimedelta(timedelta(seconds=271))
    timings.queue_wait.count, timings.queue_wait.ongoing = 2, 1
    stuck = timings.stuck.add(name="experiments/7/workUnits/2", execution_id=1, state=S.SCHEDULING)
    stuck.since.FromDatetime(at(5))
    stuck.duration.FromTimedelta(timedelta(seconds=295))
    view = timings_view(timings)
    assert view["phases"] == [
        {"label": "queue wait", "median": "2m35s", "p90": "4m31s", "count": 2, "ongoing": 1},
        {"label": "start-up", "median": "—", "p90": "—", "count": 0, "ongoing": 0},
        {"label": "run", "median": "—", "p90": "—", "count": 0, "ongoing": 0},
    ]
    assert view["stuck"] == [
        {
            "wid": "2",
            "eid": 1,
            "state": "SCHEDULING",
            "tone": "pending",
            "since": "2026-05-01 12:00:05Z",
            "duration": "4m55s",
        }
    ]
    assert (view["work_units"], view["now"]) == (3, "2026-05-01 12:05:00Z")
