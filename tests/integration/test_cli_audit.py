"""``xmc audit`` and the attribution lines of ``xmc wu get`` and ``xmc wu timeline``
against a real ESS (docs/audit.md)."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.test_cli import xmc, xmc_json


async def test_who_stopped_it_in_the_cli(ess: Ess) -> None:
    experiment = await xmc_json(ess, "experiments", "create", "--title", "who")
    xid = experiment["name"].split("/")[1]
    await xmc_json(
        ess,
        *("wu", "create", xid, "--image", "python:3.11", "--queue", "cpu-queue"),
        *("--cpu", "1000", "--memory-bytes", "1000000"),
    )
    stopped = await xmc(ess, "wu", "stop", f"{xid}/1", token="token-bob")
    assert stopped.exit_code != 0, "bob may not change alice's experiment"
    stopped = await xmc(ess, "wu", "stop", f"{xid}/1")
    assert "requested by" in stopped.stdout
    assert "alice@example.com" in stopped.stdout

    got = await xmc(ess, "wu", "get", f"{xid}/1")
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert any(line.startswith("created by alice@example.com at ") for line in lines)
    assert any(line.startswith("stopped by alice@example.com at ") for line in lines)
    as_json = await xmc_json(ess, "wu", "get", f"{xid}/1")
    assert as_json["stopped"]["principal"] == "alice@example.com"
    assert len(as_json["stopped"]["request_id"]) == 32  # made by the ESS: none was sent

    timeline = await xmc(ess, "wu", "timeline", xid, "1")
    assert timeline.exit_code == 0, timeline.output
    assert "alice@example.com" in timeline.stdout

    refused = await xmc(ess, "audit")
    assert refused.exit_code != 0
    assert "PERMISSION_DENIED" in refused.output
    events = await xmc_json(
        ess, "audit", "--principal", "alice@example.com", "--since", "2000-01-01",
        token="token-root",
    )  # fmt: skip
    # The test's ESS clock stands still: one instant, so compared as a set.
    by_action = {e["action"]: e for e in events}
    assert set(by_action) == {"StopWorkUnit", "CreateWorkUnit", "CreateExperiment"}
    assert by_action["StopWorkUnit"]["request_id"] == as_json["stopped"]["request_id"]
    table = await xmc(ess, "audit", "--experiment", xid, token="token-root")
    assert "StopWorkUnit" in table.stdout
    bad = await xmc(ess, "audit", "--since", "yesterday", token="token-root")
    assert bad.exit_code == 2
    assert "--since" in bad.output
