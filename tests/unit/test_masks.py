"""What an update mask names and whether the masked write accepts it
(``xmc.model.masks``), first and cached answers alike; and the merge details that the
per-mask lookup and the built-once merged execution must keep (``xmc.model.merge``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.masks import MaskPaths, accepted_before, accepted_mask_paths, mask_paths
from xmc.model.merge import merge_work_unit_execution
from xmc.model.states import WorkUnitState
from xmc.model.stored import StoredExecution
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

NONE = MaskPaths(False, False, False, False, False, False)
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("mask", "live", "finished"),
    [
        pytest.param(
            ("status.state", "status.detailed_status", "metadata"),
            MaskPaths(True, False, False, False, True, True),
            MaskPaths(True, False, False, False, False, False),
            id="the Reconciler's JobSet mask",
        ),
        pytest.param(
            ["status.user_message", "status.system_message"],
            MaskPaths(False, True, True, False, False, False),
            MaskPaths(False, False, True, False, False, False),
            id="a list: a finished execution keeps only the user's message",
        ),
        pytest.param(
            ("status.scheduling_information",) * 3,
            MaskPaths(False, False, False, True, False, False),
            NONE,
            id="a repeated path",
        ),
        pytest.param(("bogus",), NONE, NONE, id="an unknown path names nothing"),
        pytest.param((), NONE, NONE, id="empty"),
    ],
)
def test_mask_paths(mask: Sequence[str], live: MaskPaths, finished: MaskPaths) -> None:
    for _ in range(2):  # the first answer, then the cached one
        assert mask_paths(mask) == (live, finished)


@pytest.mark.parametrize(
    ("mask", "error"),
    [
        pytest.param((), "updates[4].update_mask: must name at least one path", id="empty"),
        pytest.param(
            ("metadata", "status.state_update_time", "bogus"),
            "updates[4].update_mask: 'status.state_update_time' is not a path of its own; "
            "it is carried by 'status.state'",
            id="state_update_time, before a later unknown path",
        ),
        pytest.param(
            ["metadata", "status.foo"],
            "updates[4].update_mask: unknown path 'status.foo'; allowed: metadata, "
            "status.detailed_status, status.scheduling_information, status.state, "
            "status.system_message, status.user_message",
            id="unknown path",
        ),
    ],
)
def test_a_refused_mask_is_refused_every_time(mask: Sequence[str], error: str) -> None:
    for _ in range(2):
        with pytest.raises(InvalidArgumentError) as info:
            accepted_mask_paths(mask, "updates[4]")
        assert str(info.value) == error
        assert accepted_before(mask) is None


def test_an_accepted_mask_is_known_afterwards() -> None:
    mask = ("metadata", "status.user_message")
    want = MaskPaths(False, False, True, False, False, True)
    assert accepted_mask_paths(mask, "updates[0]") == want
    assert accepted_before(mask) == want
    assert accepted_before(list(mask)) is None, "only tuples are cached (lists do not hash)"


def _stored(state_time: datetime) -> StoredExecution:
    return StoredExecution(T0, T0, None, WorkUnitState.RUNNING, state_time, T0)


def test_the_merge_keeps_a_stored_value_equal_to_the_merged_one() -> None:
    """An equal instant in another zone stays as stored, and nothing counts as changed."""
    plus_two = T0.astimezone(timezone(timedelta(hours=2)))
    stored = _stored(plus_two)
    new = WorkUnitExecution()
    new.status.state = int(WorkUnitState.RUNNING)  # type: ignore[assignment]
    new.status.state_update_time.FromDatetime(T0)
    result = merge_work_unit_execution(
        stored, new, ["status.state"], force_status_message_update=False, now=T0
    )
    assert result.execution is stored
    assert not result.changed
    assert result.execution.state_update_time.tzinfo == timezone(timedelta(hours=2))


def test_the_merge_builds_a_new_execution_only_when_something_changed() -> None:
    stored = _stored(T0)
    new = WorkUnitExecution()
    new.status.detailed_status.SetInParent()
    now = T0 + timedelta(minutes=1)
    mask = ("status.detailed_status",)
    result = merge_work_unit_execution(
        stored, new, mask, force_status_message_update=False, now=now
    )
    assert result.changed
    assert result.execution == stored._replace(
        detailed_status=b"", update_time=now, status_update_time=now
    )
    again = merge_work_unit_execution(
        result.execution, new, mask, force_status_message_update=False, now=now
    )
    assert again.execution is result.execution
    assert not again.changed
