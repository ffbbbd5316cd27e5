"""The dashboard's pages against a real ESS over gRPC (no browser): what each page shows,
the actions, the token pass-through, and errors as messages on the page."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.ui_support import running_ui
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ALICE = metadata("alice")


@pytest.fixture
async def ui(ess: Ess) -> AsyncIterator[str]:
    async with running_ui(ess.channel) as base:
        yield base


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def experiment(ess: Ess, title: str, units: int = 0) -> int:
    created = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title=title, tags=["sweep"])),
        metadata=ALICE,
    )
    ess.clock.advance(1)  # distinct creation times: the list is newest first
    for _ in range(units):
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
    return int(created.name.split("/")[1])


async def get(http: aiohttp.ClientSession, url: str, **kwargs: object) -> tuple[int, str]:
    async with http.get(url, **kwargs) as response:  # type: ignore[arg-type]
        return response.status, await response.text()


async def test_experiments_page_lists_searches_and_pages(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    first = await experiment(ess, "alpha sweep", units=2)
    await experiment(ess, "beta sweep")
    await experiment(ess, "gamma sweep")

    status, page = await get(http, f"{ui}/")
    assert status == 200
    assert "alpha sweep" in page
    assert "alice@example.com" in page
    assert f'href="/experiments/{first}"' in page
    assert "INITIALIZING 2" in page  # the state bar's legend
    assert "LAUNCHING" in page or "UNSPECIFIED" in page

    status, page = await get(http, f"{ui}/", params={"q": 'title = "alpha sweep"'})
    assert status == 200
    assert "alpha sweep" in page
    assert "beta sweep" not in page

    status, page = await get(http, f"{ui}/", params={"page_size": "2"})
    assert status == 200
    assert 'rel="next"' in page
    assert "gamma sweep" in page
    assert "alpha sweep" not in page

    status, page = await get(http, f"{ui}/", params={"q": "title = = oops"})
    assert status == 400
    assert "INVALID_ARGUMENT" in page
    assert "Traceback" not in page


async def test_experiment_page_filters_by_state_and_missing_is_404(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await experiment(ess, "units", units=3)
    status, page = await get(http, f"{ui}/experiments/{xid}")
    assert status == 200
    assert page.count('data-state="INITIALIZING"') == 3
    assert 'data-live-url="/experiments/' in page

    status, page = await get(http, f"{ui}/experiments/{xid}", params={"state": "RUNNING"})
    assert status == 200
    assert "No work units match <code>state = RUNNING</code>" in page

    status, fragment = await get(http, f"{ui}/experiments/{xid}/live")
    assert status == 200
    assert "<html" not in fragment
    assert 'data-wid="3"' in fragment

    status, page = await get(http, f"{ui}/experiments/{xid}", params={"state": "BOGUS"})
    assert status == 400
    assert "unknown state" in page

    for printed in (f"{ui}//experiments/{xid}", f"{ui}/experiments/{xid}/"):
        status, page = await get(http, printed)  # XMANAGER_UI_URL ending in a slash
        assert status == 200
        assert 'data-wid="3"' in page

    status, page = await get(http, f"{ui}/experiments/99999")
    assert status == 404
    assert "NOT_FOUND" in page
    assert "Not found" in page
    status, page = await get(http, f"{ui}/experiments/not-a-number")
    assert status == 404
    assert "page not found" in page


async def test_experiment_page_pages_its_units_and_keeps_the_page_size(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await experiment(ess, "pages", units=3)
    status, page = await get(http, f"{ui}/experiments/{xid}", params={"page_size": "2"})
    assert status == 200
    assert page.count('data-state="INITIALIZING"') == 2
    assert "2 of 3 units on this page" in page
    assert "page_size=2&amp;page_token=" in page  # the next page keeps the size

    for bad in ("0", "1001", "many"):
        status, page = await get(http, f"{ui}/experiments/{xid}", params={"page_size": bad})
        assert status == 400
        assert "page_size: expected 1..1000" in page
    status, page = await get(http, f"{ui}/experiments/{xid}", params={"page_size": "1000"})
    assert status == 200
    assert page.count('data-state="INITIALIZING"') == 3
    assert "units on this page" not in page


async def test_work_unit_page_and_stop_restart(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    xid = await experiment(ess, "one", units=3)
    status, page = await get(http, f"{ui}/experiments/{xid}/workUnits/1")
    assert status == 200
    assert "Executions" in page
    assert "Status messages" in page
    assert "Scheduling" in page

    back = f"/experiments/{xid}?state=INITIALIZING"
    async with http.post(
        f"{ui}/experiments/{xid}/workUnits/1/stop", data={"back": back}, allow_redirects=False
    ) as response:
        assert response.status == 303
        assert response.headers["Location"].startswith(f"/experiments/{xid}?state=INITIALIZING")
        assert "notice=stop+of+work+unit+1+requested" in response.headers["Location"]
    unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/1"), metadata=ALICE
    )
    assert WorkUnitState(unit.current_work_unit_execution.status.state) in (
        WorkUnitState.STOPPING,
        WorkUnitState.STOPPED,
    )

    async with http.post(
        f"{ui}/experiments/{xid}/workUnits/2/stop",
        headers={"Referer": f"{ui}/experiments/{xid}?state=STOPPED"},
        allow_redirects=False,
    ) as response:  # no back field: the Referer names the page to return to
        assert response.status == 303
        assert response.headers["Location"].startswith(f"/experiments/{xid}?state=STOPPED&")

    async with http.post(
        f"{ui}/experiments/{xid}/stop", data={"state": "INITIALIZING"}, allow_redirects=False
    ) as response:
        assert response.status == 400
        assert "tick the confirmation box" in await response.text()

    async with http.post(
        f"{ui}/experiments/{xid}/stop",
        data={"state": "INITIALIZING", "confirm": "on", "back": "https://evil.example/"},
        allow_redirects=False,
    ) as response:
        assert response.status == 303
        assert response.headers["Location"].startswith(f"/experiments/{xid}?notice=")

    async with http.post(
        f"{ui}/experiments/{xid}/workUnits/1/stop",
        headers={"Origin": "https://evil.example"},
        allow_redirects=False,
    ) as response:
        assert response.status == 403


async def test_work_unit_page_shows_the_spec_with_credentials_masked(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    unit = minimal_work_unit(queue="team-a", image="python:3.11")
    job = unit.executable.jobset.jobs[0]
    job.retry_limit = 3
    job.active_deadline_seconds = 7200
    job.spec.args["lr"] = "0.01"
    job.spec.args["note"] = "<script>alert(1)</script>"
    job.spec.env_vars["SEED"] = "7"
    job.spec.env_vars["HF_TOKEN"] = "hf_very_secret"
    job.spec.resources.gpu_resources.type = "nvidia-a100"
    job.spec.resources.gpu_resources.count = 2
    xid = await experiment(ess, "spec")
    await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=f"experiments/{xid}", work_unit=unit),
        metadata=ALICE,
    )

    status, page = await get(http, f"{ui}/experiments/{xid}/workUnits/1")

    assert status == 200
    spec = page[page.index('<section id="spec">') :]
    for shown in ("team-a", "python:3.11", "python -c", "--lr=0.01", "2 × nvidia-a100", "7200 s"):
        assert shown in spec, shown
    assert "<code>SEED</code> = <code>7</code>" in spec
    assert "hf_very_secret" not in page
    assert "<script>alert(1)</script>" not in page  # args are text, never markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in spec


async def test_callers_token_is_passed_through(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    status, page = await get(http, f"{ui}/", headers={"Authorization": "Bearer not-a-token"})
    assert status == 401
    assert "UNAUTHENTICATED" in page
    status, _ = await get(http, f"{ui}/", headers={"Authorization": "Bearer token-bob"})
    assert status == 200


async def test_scheduling_pause_and_resume_for_admins(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    status, page = await get(http, f"{ui}/scheduling")
    assert status == 403
    assert "PERMISSION_DENIED" in page
    async with http.post(f"{ui}/scheduling/pause", data={"reason": "maintenance"}) as response:
        assert response.status == 403
        assert "PERMISSION_DENIED" in await response.text()

    root = {"Authorization": "Bearer token-root"}
    status, page = await get(http, f"{ui}/scheduling", headers=root)
    assert status == 200
    assert "RUNNING" in page
    assert 'class="parked">0<' in page
    async with http.post(
        f"{ui}/scheduling/pause", data={"reason": "maintenance"}, headers=root
    ) as response:
        assert response.status == 200  # redirected to the scheduling page
        page = await response.text()
    assert "PAUSED" in page
    assert "maintenance" in page
    assert "scheduling paused" in page
    async with http.post(f"{ui}/scheduling/resume", headers=root) as response:
        page = await response.text()
    assert "RUNNING" in page
    assert "scheduling resumed" in page


async def test_probes(ess: Ess, ui: str, http: aiohttp.ClientSession) -> None:
    assert (await get(http, f"{ui}/healthz"))[0] == 200
    status, body = await get(http, f"{ui}/readyz")
    assert status == 200
    assert "SERVING" in body


async def unit_state(ess: Ess, xid: int, wid: int) -> WorkUnitState:
    unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"), metadata=ALICE
    )
    return WorkUnitState(unit.current_work_unit_execution.status.state)


async def test_cross_site_form_posts_are_refused(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    """Every form action refuses a POST another site made: by ``Sec-Fetch-Site`` alone, by
    ``Origin`` alone, and an ``Origin`` on this host:port but another scheme (issue 24)."""
    xid = await experiment(ess, "target", units=1)
    actions = [
        (f"/experiments/{xid}/workUnits/1/stop", {}),
        (f"/experiments/{xid}/workUnits/1/restart", {}),
        (f"/experiments/{xid}/stop", {"confirm": "on"}),
        (f"/experiments/{xid}/restart", {"confirm": "on"}),
        ("/scheduling/pause", {"reason": "forged"}),
        ("/scheduling/resume", {}),
    ]
    foreign = [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://sub.127.0.0.1.nip.io"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": ui.replace("http://", "https://")},
    ]
    root = {"Authorization": "Bearer token-root"}
    for path, form in actions:
        for headers in foreign:
            async with http.post(
                f"{ui}{path}", data=form, headers={**root, **headers}, allow_redirects=False
            ) as response:
                assert response.status == 403, (path, headers)
                assert "another site" in await response.text()
    assert await unit_state(ess, xid, 1) == WorkUnitState.INITIALIZING
    status, page = await get(http, f"{ui}/scheduling", headers=root)
    assert (status, "RUNNING" in page, "forged" in page) == (200, True, False)

    same_origin = {"Origin": ui, "Sec-Fetch-Site": "same-origin"}
    async with http.post(
        f"{ui}/experiments/{xid}/workUnits/1/stop", headers=same_origin, allow_redirects=False
    ) as response:
        assert response.status == 303
    assert await unit_state(ess, xid, 1) in (WorkUnitState.STOPPING, WorkUnitState.STOPPED)


async def test_every_answer_carries_the_security_headers(
    ess: Ess, ui: str, http: aiohttp.ClientSession
) -> None:
    """Pages, fragments, JSON, redirects, errors and files: not framable, not sniffed, no
    referrer to other sites, no server version; nothing but the static files is stored."""
    xid = await experiment(ess, "headers", units=1)
    answers = {
        "page": ("GET", "/", 200),
        "experiment": ("GET", f"/experiments/{xid}", 200),
        "fragment": ("GET", f"/experiments/{xid}/live", 200),
        "not-found": ("GET", "/experiments/987654", 404),
        "unknown-path": ("GET", "/nothing", 404),
        "rest": ("GET", "/v1/experiments", 200),
        "rest-error": ("GET", "/v1/experiments/987654", 404),
        "redirect": ("POST", f"/experiments/{xid}/workUnits/1/stop", 303),
        "refused": ("POST", f"/experiments/{xid}/workUnits/1/restart", 403),
        "probe": ("GET", "/healthz", 200),
        "static": ("GET", "/static/ui.css", 200),
    }
    for case, (method, path, want) in answers.items():
        headers = {"Authorization": "Bearer token-alice"}  # REST takes no default token
        if case == "refused":
            headers["Origin"] = "https://evil.example"
        async with http.request(
            method, f"{ui}{path}", headers=headers, allow_redirects=False
        ) as response:
            assert response.status == want, case
            got = response.headers
            assert "frame-ancestors 'none'" in got["Content-Security-Policy"], case
            assert "script-src 'self'" in got["Content-Security-Policy"], case
            assert got["X-Frame-Options"] == "DENY", case
            assert got["X-Content-Type-Options"] == "nosniff", case
            assert got["Referrer-Policy"] == "same-origin", case
            assert got["Server"] == "xmc-ui", case
            if case == "static":
                assert "no-store" not in got.get("Cache-Control", ""), case
            else:
                assert got["Cache-Control"] == "no-store", case
