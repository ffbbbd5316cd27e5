"""The figures of ``bench/e2e_sweep.py``: what one run on one target measured, and how
it is printed (per milestone from ``sweep_timeline``, CPU per process, notes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bench.sweep_timeline import Timeline, percentile, proc_cpu, stage_lines


@dataclass
class Phase:
    """One timed run on one target: the XMC sweep, or the raw baseline."""

    wall: float = 0.0
    timeline: Timeline = field(default_factory=Timeline)
    cpu: dict[str, float] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)


@dataclass
class Sweep:
    target: str
    size: int
    sweep: Phase = field(default_factory=Phase)
    raw: Phase = field(default_factory=Phase)
    rss_mb: dict[str, float] = field(default_factory=dict)
    #: CPU seconds per second of each process while nothing ran (``--idle`` s before).
    idle: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Meter:
    """CPU seconds of a set of processes between construction and :meth:`read`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start = {name: proc_cpu(pid) for name, pid in pids.items()}
        self.load0 = os.getloadavg()[0]

    def read(self, phase: Phase) -> None:
        phase.cpu = {n: proc_cpu(p) - self.start[n] for n, p in self.pids.items()}
        phase.load = (self.load0, os.getloadavg()[0])


def log_notes(log_dir: Path) -> list[str]:
    """Warnings and errors each XMC service logged (structlog's ``level``)."""
    counts = []
    for path in sorted(log_dir.glob("*.log")):
        text = path.read_text(errors="replace").lower()
        warnings, errors = text.count('"level": "warning"'), text.count('"level": "error"')
        if warnings or errors:
            counts.append(f"{path.stem} {warnings} warnings, {errors} errors")
    return ["logs: " + (", ".join(counts) or "no warning or error")]


def report_sweep(s: Sweep, first: Sweep | None) -> None:
    """The XMC sweep's figures, printed as soon as it ends (a later failure keeps them)."""
    growth = (
        f"; growth {s.sweep.wall / first.sweep.wall:.2f} for N ×{s.size / first.size:.0f}"
        if first is not None and first is not s
        else ""
    )
    print(
        f"[{s.target}] N={s.size}: sweep wall {s.sweep.wall:.1f} s{growth}; load average "
        f"{s.sweep.load[0]:.1f} → {s.sweep.load[1]:.1f}"
    )
    print("    sweep:", *stage_lines(s.sweep.timeline), sep="\n")
    print("    CPU, sweep: " + _cpu(s.sweep.cpu, s.size))
    idle = sum(s.idle.values())
    busiest = ", ".join(
        f"{n} {c:.2f}" for n, c in sorted(s.idle.items(), key=lambda kv: -kv[1])[:3]
    )
    print(
        f"    CPU at idle: {idle:.2f} s/s ({busiest}): {idle * s.sweep.wall:.1f} s of the"
        " sweep's CPU would have been spent anyway"
    )
    print("    peak RSS: " + ", ".join(f"{n} {m:.0f} MB" for n, m in s.rss_mb.items()))
    marks = s.sweep.timeline.joined()
    obs = [t - marks["completed"][k] for k, t in marks["completed_stored"].items()
           if k in marks["completed"]]  # fmt: skip
    print(f"    JobSet Completed → COMPLETED stored p99 {percentile(obs, 0.99) * 1000:.0f} ms")
    for note in s.notes:
        print(f"    {note}")
    s.notes.clear()


def report_raw(s: Sweep) -> None:
    """The raw baseline's figures, and the sweep's wall as a ratio of it."""
    print(
        f"[{s.target}] N={s.size}: raw wall {s.raw.wall:.1f} s (sweep / raw "
        f"{s.sweep.wall / s.raw.wall:.2f}); load average {s.raw.load[0]:.1f} → "
        f"{s.raw.load[1]:.1f}"
    )
    print("    raw:", *stage_lines(s.raw.timeline), sep="\n")
    print("    CPU, raw: " + _cpu(s.raw.cpu, s.size))
    idle = sum(s.idle.values())
    print(f"    CPU at idle × raw wall: {idle * s.raw.wall:.1f} s")
    for note in s.notes:
        print(f"    {note}")


def _cpu(cpu: dict[str, float], size: int) -> str:
    total = sum(cpu.values())
    parts = [f"{n} {c:.1f}" for n, c in sorted(cpu.items(), key=lambda kv: -kv[1])]
    return f"total {total:.1f} s ({total / size * 1000:.0f} ms/unit): " + ", ".join(parts)
