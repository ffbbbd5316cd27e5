"""The experiment page's sweep table against a real ESS over gRPC (no browser): arg
columns varying first, the constant args once, filters on args (a bad one a notice, not a
500), sorting by a header, grouping with state counts, stopping the selected units, and
the links and notes of units and the experiment (docs/ui.md)."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import aiohttp

from tests.integration import test_ui_pages
from tests.integration.ess_harness import Ess, metadata
from tests.integration.sweep_args import SWEEP, unit_with_args
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.url_pb2 import Url

ALICE = metadata("alice")
#: The dashboard on the test's ESS, and an HTTP session: the page tests' fixtures.
ui = test_ui_pages.ui
http = test_ui_pages.http


async def sweep(ess: Ess) -> int:
    """The six units of ``SWEEP``, each with ``data=c4``; unit 1 has a url and notes, the
    experiment notes, a url and an artifact; unit 2 an artifact with a javascript: url."""
    created = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(
            experiment=Experiment(
                title="lr sweep",
                notes="baseline for the paper",
                urls=[Url(url="https://wandb.example/run", display_name="wandb")],
            )
        ),
        metadata=ALICE,
    )
    for i, args in enumerate(SWEEP):
        unit = unit_with_args({**args, "data": "c4"})
        if i == 0:
            unit.notes = "the good one"
            unit.urls.add(url="https://tb.example/1", display_name="tensorboard")
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=unit), metadata=ALICE
        )
    for parent, url, label in (
        (created.name, "https://gs.example/ckpt", "checkpoints"),
        (f"{created.name}/workUnits/2", "javascript:alert(1)", "sneaky"),
    ):
        await ess.api.CreateArtifact(
            api_pb2.CreateArtifactRequest(
                parent=parent, artifact=Artifact(url=Url(url=url, display_name=label))
            ),
            metadata=ALICE,
        )
    return int(created.name.split("/")[1])


async def page(http: aiohttp.ClientSession, url: str, status: int = 200, **params: str) -> str:
    async with http.get(url, params=params) as response:
        text = await response.text()
        assert response.status == status, text
        return text


def wids(html: str) -> list[int]:
    return [int(w) for w in re.findall(r'<tr data-wid="(\d+)"', html)]


def headers(html: str) -> list[str]:
    return re.findall(r'<th data-col="([^"]+)"', html)


async def test_arg_columns_varying_first_and_constants_once(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await sweep(ess)
    html = await page(http, f"{ui}/experiments/{xid}")
    assert headers(html)[:5] == ["wid", "state", "args.lr", "args.layers", "args.opt"]
    assert "args.data" not in headers(html)
    assert '<code data-arg="data">data=c4</code>' in html
    assert wids(html) == [1, 2, 3, 4, 5, 6]
    cells = re.findall(r'<tr data-wid="4">.*?</tr>', html, re.S)[0]
    assert re.findall(r'data-arg="(\w+)">([^<]*)<', cells) == [
        ("lr", "1e-1"),
        ("layers", "8"),
        ("opt", "adam"),
    ]


async def test_filter_sort_and_a_bad_filter(ess: Ess, ui: str, http: aiohttp.ClientSession) -> None:
    xid = await sweep(ess)
    url = f"{ui}/experiments/{xid}"
    assert wids(await page(http, url, filter="args.lr > 0.01")) == [1, 4]
    assert wids(await page(http, url, filter='args.opt = "adam"', order_by="args.layers desc")) == [
        4,
        1,
        3,
        6,
    ]
    # The header of the sorted column sorts the other way next, and keeps the filter.
    html = await page(http, url, filter="args.opt = sgd", order_by="args.lr")
    href = unescape(re.findall(r'<th data-col="args.lr"[^>]*><a href="([^"]+)"', html)[0])
    assert parse_qs(urlsplit(href).query) == {
        "filter": ["args.opt = sgd"],
        "order_by": ["args.lr desc"],
    }
    assert wids(await page(http, url + href)) == [5, 2]

    for bad, named in (("args.lr >", "filter"), ("colour = red", "colour")):
        html = await page(http, url, status=400, filter=bad)
        problem = re.findall(r'<p class="error problem" role="alert">([^<]*)</p>', html)
        assert "INVALID_ARGUMENT" in problem[0]
        assert named in problem[0]
        assert f'value="{bad.replace(">", "&gt;")}"' in html  # the box keeps it to fix
        assert wids(html) == []
    html = await page(http, url, status=400, order_by="args.lr sideways")
    assert "order_by" in re.findall(r'class="error problem"[^>]*>([^<]*)<', html)[0]


async def test_group_by_an_arg_with_state_counts(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await sweep(ess)
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"experiments/{xid}/workUnits/2"), metadata=ALICE
    )
    url = f"{ui}/experiments/{xid}"
    html = await page(http, url, group="opt")
    groups = re.findall(
        r'<tr data-value="([^"]*)"><td><a href="([^"]+)" class="group-link">.*?'
        r'<td class="count">(\d+)<td class="barcell">(.*?)</tr>',
        html,
        re.S,
    )
    assert [(value, int(count)) for value, _, count, _ in groups] == [("adam", 4), ("sgd", 2)]
    sgd_bar = groups[1][3]
    assert "INITIALIZING: 1" in sgd_bar
    assert "STOPPING: 1" in sgd_bar or "STOPPED: 1" in sgd_bar
    # A group's link filters the table to it.
    assert wids(await page(http, url + unescape(groups[1][1]))) == [2, 5]
    # Units without the key are a group of their own, and their link finds them.
    html = await page(http, url, group="lr", filter="args.opt = adam")
    link = re.findall(r'<tr data-value="\(none\)"><td><a href="([^"]+)"', html)[0]
    assert wids(await page(http, url + unescape(link))) == [6]
    html = await page(http, url, status=400, group="no-such")
    assert "key" in re.findall(r'class="error problem"[^>]*>([^<]*)<', html)[0]


async def state_of(ess: Ess, xid: int, wid: int) -> WorkUnitState:
    unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"), metadata=ALICE
    )
    return WorkUnitState(unit.current_work_unit_execution.status.state)


async def test_stop_the_selected_units(ess: Ess, ui: str, http: aiohttp.ClientSession) -> None:
    xid = await sweep(ess)
    back = f"/experiments/{xid}?filter=args.opt+%3D+adam"
    async with http.post(
        f"{ui}/experiments/{xid}/selected",
        data=[("wid", "1"), ("wid", "3"), ("action", "stop"), ("back", back)],
        allow_redirects=False,
    ) as response:
        assert response.status == 303
        location = response.headers["Location"]
    assert location.startswith(back + "&notice=stop+of+2+selected")
    states = [await state_of(ess, xid, wid) for wid in range(1, 7)]
    assert [s in (WorkUnitState.STOPPING, WorkUnitState.STOPPED) for s in states] == [
        True, False, True, False, False, False,
    ]  # fmt: skip

    # "Stop filtered" acts on the typed filter too: sgd's units, 2 and 5.
    async with http.post(
        f"{ui}/experiments/{xid}/stop",
        data={"filter": "args.opt = sgd", "confirm": "on"},
        allow_redirects=False,
    ) as response:
        assert response.status == 303
        assert "notice=stop+of+units+matching+args.opt" in response.headers["Location"]
    states = [await state_of(ess, xid, wid) for wid in range(1, 7)]
    assert [s in (WorkUnitState.STOPPING, WorkUnitState.STOPPED) for s in states] == [
        True, True, True, False, True, False,
    ]  # fmt: skip

    too_many = [("wid", str(w)) for w in range(1, 502)]
    for data, message in (
        ([("action", "stop")], "tick at least one work unit"),
        ([("wid", "1"), ("action", "delete")], "action: expected stop or restart"),
        ([("wid", "x"), ("action", "stop")], "wid: expected a work unit id"),
        ([*too_many, ("action", "restart")], "501 units selected; at most 500"),
    ):
        async with http.post(f"{ui}/experiments/{xid}/selected", data=data) as response:
            assert response.status == 400
            assert message in await response.text()


async def test_links_and_notes(ess: Ess, ui: str, http: aiohttp.ClientSession) -> None:
    xid = await sweep(ess)
    html = await page(http, f"{ui}/experiments/{xid}")
    assert '<dd class="notes">baseline for the paper</dd>' in html
    assert '<a href="https://wandb.example/run" rel="noopener">wandb</a>' in html
    assert '<a href="https://gs.example/ckpt" rel="noopener">checkpoints</a>' in html
    unit1 = re.findall(r'<tr data-wid="1">.*?</tr>', html, re.S)[0]
    assert '<a href="https://tb.example/1" rel="noopener">tensorboard</a>' in unit1
    assert '<span class="notes">the good one</span>' in unit1
    unit2 = re.findall(r'<tr data-wid="2">.*?</tr>', html, re.S)[0]
    assert "sneaky" in unit2
    assert "javascript:" not in html


async def test_the_live_fragment_keeps_the_view_and_the_columns(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await sweep(ess)
    html = await page(http, f"{ui}/experiments/{xid}", filter="args.layers >= 8")
    live = unescape(re.findall(r'data-live-url="([^"]+)"', html)[0])
    assert parse_qs(urlsplit(live).query) == {
        "filter": ["args.layers >= 8"],
        "cols": ["lr,layers,opt"],
    }
    fragment = await page(http, f"{ui}{live}")
    assert "<html" not in fragment
    assert wids(fragment) == [2, 4]
    assert headers(fragment)[2:5] == ["args.lr", "args.layers", "args.opt"]
