"""Which id each work unit of a CreateWorkUnit group gets (SPEC §4), decided without I/O.

``xmc.store.creation`` locks the experiments, reads what this needs (each experiment's
next server-assigned id, the client-chosen ids an earlier call already created), asks
:func:`plan_work_unit_ids`, and inserts what the plan says. The rules, in the order they
apply to an item:

1. a client-chosen id must be in 1..``MAX_CLIENT_WORK_UNIT_ID`` (INVALID_ARGUMENT);
2. the experiment must exist (NOT_FOUND);
3. the caller must be allowed to write it (``refuse``, the caller's authorization);
4. without a chosen id the item gets the experiment's next id, unless the ids up to
   ``MAX_ID`` are used up (RESOURCE_EXHAUSTED: only ids chosen before the client bound
   existed can have pushed the next id that far);
5. a chosen id an earlier call created answers with that call's Operation (an
   idempotent repeat); one chosen twice in this group is created once, for its first item.

Every planned id moves the experiment's next id past it, so a server-assigned id never
lands on a client-chosen one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from xmc.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    XmcError,
)
from xmc.names import MAX_CLIENT_WORK_UNIT_ID, MAX_ID, experiment_name

#: (experiment id, work-unit id).
Key = tuple[int, int]


@dataclass(frozen=True)
class IdRequest:
    """One item of the group: its experiment, and its client-chosen id or None."""

    xid: int
    wid: int | None


@dataclass(frozen=True)
class IdPlan:
    """Every item lands in exactly one of ``planned`` (by its index as value),
    ``refused``, ``created_before`` and ``repeats``."""

    #: The ids to insert, in item order, each with the index of the item that creates it.
    planned: dict[Key, int] = field(default_factory=dict)
    #: Items refused, by index.
    refused: dict[int, XmcError] = field(default_factory=dict)
    #: Items whose chosen id an earlier call created: index → that id.
    created_before: dict[int, Key] = field(default_factory=dict)
    #: Later items of an id chosen twice in this group: index → the id (its first item is
    #: in ``planned``).
    repeats: dict[int, Key] = field(default_factory=dict)
    #: Each existing experiment's next server-assigned id once the plan is carried out.
    next_wid: dict[int, int] = field(default_factory=dict)


def _invalid_id(wid: int | None) -> XmcError | None:
    if wid is not None and wid < 1:
        return InvalidArgumentError(f"work_unit_id: must be >= 1, got {wid}")
    if wid is not None and wid > MAX_CLIENT_WORK_UNIT_ID:
        return InvalidArgumentError(
            f"work_unit_id: must be <= {MAX_CLIENT_WORK_UNIT_ID}, got {wid}"
        )
    return None


def plan_work_unit_ids(
    items: Sequence[IdRequest],
    *,
    next_wid: Mapping[int, int],
    created_before: Collection[Key],
    refuse: Callable[[int], XmcError | None] | None = None,
    admit: Callable[[int], XmcError | None] | None = None,
) -> IdPlan:
    """The plan for ``items`` (see the module docstring). ``next_wid`` holds the existing
    experiments (locked by the caller); ``refuse`` sees the index of each item whose id is
    valid and whose experiment exists, and returns the error that refuses it, or None.
    ``admit`` (quotas) sees only the items that would create a unit, in order, so a
    repeat of an earlier create is never refused for a quota nor counted by one."""
    plan = IdPlan(next_wid=dict(next_wid))
    for i, item in enumerate(items):
        refusal = _invalid_id(item.wid)
        if refusal is None and item.xid not in plan.next_wid:
            refusal = NotFoundError(f"parent: {experiment_name(item.xid)} does not exist")
        if refusal is None and refuse is not None:
            refusal = refuse(i)
        if refusal is None and item.wid is None and plan.next_wid[item.xid] >= MAX_ID:
            refusal = ResourceExhaustedError(
                f"parent: {experiment_name(item.xid)} has no server-assigned work-unit "
                "ids left; choose a work_unit_id"
            )
        if refusal is not None:
            plan.refused[i] = refusal
            continue
        key = (item.xid, plan.next_wid[item.xid] if item.wid is None else item.wid)
        if item.wid is not None and key in created_before:
            plan.created_before[i] = key
        elif item.wid is not None and key in plan.planned:
            plan.repeats[i] = key
        elif admit is not None and (over := admit(i)) is not None:
            plan.refused[i] = over
        else:
            plan.next_wid[item.xid] = max(plan.next_wid[item.xid], key[1] + 1)
            plan.planned[key] = i
    return plan
