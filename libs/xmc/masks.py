"""Field masks of the public Update RPCs (AIP-134), applied in one place.

Only top-level fields are maskable here; each RPC names the fields a user may change, so
an Update can never touch server-owned fields (names, times, status).
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message

from xmc.errors import InvalidArgumentError


def validate_update_mask(paths: Iterable[str], allowed: frozenset[str]) -> tuple[str, ...]:
    """The mask's paths, or INVALID_ARGUMENT naming the first path not in ``allowed``."""
    result = tuple(paths)
    if not result:
        raise InvalidArgumentError(
            f"update_mask: must name at least one path; allowed: {', '.join(sorted(allowed))}"
        )
    for path in result:
        if path not in allowed:
            raise InvalidArgumentError(
                f"update_mask: {path!r} cannot be updated; allowed: {', '.join(sorted(allowed))}"
            )
    return result


def apply_update_mask(target: Message, source: Message, paths: Iterable[str]) -> None:
    """Copy each masked field of ``source`` onto ``target``: replace, not merge (AIP-134).

    protobuf's ``FieldMask.MergeMessage`` with both ``replace_*`` options: a masked message
    field unset in ``source`` is cleared and a masked list or map is replaced, never
    appended to. Its default (merge) would keep stale list entries and old sub-fields.
    """
    FieldMask(paths=list(paths)).MergeMessage(
        source, target, replace_message_field=True, replace_repeated_field=True
    )
