"""``xmc-kubesim --state-dir`` as a real process: SIGKILLed within about a second of a
burst of writes (once its journal holds them) and restarted on the same directory it
serves the same objects (uids, resourceVersions), its counter jumps, and a pod that was
running finishes at its scheduled time so its JobSet completes; a torn last journal line
is dropped; SIGTERM writes the final state; a corrupt state file or journal line stops it
with a clear error; ``--ephemeral`` writes nothing."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubesim import journal
from kubesim.main import parse_args
from kubesim.persist import RESOURCE_VERSION_BUMP
from kubesim.snapshot import STATE_FILE, read_snapshot
from tests.kubesim.controller_support import make_jobset, replicated_job
from tests.kubesim.support import JOBSET_API, jobset
from tests.kubesim.test_api_process import SCRIPT, _free_port, _until_healthy
from tests.waiting import eventually

# kubesim as a process, killed and restarted: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

G, V = JOBSET_API
JOBSETS = f"/apis/{G}/{V}/namespaces/default/jobsets"
PODS = "/api/v1/namespaces/default/pods"
DEADLINE = 20.0


@asynccontextmanager
async def _kubesim(*args: str, cwd: Path | None = None) -> AsyncIterator[_Sim]:
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), *args, "--port", str(port), stderr=asyncio.subprocess.PIPE, cwd=cwd
    )
    sim = _Sim(f"http://127.0.0.1:{port}", process)
    try:
        await _until_healthy(sim.url, process)
        async with aiohttp.ClientSession() as sim.http:
            yield sim
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


class _Sim:
    def __init__(self, url: str, process: asyncio.subprocess.Process) -> None:
        self.url = url
        self.process = process
        self.http: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.http.request(method, self.url + path, json=body) as response:
            assert response.status < 300, await response.text()
            return await response.json()

    async def until(self, path: str, test: Any, what: str) -> Any:
        """GET ``path`` until ``test(body)`` holds; the body then."""
        return await eventually(
            lambda: self.call("GET", path), test, within=DEADLINE, every=0.05, what=what
        )

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()


def _journalled(state_dir: Path) -> int:
    """The highest resourceVersion in the journals (0: none yet)."""
    paths = journal.journal_paths(state_dir)
    return max(
        (
            entry.resource_version
            for number, path in enumerate(paths, start=1)
            for entry in journal.read_journal(path, last=number == len(paths)).entries
        ),
        default=0,
    )


async def _journal_reaches(state_dir: Path, resource_version: int) -> float:
    """Wait until the journal holds ``resource_version``; the seconds that took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await eventually(
        lambda: _journalled(state_dir) >= resource_version,
        within=DEADLINE,
        what=f"resourceVersion {resource_version} in the journal",
    )
    return loop.time() - started


def _one_pod_running(body: dict[str, Any]) -> bool:
    return [p.get("status", {}).get("phase") for p in body["items"]] == ["Running"]


def _identities(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (o["metadata"]["name"], o["metadata"]["uid"], o["metadata"]["resourceVersion"])
        for o in items
    ]


async def test_a_killed_kubesim_restarts_with_the_same_objects(tmp_path: Path) -> None:
    args = ("--no-controllers", "--state-dir", str(tmp_path))  # the default 1 s interval
    async with _kubesim(*args) as sim:
        names = [f"js-{i}" for i in range(40)]
        for name in names:
            await sim.call("POST", JOBSETS, jobset(name))
        for name in names[1::2]:
            await sim.call("DELETE", f"{JOBSETS}/{name}")
        await sim.call("PUT", f"{JOBSETS}/js-0", await sim.call("GET", f"{JOBSETS}/js-0"))
        before = await sim.call("GET", JOBSETS)
        seen = int(before["metadata"]["resourceVersion"])
        # The journal holds the last acknowledged write within one interval (1 s) and its
        # fsync; no snapshot is involved (the first start's, of the empty cluster, only).
        assert await _journal_reaches(tmp_path, seen) <= 1.5
        assert read_snapshot(tmp_path / STATE_FILE).resource_version < seen  # type: ignore[union-attr]
        await sim.kill()
    async with _kubesim(*args) as sim:
        after = await sim.call("GET", JOBSETS)
        assert after["items"] == before["items"]  # same uids, resourceVersions, everything
        assert [i[0] for i in _identities(after["items"])] == sorted(names[::2])
        # A crash may have lost writes clients saw: the counter jumps past them ...
        assert int(after["metadata"]["resourceVersion"]) == seen + RESOURCE_VERSION_BUMP
        created = await sim.call("POST", JOBSETS, jobset("d"))
        assert int(created["metadata"]["resourceVersion"]) > seen + RESOURCE_VERSION_BUMP
        # ... and a watcher resuming from before the crash is told to relist (410).
        watch = f"{JOBSETS}?watch=true&resourceVersion={seen}"
        async with sim.http.get(sim.url + watch) as response:
            event = json.loads(await response.content.readline())
        assert (event["type"], event["object"]["code"]) == ("ERROR", 410)


async def test_a_running_pod_finishes_on_schedule_after_a_kill(tmp_path: Path) -> None:
    args = ("--state-dir", str(tmp_path), "--journal-interval", "0.2")
    behavior = {"start_seconds": 0, "run_seconds": 5}
    manifest = make_jobset(
        "sweep", replicated_job(behavior=behavior), queue=None, suspend=False, finalizers=()
    )
    manifest |= {"apiVersion": f"{G}/{V}", "kind": "JobSet"}
    async with _kubesim(*args) as sim:
        await sim.call("POST", JOBSETS, manifest)
        running = await sim.until(PODS, _one_pod_running, "the pod running")
        await _journal_reaches(tmp_path, int(running["metadata"]["resourceVersion"]))
        await sim.kill()
    pod = running["items"][0]
    async with _kubesim(*args) as sim:
        done = await sim.until(
            f"{JOBSETS}/sweep",
            lambda js: any(
                c["type"] == "Completed" and c["status"] == "True"
                for c in js.get("status", {}).get("conditions", [])
            ),
            "the JobSet completed",
        )
        assert done["metadata"]["name"] == "sweep"
        pods = (await sim.call("GET", PODS))["items"]
    assert [p["metadata"]["uid"] for p in pods] == [pod["metadata"]["uid"]]
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["startedAt"] == started  # the same run, resumed
    ran = datetime.fromisoformat(terminated["finishedAt"]) - datetime.fromisoformat(started)
    assert 4 <= ran.total_seconds() <= 6  # its schedule, not restarted from zero


async def test_sigterm_writes_the_final_state_and_the_counter_continues(tmp_path: Path) -> None:
    args = ("--no-controllers", "--state-dir", str(tmp_path), "--journal-interval", "3600")
    async with _kubesim(*args) as sim:
        created = await sim.call("POST", JOBSETS, jobset("a"))
        sim.process.send_signal(signal.SIGTERM)
        assert await sim.process.wait() == 0
    saved = read_snapshot(tmp_path / STATE_FILE)
    assert saved is not None
    assert saved.clean
    assert saved.resource_version == int(created["metadata"]["resourceVersion"])
    assert journal.journal_paths(tmp_path) == []  # the clean snapshot holds everything
    async with _kubesim(*args) as sim:
        listed = await sim.call("GET", JOBSETS)
        assert listed["items"] == [created]
        assert listed["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_a_corrupt_state_file_stops_kubesim_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"kind": "kubesim-state", "format": 1, "resour')
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "--state-dir",
        str(tmp_path),
        "--port",
        str(_free_port()),
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(DEADLINE):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    message = stderr.decode()
    assert f"--state-dir {tmp_path}" in message
    assert f"{tmp_path / STATE_FILE}: line 1: not JSON" in message
    assert "--ephemeral" in message


async def test_a_torn_last_journal_line_is_dropped(tmp_path: Path) -> None:
    args = ("--no-controllers", "--state-dir", str(tmp_path), "--journal-interval", "0.1")
    async with _kubesim(*args) as sim:
        created = await sim.call("POST", JOBSETS, jobset("a"))
        await _journal_reaches(tmp_path, int(created["metadata"]["resourceVersion"]))
        await sim.kill()
    last = journal.journal_paths(tmp_path)[-1]
    whole = last.read_bytes()
    last.write_bytes(whole + b'{"rv":99999,"e":"ADD')  # a crash in the middle of an append
    async with _kubesim(*args) as sim:
        assert (await sim.call("GET", JOBSETS))["items"] == [created]
    assert last.read_bytes() == whole  # cut off before new lines follow it


async def test_a_corrupt_journal_line_stops_kubesim_with_a_clear_error(tmp_path: Path) -> None:
    args = ("--no-controllers", "--state-dir", str(tmp_path), "--journal-interval", "0.1")
    async with _kubesim(*args) as sim:
        for name in ("a", "b"):
            created = await sim.call("POST", JOBSETS, jobset(name))
        await _journal_reaches(tmp_path, int(created["metadata"]["resourceVersion"]))
        await sim.kill()
    last = journal.journal_paths(tmp_path)[-1]
    lines = last.read_bytes().splitlines(keepends=True)
    last.write_bytes(lines[0] + b"{garbage\n" + b"".join(lines[1:]))
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), *args, "--port", str(_free_port()), stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(DEADLINE):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert f"{last}: line 2: not JSON" in stderr.decode()


async def test_ephemeral_writes_nothing(tmp_path: Path) -> None:
    async with _kubesim("--ephemeral", "--no-controllers", cwd=tmp_path) as sim:
        await sim.call("POST", JOBSETS, jobset("a"))
        sim.process.send_signal(signal.SIGTERM)
        assert await sim.process.wait() == 0
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240


def test_state_dir_and_ephemeral_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--state-dir", "x", "--ephemeral"])
    assert parse_args(["--ephemeral"]).state_dir is None
