"""Table tests of ``plan_work_unit_ids``: which id each CreateWorkUnit item gets (SPEC §4)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import pytest

from xmc.errors import PermissionDeniedError, XmcError
from xmc.model.work_unit_ids import IdPlan, IdRequest, Key, plan_work_unit_ids
from xmc.names import MAX_CLIENT_WORK_UNIT_ID, MAX_ID

X, Y = 1, 2
NEXT = {X: 5, Y: 1}


def _summary(plan: IdPlan, count: int) -> list[str]:
    """Each item's fate as one word and its id; fails unless every item has exactly one."""
    fates: dict[int, list[str]] = {i: [] for i in range(count)}
    for key, i in plan.planned.items():
        fates[i].append(f"new {key[0]}/{key[1]}")
    for i, error in plan.refused.items():
        fates[i].append(type(error).__name__)
    for i, key in plan.created_before.items():
        fates[i].append(f"before {key[0]}/{key[1]}")
    for i, key in plan.repeats.items():
        fates[i].append(f"repeat {key[0]}/{key[1]}")
    assert all(len(f) == 1 for f in fates.values()), fates
    return [f[0] for f in fates.values()]


def _plan(
    items: Sequence[tuple[int, int | None]],
    *,
    next_wid: Mapping[int, int] = NEXT,
    created_before: Collection[Key] = (),
    denied: Collection[int] = (),
    asked: list[int] | None = None,
) -> IdPlan:
    def refuse(i: int) -> XmcError | None:
        if asked is not None:
            asked.append(i)
        return PermissionDeniedError("no") if i in denied else None

    return plan_work_unit_ids(
        [IdRequest(xid, wid) for xid, wid in items],
        next_wid=next_wid,
        created_before=created_before,
        refuse=refuse,
    )


@pytest.mark.parametrize(
    ("items", "next_wid", "created_before", "denied", "want", "want_next"),
    [
        pytest.param(
            [(X, None), (X, None), (Y, None)], NEXT, (), (),
            ["new 1/5", "new 1/6", "new 2/1"], {X: 7, Y: 2},
            id="server ids are the experiment's next ones, in item order",
        ),
        pytest.param(
            [(X, 9), (X, None)], NEXT, (), (),
            ["new 1/9", "new 1/10"], {X: 11, Y: 1},
            id="a chosen id moves the next server id past it",
        ),
        pytest.param(
            [(X, 2), (X, None)], NEXT, (), (),
            ["new 1/2", "new 1/5"], {X: 6, Y: 1},
            id="a chosen id below the next server id leaves it",
        ),
        pytest.param(
            [(X, 0), (X, -3), (X, MAX_CLIENT_WORK_UNIT_ID + 1), (X, MAX_CLIENT_WORK_UNIT_ID)],
            NEXT, (), (),
            ["InvalidArgumentError"] * 3 + [f"new 1/{MAX_CLIENT_WORK_UNIT_ID}"],
            {X: MAX_CLIENT_WORK_UNIT_ID + 1, Y: 1},
            id="a chosen id must be in 1..MAX_CLIENT_WORK_UNIT_ID",
        ),
        pytest.param(
            [(3, None), (3, 4), (X, None)], NEXT, (), (),
            ["NotFoundError", "NotFoundError", "new 1/5"], {X: 6, Y: 1},
            id="an unknown experiment refuses its items only",
        ),
        pytest.param(
            [(X, None), (X, None)], NEXT, (), (0,),
            ["PermissionDeniedError", "new 1/5"], {X: 6, Y: 1},
            id="a refused item takes no id",
        ),
        pytest.param(
            [(X, None), (X, 7)], {X: MAX_ID}, (), (),
            ["ResourceExhaustedError", "new 1/7"], {X: MAX_ID},
            id="server ids used up: only a chosen id can be created",
        ),
        pytest.param(
            [(X, 7), (X, None)], NEXT, {(X, 7)}, (),
            ["before 1/7", "new 1/5"], {X: 6, Y: 1},
            id="a chosen id created before answers with the first call and takes no id",
        ),
        pytest.param(
            [(X, 7), (Y, 7), (X, 7)], NEXT, (), (),
            ["new 1/7", "new 2/7", "repeat 1/7"], {X: 8, Y: 8},
            id="a chosen id twice in the group is created once, per experiment",
        ),
        pytest.param(
            [(X, 7), (X, 7)], NEXT, {(X, 7)}, (),
            ["before 1/7", "before 1/7"], {X: 5, Y: 1},
            id="a repeat of an id created before is not an in-group repeat",
        ),
        pytest.param(
            [(X, 7), (X, 7)], NEXT, (), (0,),
            ["PermissionDeniedError", "new 1/7"], {X: 8, Y: 1},
            id="a refused first item leaves the id to the next",
        ),
        pytest.param([], NEXT, (), (), [], NEXT, id="an empty group plans nothing"),
    ],
)  # fmt: skip
def test_plan(
    items: list[tuple[int, int | None]],
    next_wid: dict[int, int],
    created_before: set[Key],
    denied: tuple[int, ...],
    want: list[str],
    want_next: dict[int, int],
) -> None:
    plan = _plan(items, next_wid=next_wid, created_before=created_before, denied=denied)
    assert _summary(plan, len(items)) == want
    assert plan.next_wid == want_next


def test_refuse_is_asked_only_of_items_with_a_valid_id_and_an_existing_experiment() -> None:
    asked: list[int] = []
    _plan([(X, None), (X, 0), (3, None), (Y, 4), (X, 4)], asked=asked)
    assert asked == [0, 3, 4]


def test_planned_ids_keep_item_order_and_the_callers_next_ids_stay_unchanged() -> None:
    next_wid = dict(NEXT)
    plan = _plan([(Y, None), (X, 9), (X, None)], next_wid=next_wid)
    assert list(plan.planned.items()) == [((Y, 1), 0), ((X, 9), 1), ((X, 10), 2)]
    assert next_wid == NEXT
