"""Container logs kept by XMC (docs/logs.md): the pure rules of what one capture keeps,
when a later capture replaces an earlier one, which rows an experiment's cap evicts, and
how a log is shown as text.

The Reconciler captures, the ESS stores, the ESS, CLI and dashboard read; each rule lives
here once so the writer and the reader cannot disagree.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

#: Bytes of each container run's tail XMC keeps unless XMC_LOG_TAIL_BYTES says otherwise.
DEFAULT_TAIL_BYTES: Final = 64 * 1024
#: Bytes of log text one experiment may hold unless XMC_LOG_EXPERIMENT_BYTES says otherwise.
DEFAULT_EXPERIMENT_BYTES: Final = 256 * 1024 * 1024


@dataclass(frozen=True)
class CaptureKey:
    """One run of one container of one execution's pod: what a capture is stored under."""

    xid: int
    wid: int
    eid: int
    pod_uid: str
    container: str
    run: int


@dataclass(frozen=True)
class Capture:
    """A container's log tail as the Reconciler read it, with how the container ended."""

    key: CaptureKey
    pod_name: str
    #: The container had ended when the log was read: the tail is final.
    terminated: bool
    exit_code: int | None
    reason: str
    finished_at: datetime | None
    text: bytes
    truncated: bool
    #: Why no text could be read ('' when it was).
    unavailable: str = ""


def keep_tail(data: bytes, limit: int) -> tuple[bytes, bool]:
    """The last ``limit`` bytes of ``data`` and whether anything was dropped.

    The cut moves forward to the next line start when there is one within the kept bytes,
    so the kept tail begins with a whole line; a single line longer than the limit is cut
    mid-line rather than dropped.
    """
    if len(data) <= limit:
        return data, False
    tail = data[len(data) - limit :]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return tail, True


class Merge(enum.Enum):
    """What a new capture of a stored container run does to the stored row."""

    KEEP = "keep"
    REPLACE = "replace"
    #: Take the new end (terminated, exit code, reason) and keep the stored text.
    END_ONLY = "end_only"


def merge(stored_terminated: bool, stored_unavailable: bool, new: Capture) -> Merge:
    """How ``new`` changes the stored capture of the same container run.

    A final capture with text is never replaced: its text is the container's last word,
    and a late duplicate (a pod event replayed after a restart) must not shorten it. A
    capture of a running container (the finalizer reads a stop's pods before they are
    killed) gives way to a later one; but when the later read found no log (the pod was
    deleted meanwhile) only its end is taken, so the text read earlier is kept.
    """
    if stored_terminated and not stored_unavailable:
        return Merge.KEEP
    if not new.unavailable:
        return Merge.REPLACE
    if stored_terminated or stored_unavailable:
        return Merge.KEEP if stored_terminated else Merge.REPLACE
    return Merge.END_ONLY


def partial_note(why: str) -> str:
    """What an END_ONLY row says of its text: it was read while the container ran, and
    its end could not be read. Set as the row's ``unavailable``, so a later read of the
    whole log still replaces it (:func:`merge`)."""
    return f"only the output read before the container ended is kept; its end: {why}"[:1024]


@dataclass(frozen=True)
class Evictable:
    id: int
    bytes: int


def pick_evictions(oldest_first: Iterable[Evictable], excess: int) -> list[int]:
    """The ids to evict, oldest first, until at least ``excess`` bytes are freed."""
    picked: list[int] = []
    freed = 0
    for row in oldest_first:
        if freed >= excess:
            break
        picked.append(row.id)
        freed += row.bytes
    return picked


def exit_code_of(runs: Sequence[tuple[bool, int | None, datetime | None]]) -> int | None:
    """An execution's exit code from its containers' (terminated, exit code, finished at):
    the first non-zero code to finish, else 0 when every captured run ended with 0, else
    None (nothing ended, or no code was reported)."""
    ended = [(at, code) for terminated, code, at in runs if terminated and code is not None]
    failed = [(at, code) for at, code in ended if code != 0]
    if failed:
        failed.sort(key=lambda item: (item[0] is None, item[0] or datetime.max))
        return failed[0][1]
    return 0 if ended else None


#: C0 control characters (but tab and newline), DEL and the C1 range.
_CONTROL: Final = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROL[0x7F] = 0x2421
_CONTROL.update({c: 0xFFFD for c in range(0x80, 0xA0)})


def visible_text(data: bytes) -> str:
    """A log as text to show on a page: invalid UTF-8 as U+FFFD and every control
    character (an ANSI escape's ESC among them) as its visible Control Picture (ESC as
    "␛"), so nothing in a log is interpreted by a terminal or a browser. Markup is left to
    the page's escaping (a template autoescapes, a script sets ``textContent``)."""
    return data.decode("utf-8", errors="replace").translate(_CONTROL)
