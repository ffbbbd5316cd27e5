"""The timelines on the dashboard's pages against a real ESS over gRPC (no browser): the
work-unit page draws each execution's segments with their durations and notes, the
experiment page shows the phase timings and the stuck units (docs/ui.md)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from tests.integration.ess_harness import Ess
from tests.integration.test_timelines import build_scenario
from tests.integration.ui_support import running_ui


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as response:
        body = await response.text()
        assert response.status == 200, body
        return body


def section(page: str, eid: int) -> str:
    """The HTML of one execution's timeline."""
    found = re.search(
        rf'<section class="execution-timeline" data-eid="{eid}">(.*?)</section>', page, re.S
    )
    assert found, page
    return found.group(1)


def drawn(html: str) -> list[tuple[str, str, str]]:
    """(state, duration, width) of each segment drawn on the bar."""
    return re.findall(
        r'<svg class="tl-seg[^"]*" x="[\d.]+%" width="([\d.]+)%" height="28" '
        r'data-state="(\w+)" data-duration="([\w.]+)"',
        html,
    )


async def test_work_unit_page_draws_each_execution(ess: Ess, http: aiohttp.ClientSession) -> None:
    scenario = await build_scenario(ess)
    async with running_ui(ess.channel) as ui:
        page = await get(http, f"{ui}/{scenario.preempted}")
        live = await get(http, f"{ui}/{scenario.preempted}/live")
    assert section(page, 1) == section(live, 1)  # the live fragment redraws it

    first = section(page, 1)
    assert [(state, duration) for _w, state, duration in drawn(first)] == [
        ("INITIALIZING", "2s"),
        ("SCHEDULING", "8s"),
        ("RUNNING", "30s"),
        ("DESCHEDULING", "5s"),
        ("SCHEDULING", "25s"),
        ("RUNNING", "30s"),
        ("COMPLETED", "0s"),
    ]
    widths = [float(w) for w, _s, _d in drawn(first)]
    assert widths[2] == pytest.approx(6 * widths[3], rel=0.01)  # 30 s against 5 s
    assert sum(widths) == pytest.approx(100, abs=0.01)
    assert "queue wait <b>10s</b>" in first
    assert "run <b>1m30s</b>" in first
    assert "re-queued <b>30s</b>" in first
    assert "<b>1</b> preemption</span>" in first
    assert 'data-state="DESCHEDULING" data-note="preempted"' in first
    assert 'data-state="SCHEDULING" data-note="re-queued"' in first
    assert "reconciler@xmc.internal/reconciler/jobset" in first  # the writer of a change
    assert "ended" in first

    second = section(page, 2)
    assert [(state, duration) for _w, state, duration in drawn(second)] == [
        ("RESTARTING", "3s"),
        ("SCHEDULING", "7s"),
        ("RUNNING", "1m30s"),
    ]
    assert 'class="tl-seg st-running ongoing"' in second
    assert "RUNNING 1m30s …" in second
    assert "run <b>1m30s</b> (ongoing)" in second
    assert "2026-05-01 12:05:00Z (now)" in second
    order = re.findall(r'<section class="execution-timeline" data-eid="(\d+)">', page)
    assert order == ["2", "1"]  # newest first


async def test_experiment_page_shows_timings_and_stuck_units(
    ess: Ess, http: aiohttp.ClientSession
) -> None:
    scenario = await build_scenario(ess)
    xid = scenario.experiment.split("/")[1]
    async with running_ui(ess.channel) as ui:
        page = await get(http, f"{ui}/{scenario.experiment}")
    timings = page[page.index('<section id="timings">') :]
    assert re.search(
        r'<tr data-phase="queue wait"><td>queue wait</td><td class="median">2m35s</td>'
        r'<td class="p90">4m31s</td><td>2</td><td>1</td></tr>',
        timings,
    ), timings
    stuck = re.findall(
        r'<tr data-stuck-wid="(\d+)"><td><a href="([^"]+)">.*?class="badge [\w-]+">(\w+)<.*?'
        r'<td class="duration">([\w.]+)</td>',
        timings,
    )
    assert stuck[0] == ("2", f"/experiments/{xid}/workUnits/2", "SCHEDULING", "4m55s")
    assert [wid for wid, *_ in stuck] == ["2", "1"]  # unit 1 has been RUNNING for 90 s


class WithoutTimelines(grpc.GenericRpcHandler):  # type: ignore[misc]
    """An ESS from before TimelineService: every other RPC is passed to the real ESS as
    bytes, TimelineService's are not handled, so gRPC itself answers UNIMPLEMENTED."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = details.method
        if method.startswith("/xmc.v1.TimelineService/"):
            return None
        forward = self._channel.unary_unary(method)

        async def handle(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            answer: bytes = await forward(request, metadata=context.invocation_metadata())
            return answer

        return grpc.unary_unary_rpc_method_handler(handle)


@contextlib.asynccontextmanager
async def older_ess(ess: Ess) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((WithoutTimelines(ess.channel),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()
        await server.stop(grace=None)


async def test_a_failing_timeline_read_costs_only_its_block(
    ess: Ess, http: aiohttp.ClientSession
) -> None:
    scenario = await build_scenario(ess)
    async with older_ess(ess) as channel, running_ui(channel) as ui:
        unit = await get(http, f"{ui}/{scenario.preempted}")
        experiment = await get(http, f"{ui}/{scenario.experiment}")
    assert "Timeline unavailable: UNIMPLEMENTED" in unit
    assert 'class="executions"' in unit  # the rest of the page is there
    assert 'class="stop"' in unit
    assert "Timings unavailable: UNIMPLEMENTED" in experiment
    assert 'class="units"' in experiment
