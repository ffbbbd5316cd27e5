"""Work-unit args in Postgres (migration 0005): stored at create, backfilled for older rows,
read as numbers exactly as the filter compiler reads literals, filtered, sorted and paged
by ``args.<key>``, and counted per key for the sweep table."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from tests.integration.support import minimal_work_unit
from tests.integration.sweep_args import SWEEP, unit_with_args
from xmc.errors import InvalidArgumentError
from xmc.model.args import KeySpread
from xmc.query.sql import is_number
from xmc.store.backfill import backfill_args
from xmc.store.listing import ListRequest
from xmc.store.repository import Store
from xmc.store.transactions import arg_key_order, arg_spreads
from xmc.store.work_units import list_work_units, select_work_unit_ids
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

WRITER = "test"


async def new_experiment(store: Store) -> int:
    return int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])


async def create_units(store: Store, xid: int, args: list[dict[str, str]]) -> None:
    for one in args:
        await store.insert_work_unit(xid, unit_with_args(one), writer=WRITER)


async def stored_args(store: Store, xid: int) -> list[Any]:
    async with store.connection() as conn:
        rows = await conn.fetch("SELECT args FROM work_units WHERE xid = $1 ORDER BY wid", xid)
    return [None if r["args"] is None else json.loads(r["args"]) for r in rows]


async def wids(store: Store, xid: int, request: ListRequest) -> tuple[list[int], str]:
    async with store.connection() as conn:
        raw = await list_work_units(conn, xid, request)
    response = api_pb2.ListWorkUnitsResponse.FromString(raw)
    return [int(w.name.rsplit("/", 1)[1]) for w in response.work_units], response.next_page_token


async def test_args_are_stored_at_create_as_the_union_of_the_containers(store: Store) -> None:
    xid = await new_experiment(store)
    await store.insert_work_unit(
        xid, unit_with_args({"lr": "0.1"}, sidecar={"lr": "9", "port": "80"}), writer=WRITER
    )
    await store.insert_work_unit(xid, minimal_work_unit(), writer=WRITER)
    assert await stored_args(store, xid) == [{"lr": "0.1", "port": "80"}, {}]


async def test_rows_without_args_are_backfilled_from_the_stored_executable(store: Store) -> None:
    xid = await new_experiment(store)
    await create_units(store, xid, [{"lr": "0.1"}, {"lr": "0.2", "opt": "adam"}, {}])
    async with store.connection() as conn:
        # As rows written before migration 0005 (or by an older ESS) are.
        await conn.execute(
            "UPDATE work_units SET args = NULL, arg_numbers = NULL WHERE xid = $1", xid
        )
        assert await wids(store, xid, ListRequest(filter="args.lr:*")) == ([], "")
        assert await backfill_args(conn, batch=2) == 3
        assert await backfill_args(conn) == 0
    assert await stored_args(store, xid) == [{"lr": "0.1"}, {"lr": "0.2", "opt": "adam"}, {}]
    assert (await wids(store, xid, ListRequest(filter="args.lr:*")))[0] == [1, 2]


NUMBER_CASES = [
    "0", "-3", "+4", "0.01", ".5", "5.", "1e-3", "1E+10", "007", "1e999", "9" * 120,
    "-" + "9" * 119 + "e-999", "." + "9" * 118 + "e999", "", " 1", "1 ", "abc", "NaN", "inf",
    "Infinity", "1e", "e5", "1.2.3", "0x10", "1_000", "١٢", "1e1000", "9" * 121, "--1", "+",
    ".", "1,5",
]  # fmt: skip


async def test_values_that_are_numbers_are_stored_as_numbers(store: Store) -> None:
    """``arg_numbers`` holds exactly the values ``is_number`` calls numbers, each equal to
    its text read as a decimal, and Postgres accepts every one (bounded in size)."""
    xid = await new_experiment(store)
    args = {f"k{i}": value for i, value in enumerate(NUMBER_CASES)}
    await create_units(store, xid, [args])
    async with store.connection() as conn:
        rows = await conn.fetch(
            """SELECT n.key, (n.value #>> '{}')::numeric AS n
               FROM work_units w, jsonb_each(w.arg_numbers) AS n
               WHERE w.xid = $1 AND w.wid = 1""",
            xid,
        )
    numbers = {r["key"]: r["n"] for r in rows}
    assert numbers == {k: Decimal(v) for k, v in args.items() if is_number(v)}


@pytest.mark.parametrize(
    ("filter_text", "expected"),
    [
        ("args.lr > 0.01", [1, 4]),
        ("args.lr >= 0.01", [1, 2, 4]),
        ("args.lr = 0.1", [1, 4]),
        ('args.lr = "0.1"', [1]),
        ("args.lr = auto", [5]),
        ("args.lr != 0.1", [2, 3]),
        ("NOT args.lr > 0.01", [2, 3]),
        ("args.layers >= 8", [2, 4]),
        ('args.layers >= "8"', [4]),
        ("args.opt = adam AND args.layers = 4", [1, 3, 6]),
        ("args.opt = sgd OR args.lr < 0.005", [2, 3, 5]),
        ("args.lr:*", [1, 2, 3, 4, 5]),
        ("-args.lr:*", [6]),
        ("args.opt = ad*", [1, 3, 4, 6]),
        ("args.missing = 1", []),
        ("args.lr > 0.01 AND wid > 1", [4]),
    ],
)
async def test_filters_on_args(store: Store, filter_text: str, expected: list[int]) -> None:
    xid = await new_experiment(store)
    await create_units(store, xid, SWEEP)
    assert (await wids(store, xid, ListRequest(filter=filter_text)))[0] == expected
    async with store.connection() as conn:
        assert await select_work_unit_ids(conn, xid, filter_text) == expected


@pytest.mark.parametrize(
    ("order_by", "expected"),
    [
        # Numbers numerically (ties by text, then wid), then text, then no key.
        ("args.lr", [3, 2, 1, 4, 5, 6]),
        ("args.lr desc", [6, 5, 4, 1, 2, 3]),
        ("args.layers, wid desc", [5, 6, 3, 1, 4, 2]),
        ("args.opt desc, args.lr", [2, 5, 3, 1, 4, 6]),
    ],
)
async def test_order_by_args(store: Store, order_by: str, expected: list[int]) -> None:
    xid = await new_experiment(store)
    await create_units(store, xid, SWEEP)
    assert (await wids(store, xid, ListRequest(order_by=order_by)))[0] == expected


async def test_paging_by_an_arg_with_ties_and_missing_values_neither_skips_nor_repeats(
    store: Store,
) -> None:
    xid = await new_experiment(store)
    # 3 distinct numbers, each tied three times, two texts and two units without the key.
    values = ["0.5", "2", "10"] * 3 + ["x", "y", None, None]
    await create_units(store, xid, [{} if v is None else {"lr": v} for v in values])
    for order_by in ("args.lr", "args.lr desc"):
        seen: list[int] = []
        pages, token = 0, ""
        while True:
            page, token = await wids(
                store, xid, ListRequest(order_by=order_by, page_size=5, page_token=token)
            )
            seen.extend(page)
            pages += 1
            if not token:
                break
        everything, _ = await wids(store, xid, ListRequest(order_by=order_by))
        assert pages == 3
        assert seen == everything
        assert sorted(seen) == list(range(1, len(values) + 1))


async def test_a_page_token_of_one_arg_order_does_not_serve_another(store: Store) -> None:
    xid = await new_experiment(store)
    await create_units(store, xid, [{"lr": "1", "bs": "2"}] * 3)
    _, token = await wids(store, xid, ListRequest(order_by="args.lr", page_size=1))
    with pytest.raises(InvalidArgumentError, match="page_token"):
        await wids(store, xid, ListRequest(order_by="args.bs", page_size=1, page_token=token))


async def test_arg_spreads_are_counted_per_experiment(store: Store) -> None:
    xid = await new_experiment(store)
    other = await new_experiment(store)
    await create_units(store, xid, SWEEP)
    await create_units(store, other, [{"lr": "5", "extra": "1"}])
    async with store.connection() as conn:
        spreads, total = await arg_spreads(conn, xid)
        order = await arg_key_order(conn, xid)
    assert total == 6
    assert sorted(spreads, key=lambda s: s.key) == [
        KeySpread("layers", 4, 6),
        KeySpread("lr", 5, 5),
        KeySpread("opt", 2, 6),
    ]
    assert order == ["lr", "layers", "opt"]
