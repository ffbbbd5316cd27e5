"""``xmc quota`` against a real ESS (docs/quotas.md)."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.test_cli import xmc, xmc_json


async def test_quota_set_get_list_clear_reconcile(ess: Ess) -> None:
    root = "token-root"
    found = await xmc_json(
        ess, "quota", "set", "Alice@Example.com", "--creates-per-second", "2.5",
        "--live-work-units", "100", token=root,
    )  # fmt: skip
    assert (found["name"], found["creates_per_second"], found["live_work_units"]) == (
        "quotas/users/alice@example.com",
        2.5,
        "100",  # int64 as JSON: a string
    )
    mine = await xmc(ess, "quota", "get", "user:alice@example.com")
    assert mine.exit_code == 0, mine.output
    assert "user:alice@example.com" in mine.stdout
    assert "0 / 100" in mine.stdout
    listed = await xmc_json(ess, "quota", "list", token=root)
    assert [q["principal"] for q in listed["quotas"]] == ["user:alice@example.com"]
    refused = await xmc(ess, "quota", "list")
    assert refused.exit_code != 0
    assert "PERMISSION_DENIED: ListQuotas: alice@example.com is not an admin" in refused.output
    bad = await xmc(ess, "quota", "get", "team:ml", token=root)
    assert bad.exit_code != 0
    assert "PRINCIPAL: expected 'user:<email>', 'group:<name>' or 'default'" in bad.output
    fixed = await xmc_json(ess, "quota", "reconcile", token=root)
    assert fixed == {}  # nothing to correct (proto3 JSON leaves out a 0)
    cleared = await xmc(ess, "quota", "clear", "alice@example.com", token=root)
    assert cleared.stdout.strip() == "deleted quotas/users/alice@example.com"
    gone = await xmc_json(ess, "quota", "get", "alice@example.com")
    assert gone["source"] == "none"
