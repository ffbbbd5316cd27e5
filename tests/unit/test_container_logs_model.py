"""The pure rules of kept container logs (xmc.model.container_logs, xmc.model.pod_containers)
and the live read's line splitting and run choice (ess.live_logs, ess.logs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ess.live_logs import split_lines
from ess.logs import live_runs
from xmc.log_text import LogPrinter
from xmc.model.container_logs import (
    Capture,
    CaptureKey,
    Evictable,
    Merge,
    exit_code_of,
    keep_tail,
    merge,
    pick_evictions,
    visible_text,
)
from xmc.model.pod_containers import ContainerRun, container_runs
from xmc.store.transactions import StoredLog
from xmc_api.xmc.v1 import logs_pb2

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 2, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("data", "limit", "want"),
    [
        pytest.param(b"a\nb\n", 10, (b"a\nb\n", False), id="fits"),
        pytest.param(b"one\ntwo\nthree\n", 10, (b"three\n", True), id="cut at a line start"),
        pytest.param(b"one\ntwo\n", 4, (b"two\n", True), id="exactly the last line"),
        pytest.param(b"abcdefghij", 4, (b"ghij", True), id="one long line cut mid-line"),
        pytest.param(b"xx\nabcdefgh", 5, (b"defgh", True), id="no line start inside"),
        pytest.param(b"", 4, (b"", False), id="empty"),
    ],
)
def test_keep_tail(data: bytes, limit: int, want: tuple[bytes, bool]) -> None:
    assert keep_tail(data, limit) == want


def capture(*, terminated: bool = True, text: bytes = b"x", unavailable: str = "") -> Capture:
    return Capture(
        CaptureKey(1, 1, 1, "uid", "main", 0), "pod", terminated, 0, "", None, text, False,
        unavailable,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("stored_terminated", "stored_unavailable", "new", "want"),
    [
        pytest.param(True, False, capture(), Merge.KEEP, id="a final capture stays"),
        pytest.param(True, False, capture(unavailable="gone"), Merge.KEEP, id="final vs none"),
        pytest.param(True, True, capture(), Merge.REPLACE, id="text beats an unread end"),
        pytest.param(True, True, capture(unavailable="gone"), Merge.KEEP, id="two unread ends"),
        pytest.param(False, False, capture(), Merge.REPLACE, id="the end beats a running read"),
        pytest.param(
            False,
            False,
            capture(unavailable="gone"),
            Merge.END_ONLY,
            id="an unread end keeps the running read's text",
        ),
        pytest.param(False, True, capture(unavailable="gone"), Merge.REPLACE, id="both unread"),
        pytest.param(False, False, capture(terminated=False), Merge.REPLACE, id="newer running"),
    ],
)
def test_merge(
    stored_terminated: bool, stored_unavailable: bool, new: Capture, want: Merge
) -> None:
    assert merge(stored_terminated, stored_unavailable, new) is want


@pytest.mark.parametrize(
    ("rows", "excess", "want"),
    [
        pytest.param([(1, 10), (2, 10), (3, 10)], 15, [1, 2], id="oldest until enough"),
        pytest.param([(1, 10), (2, 10)], 10, [1], id="exactly"),
        pytest.param([(1, 10)], 0, [], id="nothing to free"),
        pytest.param([(1, 0), (2, 5)], 5, [1, 2], id="empty rows are passed over on the way"),
        pytest.param([(1, 3)], 10, [1], id="not enough: all there is"),
    ],
)
def test_pick_evictions(rows: list[tuple[int, int]], excess: int, want: list[int]) -> None:
    assert pick_evictions((Evictable(i, n) for i, n in rows), excess) == want


@pytest.mark.parametrize(
    ("runs", "want"),
    [
        pytest.param([], None, id="nothing ended"),
        pytest.param([(False, None, None)], None, id="still running"),
        pytest.param([(True, 0, T0), (True, 0, T1)], 0, id="all succeeded"),
        pytest.param([(True, 0, T0), (True, 3, T1)], 3, id="the failure"),
        pytest.param([(True, 137, T1), (True, 1, T0)], 1, id="the first failure to finish"),
        pytest.param([(True, 2, None), (True, 1, T0)], 1, id="an unknown finish sorts last"),
        pytest.param([(True, None, T0)], None, id="no code reported"),
    ],
)
def test_exit_code_of(
    runs: list[tuple[bool, int | None, datetime | None]], want: int | None
) -> None:
    assert exit_code_of(runs) == want


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(b"plain\tline\n", "plain\tline\n", id="tab and newline stay"),
        pytest.param(b"\x1b[31mred\x1b[0m", "\u241b[31mred\u241b[0m", id="ANSI escapes shown"),
        pytest.param(b"a\rb\x00\x07", "a\u240db\u2400\u2407", id="CR NUL BEL shown"),
        pytest.param(b"<b>&amp;</b>", "<b>&amp;</b>", id="markup left to the page's escaping"),
        pytest.param(b"\xff ok", "\ufffd ok", id="invalid UTF-8 replaced"),
        pytest.param("\u009b".encode(), "\ufffd", id="C1 control replaced"),
        pytest.param(b"\x7f", "\u2421", id="DEL shown"),
    ],
)
def test_visible_text(data: bytes, want: str) -> None:
    assert visible_text(data) == want


def pod(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u"}, "status": {"containerStatuses": list(statuses)}}


RUNNING = {"running": {"startedAt": "2026-12-02T12:00:00Z"}}
ENDED = {"terminated": {"exitCode": 2, "reason": "Error", "finishedAt": "2026-12-02T12:01:00Z"}}


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param(
            {"name": "main", "state": RUNNING},
            [ContainerRun("p", "u", "main", 0, False, None, "", None)],
            id="running",
        ),
        pytest.param(
            {"name": "main", "restartCount": 2, "state": ENDED},
            [ContainerRun("p", "u", "main", 2, True, 2, "Error", T1)],
            id="ended",
        ),
        pytest.param({"name": "main", "state": {"waiting": {}}}, [], id="waiting: no log"),
        pytest.param(
            {"name": "main", "restartCount": 1, "state": RUNNING, "lastState": ENDED},
            [
                ContainerRun("p", "u", "main", 0, True, 2, "Error", T1, previous=True),
                ContainerRun("p", "u", "main", 1, False, None, "", None),
            ],
            id="restarted in place: the previous run too",
        ),
        pytest.param({"state": RUNNING}, [], id="no name"),
        pytest.param(
            {"name": "main", "state": {"terminated": {"exitCode": True}}},
            [ContainerRun("p", "u", "main", 0, True, None, "", None)],
            id="a boolean is no exit code",
        ),
    ],
)
def test_container_runs(status: dict[str, Any], want: list[ContainerRun]) -> None:
    assert container_runs(pod(status)) == want


@pytest.mark.parametrize(
    ("pending", "chunk", "want"),
    [
        pytest.param(b"", b"a\nb", (b"a\n", b"b"), id="whole lines out, the rest kept"),
        pytest.param(b"par", b"tial\n", (b"partial\n", b""), id="a line completed"),
        pytest.param(b"", b"no newline", (b"", b"no newline"), id="nothing whole yet"),
        pytest.param(b"x" * 70_000, b"y", (b"x" * 70_000 + b"y", b""), id="huge line flushed"),
    ],
)
def test_split_lines(pending: bytes, chunk: bytes, want: tuple[bytes, bytes]) -> None:
    assert split_lines(pending, chunk) == want


def stored(container: str, run: int, *, terminated: bool) -> StoredLog:
    return StoredLog(1, 1, "p", "u", container, run, terminated, None, "", None, b"", False,
                     False, "", T0)  # fmt: skip


def live(container: str, run: int) -> ContainerRun:
    return ContainerRun("p", "u", container, run, False, None, "", None)


@pytest.mark.parametrize(
    ("kept", "container", "want"),
    [
        pytest.param([], "", [live("a", 0), live("b", 0)], id="nothing stored: all live"),
        pytest.param([stored("a", 0, terminated=True)], "", [live("b", 0)], id="final stored"),
        pytest.param(
            [stored("a", 0, terminated=False)],
            "",
            [live("a", 0), live("b", 0)],
            id="a running capture is read live again",
        ),
        pytest.param([], "b", [live("b", 0)], id="one container"),
    ],
)
def test_live_runs(kept: list[StoredLog], container: str, want: list[ContainerRun]) -> None:
    assert live_runs([live("a", 0), live("b", 0)], kept, container) == want


def chunk(pod: str, *, start: bool = False, data: bytes = b"", notice: str = "",
          exit_code: int | None = None, running: bool = False) -> logs_pb2.LogChunk:  # fmt: skip
    log = logs_pb2.ContainerLog(execution_id=1, pod=pod, container="main",
                                terminated=not running)  # fmt: skip
    if exit_code is not None:
        log.exit_code = exit_code
    return logs_pb2.LogChunk(log=log, start=start, data=data, notice=notice)


@pytest.mark.parametrize(
    ("chunks", "raw", "headers", "want_out", "want_err"),
    [
        pytest.param(
            [chunk("p", start=True, exit_code=0), chunk("p", data=b"a\n")], False, True,
            b"==> p/main (execution 1, exit code 0) <==\na\n", "", id="a header, then the log",
        ),
        pytest.param(
            [chunk("p", start=True, running=True), chunk("q", start=True, running=True),
             chunk("p", data=b"a\n", running=True), chunk("q", data=b"b\n", running=True)],
            False, True,
            b"==> p/main (execution 1, running) <==\n==> q/main (execution 1, running) <==\n"
            b"==> p/main (execution 1, running) <==\na\n==> q/main (execution 1, running) <==\nb\n",
            "", id="interleaved runs: a header at each switch",
        ),
        pytest.param(
            [chunk("p", start=True), chunk("p", data=b"\x1b[1m")], False, False,
            "\u241b[1m".encode(), "", id="quiet, escapes shown",
        ),
        pytest.param([chunk("p", data=b"\x1b[1m")], True, False, b"\x1b[1m", "", id="raw"),
        pytest.param(
            [chunk("p", notice="evicted: cap")], False, False, b"", "xmc: evicted: cap\n",
            id="notices to stderr",
        ),
    ],
)  # fmt: skip
def test_log_printer(
    chunks: list[logs_pb2.LogChunk], raw: bool, headers: bool, want_out: bytes, want_err: str
) -> None:
    printer = LogPrinter(raw=raw, headers=headers)
    rendered = [printer.render(c) for c in chunks]
    assert b"".join(out for out, _ in rendered) == want_out
    assert "".join(err for _, err in rendered) == want_err
