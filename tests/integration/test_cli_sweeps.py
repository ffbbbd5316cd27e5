"""``xmc wu list`` on a sweep: arg columns, ``--args``, ``--filter``/``--order-by`` on args
and ``--group-by``, against a real ESS over gRPC."""

from __future__ import annotations

from tests.integration.ess_harness import Ess
from tests.integration.sweep_args import SWEEP
from tests.integration.test_cli import xmc, xmc_json
from tests.integration.test_ess_args import sweep


def table_lines(output: str) -> list[str]:
    """The table's data rows (rich draws the borders with box characters)."""
    return [line for line in output.splitlines() if line.startswith("│")]


async def test_varying_args_are_columns_and_filters_and_orders_reach_the_server(
    ess: Ess,
) -> None:
    # "seed" is constant: not a column unless asked for.
    parent = await sweep(ess, [{**args, "seed": "1"} for args in SWEEP])
    xid = parent.rsplit("/", 1)[1]

    result = await xmc(ess, "wu", "list", xid)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "wid" in line)
    # Most distinct values first: lr (6 with its absence), layers (4), opt (2).
    assert header.index("lr") < header.index("layers") < header.index("opt")
    assert "seed" not in header

    chosen = await xmc(ess, "wu", "list", xid, "--args", "seed,opt", "--filter", "args.lr > 0.01")
    assert chosen.exit_code == 0, chosen.output
    cells = [[cell.strip() for cell in row.split("│")[1:-1]] for row in table_lines(chosen.output)]
    assert [(row[0], row[-2:]) for row in cells] == [("1", ["1", "adam"]), ("4", ["1", "adam"])]

    ordered = await xmc_json(
        ess, "wu", "list", xid, "--filter", "args.lr:*", "--order-by", "args.lr desc"
    )
    assert [u["name"].rsplit("/", 1)[1] for u in ordered] == ["5", "4", "1", "2", "3"]


async def test_group_by_an_arg_counts_units_per_value_by_state(ess: Ess) -> None:
    parent = await sweep(ess, SWEEP)
    xid = parent.rsplit("/", 1)[1]
    groups = await xmc_json(ess, "wu", "list", xid, "--group-by", "layers")
    assert [(g["value"], g["count"], g["states"]) for g in groups] == [
        ("2", 1, {"INITIALIZING": 1}),
        ("4", 3, {"INITIALIZING": 3}),
        ("8", 1, {"INITIALIZING": 1}),
        ("12", 1, {"INITIALIZING": 1}),
    ]
    table = await xmc(ess, "wu", "list", xid, "--group-by", "lr", "--filter", "args.opt = adam")
    assert table.exit_code == 0, table.output
    assert [row.split("│")[1].strip() for row in table_lines(table.output)] == [
        "0.001",
        "0.1",
        "1e-1",
        "-",
    ]


async def test_a_bad_arg_filter_is_reported_with_the_key(ess: Ess) -> None:
    parent = await sweep(ess, SWEEP[:1])
    result = await xmc(ess, "wu", "list", parent.rsplit("/", 1)[1], "--filter", "args.1x = 2")
    assert result.exit_code != 0
    assert "INVALID_ARGUMENT" in result.output
    assert "args.1x" in result.output
