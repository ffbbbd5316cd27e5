"""``xmc wu timeline`` against a real ESS: the table per execution and --json."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.test_cli import parse_json, xmc
from tests.integration.test_timelines import build_scenario


async def test_wu_timeline_prints_each_change_and_time_in_state(ess: Ess) -> None:
    scenario = await build_scenario(ess)
    xid, wid = scenario.preempted.split("/")[1::2]
    result = await xmc(ess, "wu", "timeline", xid, wid)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (
        "execution 1: COMPLETED (terminal) · queue wait 10s · start-up 0s · run 1m30s · "
        "requeued 30s, 1 preemption(s)"
    ) in out
    assert "execution 2: RUNNING (live) · queue wait 10s · start-up 0s · run 1m30s (ongoing)" in out
    assert (
        "in each state: INITIALIZING 2s · SCHEDULING 33s · RUNNING 1m00s · DESCHEDULING 5s · "
        "COMPLETED 0s"
    ) in out
    lines = [line for line in out.splitlines() if "│" in line and "DESCHEDULING" in line]
    # Into DESCHEDULING (5 s there), then out of it to SCHEDULING (25 s there).
    assert len(lines) == 2, out
    assert "RUNNING" in lines[0]
    assert "5s" in lines[0]
    assert "25s" in lines[1]
    assert "1m30s …" in out  # the current state, still ongoing


async def test_wu_timeline_json_and_errors(ess: Ess) -> None:
    scenario = await build_scenario(ess)
    xid, wid = scenario.preempted.split("/")[1::2]
    result = await xmc(ess, "wu", "timeline", xid, wid, "--json")
    assert result.exit_code == 0, result.output
    document = parse_json(result.stdout)
    assert [e["execution_id"] for e in document["executions"]] == ["1", "2"]
    assert document["executions"][0]["phases"]["run"] == "90s"

    missing = await xmc(ess, "wu", "timeline", xid, "99")
    assert missing.exit_code != 0
    assert f"NOT_FOUND: name: experiments/{xid}/workUnits/99 does not exist" in missing.output
    bad = await xmc(ess, "wu", "timeline", xid, "zero")
    assert bad.exit_code == 2
    assert "WID" in bad.output
