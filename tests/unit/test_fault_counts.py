"""The fault matrix's judge (bench/fault_counts.py): an automatic retry that never
happened, or a retry Operation left open, counts as lost; a unit past its last
execution counts as duplicated."""

from __future__ import annotations

from bench.fault_counts import Intent, Observed, count

from xmc.model.states import WorkUnitState

S = WorkUnitState
F = "experiments/1/workUnits/7"
JS = "xmc-1-7"
CREATE = Intent("create", F, f"{F}/operations/a")


def observed(
    *created: str, state: tuple[int, WorkUnitState] = (3, S.FAILED), **ops: bool
) -> Observed:
    operations = {f"{F}/operations/a": (True, 0)}
    operations |= {f"{F}/operations/{name}": (done, 0) for name, done in ops.items()}
    return Observed(
        units={F: state}, operations=operations, created=frozenset((JS, e) for e in created)
    )


def test_every_retry_seen_is_clean() -> None:
    counts = count({F: "retry"}, [CREATE], observed("1", "2", "3", r1=True, r2=True))
    assert (counts.lost, counts.stuck, counts.duplicated) == (0, 0, 0)


def test_a_retry_whose_jobset_never_came_is_lost() -> None:
    counts = count({F: "retry"}, [CREATE], observed("1", "2", state=(3, S.FAILED)))
    assert counts.lost == 1
    assert "no JobSet of execution 3" in counts.notes[0]


def test_a_retry_operation_left_open_is_lost() -> None:
    counts = count({F: "retry"}, [CREATE], observed("1", "2", "3", r1=True, r2=False))
    assert counts.lost == 1
    assert "lost retry operation" in counts.notes[0]


def test_a_fourth_execution_is_a_duplicate() -> None:
    counts = count({F: "retry"}, [CREATE], observed("1", "2", "3", "4", state=(4, S.FAILED)))
    assert counts.duplicated == 1
    assert counts.stuck == 1
