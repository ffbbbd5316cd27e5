"""UpdateExperimentLaunchState's one real transition, and its idempotent repeats (SPEC §2.1)."""

from __future__ import annotations

import pytest

from xmc.model.states import LaunchState
from xmc.store.experiments import LaunchMove, decide_launch_move

L = LaunchState


@pytest.mark.parametrize(
    ("current", "requested", "move"),
    [
        (L.LAUNCHING, L.COMPLETED, LaunchMove.MOVE),
        (L.LAUNCHING, L.FAILED, LaunchMove.MOVE),
        (L.LAUNCHING, L.LAUNCHING, LaunchMove.NO_OP),
        (L.COMPLETED, L.COMPLETED, LaunchMove.NO_OP),
        (L.FAILED, L.FAILED, LaunchMove.NO_OP),
        (L.COMPLETED, L.FAILED, LaunchMove.REFUSE),
        (L.FAILED, L.COMPLETED, LaunchMove.REFUSE),
        (L.COMPLETED, L.LAUNCHING, LaunchMove.REFUSE),
        (L.FAILED, L.LAUNCHING, LaunchMove.REFUSE),
    ],
)
def test_decide_launch_move(current: LaunchState, requested: LaunchState, move: LaunchMove) -> None:
    assert decide_launch_move(current, requested) is move
