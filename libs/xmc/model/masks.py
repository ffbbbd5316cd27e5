"""The paths of ``UpdateWorkUnitExecutions``' update masks (SPEC §4): which exist, which
ones a mask names, and whether the masked write accepts a mask.

A batch's items share a handful of masks, so what a mask names is decided once per
distinct mask and looked up afterwards, instead of a set built and probed per item. The
caches are bounded: masks come from callers, and a mask may repeat a path any number of
times. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from xmc.errors import InvalidArgumentError

STATE_PATH = "status.state"
SYSTEM_MESSAGE_PATH = "status.system_message"
USER_MESSAGE_PATH = "status.user_message"
SCHEDULING_INFORMATION_PATH = "status.scheduling_information"
DETAILED_STATUS_PATH = "status.detailed_status"
METADATA_PATH = "metadata"

#: The only paths the masked write accepts (SPEC §4). ``status.state_update_time`` travels
#: with ``status.state`` and is deliberately not a path of its own.
MASK_PATHS = frozenset(
    {
        STATE_PATH,
        SYSTEM_MESSAGE_PATH,
        USER_MESSAGE_PATH,
        SCHEDULING_INFORMATION_PATH,
        DETAILED_STATUS_PATH,
        METADATA_PATH,
    }
)


class MaskPaths(NamedTuple):
    """Which of ``MASK_PATHS`` an update mask names."""

    state: bool
    system_message: bool
    user_message: bool
    scheduling_information: bool
    detailed_status: bool
    metadata: bool


_MAX_MASKS = 256
#: (live, finished) paths per mask, for ``mask_paths``.
_PATHS: dict[tuple[str, ...], tuple[MaskPaths, MaskPaths]] = {}
#: The live paths of the masks ``accepted_mask_paths`` accepted.
_ACCEPTED: dict[tuple[str, ...], MaskPaths] = {}


def mask_paths(update_mask: Sequence[str]) -> tuple[MaskPaths, MaskPaths]:
    """The paths ``update_mask`` names for a live execution, and for a finished one: only
    the user's own message and the state (which the guard then refuses), step 1 of the
    merge (SPEC §5.3)."""
    key = update_mask if type(update_mask) is tuple else tuple(update_mask)
    paths = _PATHS.get(key)
    if paths is None:
        mask = frozenset(key)
        live = MaskPaths(
            STATE_PATH in mask,
            SYSTEM_MESSAGE_PATH in mask,
            USER_MESSAGE_PATH in mask,
            SCHEDULING_INFORMATION_PATH in mask,
            DETAILED_STATUS_PATH in mask,
            METADATA_PATH in mask,
        )
        paths = (live, MaskPaths(live.state, False, live.user_message, False, False, False))
        if len(_PATHS) < _MAX_MASKS:
            _PATHS[key] = paths
    return paths


def accepted_before(update_mask: Sequence[str]) -> MaskPaths | None:
    """The live paths of a mask ``accepted_mask_paths`` accepted already, else None."""
    return _ACCEPTED.get(update_mask) if type(update_mask) is tuple else None


def accepted_mask_paths(update_mask: Sequence[str], where: str) -> MaskPaths:
    """The live paths of a mask the masked write accepts; ``InvalidArgumentError`` naming
    ``where`` (e.g. ``updates[3]``) for an empty one or the first path it does not."""
    if not update_mask:
        raise InvalidArgumentError(f"{where}.update_mask: must name at least one path")
    for path in update_mask:
        if path == "status.state_update_time":
            raise InvalidArgumentError(
                f"{where}.update_mask: 'status.state_update_time' is not a path of its own; "
                "it is carried by 'status.state'"
            )
        if path not in MASK_PATHS:
            allowed = ", ".join(sorted(MASK_PATHS))
            raise InvalidArgumentError(
                f"{where}.update_mask: unknown path {path!r}; allowed: {allowed}"
            )
    accepted = mask_paths(update_mask)[0]
    if type(update_mask) is tuple and len(_ACCEPTED) < _MAX_MASKS:
        _ACCEPTED[update_mask] = accepted
    return accepted
