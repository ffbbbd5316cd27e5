"""Pure view models of the timelines (docs/timelines.md): a work unit's executions as bars
of state segments, and an experiment's phase timings and stuck units.

The ESS has already measured everything (segments, phases, percentiles, clamped at
zero); this module only lays it out: where each segment starts on its bar and how wide it
is, and the text that says what the colour says (state, time in state, ongoing,
preempted, re-queued), so the page is readable without colour and the layout rules are
table-tested without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ui.views import STATE_TONE, Row, fmt_time, known_state, tail_id
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.model.timeline import ADMITTED_STATES, REQUEUE_STATES, Segment
from xmc_api.xmc.v1 import timeline_pb2

#: The narrowest a segment is drawn, in percent of its bar: a state held for a second in a
#: run of hours (or a terminal state, which lasts no time) must still be seen and hovered.
MIN_WIDTH = 2.0

PREEMPTED, REQUEUED = "preempted", "re-queued"

#: A duration's units, largest first.
DURATION_UNITS: tuple[tuple[str, int], ...] = (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1))

#: The experiment page's phases, in the order a unit goes through them.
PHASES: tuple[tuple[str, str], ...] = (
    ("queue_wait", "queue wait"),
    ("startup", "start-up"),
    ("run", "run"),
)


def fmt_duration(value: timedelta) -> str:
    """Short and exact enough for a glance: tenths below 10 s (an ESS intent can last
    0.3 s), then whole seconds, at most three units, largest first: ``0s``, ``0.7s``,
    ``42s``, ``3m04s``, ``2h00m05s``, ``3d04h05m``."""
    tenths = round(value.total_seconds() * 10)
    if tenths < 100 and tenths % 10:
        return f"{tenths / 10:.1f}s"
    rest = round(value.total_seconds())
    parts: list[str] = []
    for suffix, size in DURATION_UNITS:
        count, rest = divmod(rest, size)
        if count or parts:  # from the largest unit present on, zero-padded after it
            parts.append(f"{count:02d}{suffix}" if parts else f"{count}{suffix}")
    return "".join(parts[:3]) or "0s"


def bar_widths(durations: Sequence[float], minimum: float = MIN_WIDTH) -> list[float]:
    """Each duration's width in percent of the bar (summing to 100): proportional to
    time, except that none is narrower than ``minimum``; the room those take is taken
    from the others in proportion. Equal widths when no time passed at all or when the
    minimum leaves no room for proportion."""
    count = len(durations)
    if not count:
        return []
    total = sum(durations)
    if total <= 0 or count * minimum >= 100:
        return [100 / count] * count
    small: set[int] = set()
    while True:  # a segment raised to the minimum shrinks the room of the rest
        free = 100 - minimum * len(small)
        rest = sum(d for i, d in enumerate(durations) if i not in small)
        grown = {i for i, d in enumerate(durations) if i not in small and d / rest * free < minimum}
        if not grown:
            return [minimum if i in small else d / rest * free for i, d in enumerate(durations)]
        small |= grown


def segment_notes(segment: Segment, *, after_admission: bool, superseded: bool) -> list[str]:
    """What the segment's colour and pattern say, in words: what kind of stretch it is
    (preempted, re-queued, the end, cut short by a restart), whether it is still going,
    and whether its writers' clocks ran backwards across it."""
    notes = []
    if after_admission and segment.state is WorkUnitState.DESCHEDULING:
        notes.append(PREEMPTED)
    elif after_admission and segment.state in REQUEUE_STATES:
        notes.append(REQUEUED)
    elif segment.state in EXECUTION_TERMINAL_STATES:
        notes.append("end")
    if superseded:
        notes.append("replaced by a restart")
    if segment.ongoing:
        notes.append("ongoing")
    if segment.end is not None and segment.end < segment.start:
        notes.append("clocks disagree: counted as 0s")
    return notes


def segments_view(
    segments: Sequence[Segment], changes: Sequence[timeline_pb2.StateChange], *, superseded: bool
) -> list[Row]:
    """Each segment with its place on the bar, its label and the change that opened it."""
    widths = bar_widths([s.duration.total_seconds() for s in segments])
    admitted = next((i for i, s in enumerate(segments) if s.state in ADMITTED_STATES), None)
    rows, offset = [], 0.0
    last = len(segments) - 1
    for i, (segment, change, width) in enumerate(zip(segments, changes, widths, strict=True)):
        duration = fmt_duration(segment.duration)
        notes = segment_notes(
            segment,
            after_admission=admitted is not None and i > admitted,
            superseded=superseded and i == last,
        )
        rows.append(
            {
                "state": segment.state.name,
                "tone": STATE_TONE[segment.state],
                "offset": round(offset, 3),
                "width": round(width, 3),
                "duration": duration,
                "label": f"{segment.state.name} {duration}" + (" …" if segment.ongoing else ""),
                "note": "; ".join(notes),
                "ongoing": segment.ongoing,
                "requeue": PREEMPTED in notes or REQUEUED in notes,
                "start": fmt_time(change.time),
                "from": known_state(change.from_state).name if change.from_state else "",
                "writer": change.writer,
                "principal": change.principal,
                "request_id": change.request_id,
            }
        )
        offset += width
    return rows


def _datetime(value: Timestamp) -> datetime:
    return value.ToDatetime(tzinfo=UTC)


def model_segment(segment: timeline_pb2.StateSegment) -> Segment:
    """The wire segment as the model's: an unset end is None."""
    return Segment(
        state=known_state(segment.state),
        start=_datetime(segment.start_time),
        end=_datetime(segment.end_time) if segment.HasField("end_time") else None,
        duration=segment.duration.ToTimedelta(),
        ongoing=segment.ongoing,
    )


def _phase(label: str, value: Duration, ongoing: bool, present: bool) -> Row:
    text = fmt_duration(value.ToTimedelta()) if present else "—"
    return {"label": label, "value": text, "ongoing": present and ongoing}


def _status(execution: timeline_pb2.ExecutionTimeline) -> str:
    if execution.terminal:
        return "ended"
    return "replaced by a restart" if execution.superseded else "live"


def _bar_end(execution: timeline_pb2.ExecutionTimeline, now: str) -> str:
    """The time at the bar's right end: the terminal change, the restart that replaced
    the execution, or now."""
    if not execution.segments:
        return ""
    last = execution.segments[-1]
    if execution.terminal:
        return fmt_time(last.start_time)
    if execution.superseded:
        return fmt_time(last.end_time)
    return f"{now} (now)"


def execution_view(execution: timeline_pb2.ExecutionTimeline, now: str) -> Row:
    """One execution: its bar, its phases, and where the bar starts and ends."""
    p = execution.phases
    state = known_state(execution.state)
    segments = segments_view(
        [model_segment(s) for s in execution.segments],
        execution.changes,
        superseded=execution.superseded,
    )
    return {
        "eid": execution.execution_id,
        "state": state.name,
        "tone": STATE_TONE[state],
        "status": _status(execution),
        "segments": segments,
        "start": segments[0]["start"] if segments else "",
        "end": _bar_end(execution, now),
        "phases": [
            _phase("queue wait", p.queue_wait, p.queue_wait_ongoing, p.HasField("queue_wait")),
            _phase("start-up", p.startup, p.startup_ongoing, p.HasField("startup")),
            _phase("run", p.run, p.run_ongoing, p.HasField("run")),
        ],
        "requeue": fmt_duration(p.requeue.ToTimedelta()),
        "preemptions": p.preemptions,
        # Under a retry policy: "attempt 2, retried after exit code 137".
        "attempt": _attempt(execution),
        "retry_verdict": execution.retry_verdict,
        "retry_reason": execution.retry_reason,
    }


def _attempt(execution: timeline_pb2.ExecutionTimeline) -> str:
    if not (execution.retried_after or execution.retry_verdict):
        return ""
    text = f"attempt {execution.attempt or 1}"
    return f"{text}, retried after {execution.retried_after}" if execution.retried_after else text


def timeline_view(timeline: timeline_pb2.WorkUnitTimeline) -> list[Row]:
    """The unit's executions, newest first: the current one is what a reader came for."""
    now = fmt_time(timeline.now)
    return [execution_view(e, now) for e in reversed(timeline.executions)]


def attributions_view(timeline: timeline_pb2.WorkUnitTimeline) -> list[Row]:
    """ "created by …", "restarted by …", "stopped by …" (docs/audit.md): who, when, and
    the request id, for those the ESS could name."""
    return [
        {
            "verb": verb,
            "principal": who.principal,
            "time": fmt_time(who.time),
            "request_id": who.request_id,
        }
        for verb, who, present in (
            ("created", timeline.created, timeline.HasField("created")),
            ("restarted", timeline.restarted, timeline.HasField("restarted")),
            ("stopped", timeline.stopped, timeline.HasField("stopped")),
        )
        if present
    ]


def _statistics(label: str, stats: timeline_pb2.PhaseStatistics) -> Row:
    counted = stats.count > 0
    return {
        "label": label,
        "median": fmt_duration(stats.median.ToTimedelta()) if counted else "—",
        "p90": fmt_duration(stats.p90.ToTimedelta()) if counted else "—",
        "count": stats.count,
        "ongoing": stats.ongoing,
    }


def timings_view(timings: timeline_pb2.ExperimentTimings) -> Row:
    """The experiment page's timings block: each phase's median and p90, and the units
    stuck longest in their current state."""
    return {
        "work_units": timings.work_units,
        "now": fmt_time(timings.now),
        "phases": [_statistics(label, getattr(timings, field)) for field, label in PHASES],
        "stuck": [
            {
                "wid": tail_id(unit.name),
                "eid": unit.execution_id,
                "state": known_state(unit.state).name,
                "tone": STATE_TONE[known_state(unit.state)],
                "since": fmt_time(unit.since),
                "duration": fmt_duration(unit.duration.ToTimedelta()),
            }
            for unit in timings.stuck
        ],
    }
