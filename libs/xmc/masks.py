"""Field masks of the public Update RPCs (AIP-134), applied in one place.

Only top-level fields are maskable here; each RPC names the fields a user may change, so
an Update can never touch server-owned fields (names, times, status).
"""

from __future__ import annotations

from collections.abc import Iterable

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
    """Copy each masked top-level field of ``source`` onto ``target`` (replace, not merge:
    a masked field that is unset in ``source`` is cleared)."""
    for path in paths:
        descriptor = target.DESCRIPTOR.fields_by_name[path]
        if descriptor.is_repeated:
            target.ClearField(path)
            getattr(target, path).extend(getattr(source, path))
        elif descriptor.message_type is not None:
            if source.HasField(path):
                getattr(target, path).CopyFrom(getattr(source, path))
            else:
                target.ClearField(path)
        else:
            setattr(target, path, getattr(source, path))
