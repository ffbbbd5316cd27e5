"""Status messages XMC writes about a work unit (SPEC §3.2), built in one place."""

from __future__ import annotations

from xmc.model.states import Severity
from xmc.names import work_unit_name
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage


def backend_message(severity: Severity, xid: int, wid: int, text: str) -> StructuredMessage:
    """A message from XMC itself (source XMANAGER_BACKEND) about work unit ``xid/wid``;
    control characters in ``text`` (a user's label quoted in a reason) are spelled out."""
    return StructuredMessage(
        severity=int(severity),  # type: ignore[arg-type]
        source=StructuredMessage.XMANAGER_BACKEND,
        parent=work_unit_name(xid, wid),
        user_facing_text=printable(text),
    )


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}


def printable(text: str) -> str:
    """``text`` with control characters spelled out (``\\x00``): what XMC stores as a
    reason must be readable, and Postgres ``text`` cannot hold a NUL at all — a NUL
    from a user's label once made a FAILED write roll back on every retry."""
    return text.translate(_CONTROL)
