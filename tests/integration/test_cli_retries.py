"""``xmc retry-policy`` and the retries in ``xmc wu get`` / ``xmc wu timeline`` against a
real ESS (docs/retries.md)."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.test_cli import parse_json, xmc
from tests.integration.test_retries import POLICY, experiment, failed, send, unit


async def test_retry_policy_set_get_clear(ess: Ess) -> None:
    parent = await experiment(ess)
    xid = parent.rsplit("/", 1)[1]
    result = await xmc(ess, "retry-policy", "set", xid, '{"max_attempts": 2}')
    assert result.exit_code == 0, result.output
    want = '{"max_attempts": 2, "never_on_exit_codes": [], "backoff_seconds": 0}'
    assert result.stdout.strip() == want
    got = await xmc(ess, "retry-policy", "get", xid, "-o", "json")
    assert parse_json(got.stdout)["policy"] == want
    bad = await xmc(ess, "retry-policy", "set", xid, '{"max_attempts": "3"}')
    assert bad.exit_code != 0
    assert "INVALID_ARGUMENT: policy.max_attempts: a whole number from 1 to 100" in bad.output
    cleared = await xmc(ess, "retry-policy", "clear", xid)
    assert cleared.stdout.strip() == "no default retry policy"


async def test_wu_get_and_timeline_show_the_attempts(ess: Ess) -> None:
    parent = await experiment(ess, unit(POLICY))
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=137))
    xid = parent.rsplit("/", 1)[1]

    shown = await xmc(ess, "wu", "get", f"{xid}/1")
    assert shown.exit_code == 0, shown.output
    assert "system: attempt 2 of 3, retried after exit code 137" in shown.stdout
    assert "retries: attempt 2 of 3 (policy of the work unit)" in shown.stdout
    assert "retry → 2" in shown.stdout
    document = parse_json((await xmc(ess, "wu", "get", f"{xid}/1", "-o", "json")).stdout)
    assert document["retries"]["attempt"] == 2

    timeline = await xmc(ess, "wu", "timeline", xid, "1")
    assert "execution 1: FAILED (terminal) · attempt 1 ·" in timeline.stdout
    assert "retry: retry (exit code 137)" in timeline.stdout
    assert "execution 2: RESTARTING (live) · attempt 2, retried after exit code 137" in (
        timeline.stdout
    )
