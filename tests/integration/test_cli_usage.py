"""``xmc usage`` against a real ESS: the table per group with its total, a series, --json,
and a bad time named."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.support import T0
from tests.integration.test_cli import parse_json, xmc
from tests.integration.test_usage import build

SINCE, UNTIL = T0.isoformat(), "2026-05-01T13:00:00Z"


async def test_usage_by_queue_prints_gpu_hours_and_a_total(ess: Ess) -> None:
    await build(ess)
    result = await xmc(ess, "usage", "--by", "queue", "--since", SINCE, "--until", UNTIL)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "usage from 2026-05-01T12:00:00Z to 2026-05-01T13:00:00Z, by queue" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    # gpu-queue: 150 s × 4 GPUs = 0.17 GPU-hours; the open run counts up to the ESS's now.
    assert "0.17" in rows["gpu-queue"]
    assert "nvidia-tesla-a100 0.17" in rows["gpu-queue"]
    assert "tpu-v5-lite-podslice 0.13" in rows["tpu-queue"]
    assert "TOTAL" in rows


async def test_usage_json_series_and_errors(ess: Ess) -> None:
    scenario = await build(ess)
    xid = scenario.alice.split("/")[1]
    result = await xmc(
        ess,
        "usage",
        "--by",
        "work-unit",
        "--experiment",
        xid,
        "--since",
        SINCE,
        "--until",
        UNTIL,
        "--bucket",
        "hour",
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = parse_json(result.stdout)
    assert [g["key"] for g in document["groups"]] == [scenario.gpu, scenario.cpu]
    assert [b["start_time"] for b in document["buckets"]] == ["2026-05-01T12:00:00Z"]

    bad = await xmc(ess, "usage", "--since", "last tuesday")
    assert bad.exit_code != 0
    assert "--since: 'last tuesday' is neither a time" in bad.output
    backwards = await xmc(ess, "usage", "--since", UNTIL, "--until", SINCE)
    assert backwards.exit_code != 0
    assert "INVALID_ARGUMENT: since, until:" in backwards.output
