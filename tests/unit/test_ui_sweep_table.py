"""The sweep table's pure decisions (``ui.sweep_table``): column order, sort headers, the
view's URL round trip, filters built for groups and selections, group rows, durations and
links."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlsplit

import pytest

from ui import sweep_table as st
from ui import views
from xmc.model.usage import Requested
from xmc.query import parse_filter
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.cloud.xmanager.v1.url_pb2 import Url
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1.sweep_pb2 import ArgGroup, ArgKey, StateCount

S = WorkUnitStatus.WorkUnitState


def test_columns_put_the_arg_keys_between_state_and_the_rest() -> None:
    cols = st.columns(["lr", "opt", "bad-key"])
    assert [c.id for c in cols] == [
        "wid", "state", "args.lr", "args.opt", "args.bad-key", "gpus", "cpus",
        "runtime", "in_state", "exit_code", "execution", "tags", "changed", "message", "links",
    ]  # fmt: skip
    # A key no filter can name is shown but cannot be sorted on.
    assert [c.order for c in cols[2:5]] == ["args.lr", "args.opt", ""]
    assert [c.order for c in cols if c.kind == "text" and c.order] == [
        "runtime", "time_in_state", "exit_code", "execution_id", "state_update_time",
    ]  # fmt: skip


def test_split_keys_keeps_the_order_and_the_constant_values() -> None:
    keys = [
        ArgKey(key="lr", varying=True),
        ArgKey(key="opt", varying=True),
        ArgKey(key="data", constant_value="c4"),
    ]
    assert st.split_keys(keys) == (["lr", "opt"], [("data", "c4")])


LR = st.Column("args.lr", "lr", "args.lr", "arg", "lr")


@pytest.mark.parametrize(
    ("order_by", "next_order", "arrow"),
    [
        ("", "args.lr", ""),
        ("wid", "args.lr", ""),
        ("args.lr", "args.lr desc", "▲"),
        ("args.lr desc", "args.lr", "▼"),
    ],
)
def test_a_header_sorts_ascending_then_descending(
    order_by: str, next_order: str, arrow: str
) -> None:
    view = st.View(filter="args.opt = adam", order_by=order_by, page_token="abc")
    header = st.sort_header(view, LR)
    assert header["arrow"] == arrow
    assert dict(parse_qsl(urlsplit(header["href"]).query)) == {
        "filter": "args.opt = adam",
        "order_by": next_order,
    }  # the page starts again at the first page


def test_an_unsortable_header_has_no_link() -> None:
    assert st.sort_header(st.View(), st.Column("tags", "tags", kind="tags")) == {
        "href": "",
        "arrow": "",
    }


@pytest.mark.parametrize(
    "view",
    [
        st.View(),
        st.View(state="RUNNING"),
        st.View(filter='args.opt = "a&b" AND args.lr > 0.01', order_by="args.lr desc"),
        st.View(group="lr", page_size="20", page_token="tok_-"),
        st.View("FAILED", "wid > 3", "runtime desc", "opt", "1000", "t"),
    ],
)
def test_the_view_round_trips_through_its_url(view: st.View) -> None:
    href = view.href(page_token=view.page_token)
    assert st.parse_view(dict(parse_qsl(urlsplit(href).query))) == view


def test_parse_view_ignores_other_parameters() -> None:
    assert st.parse_view({"notice": "done", "cols": "lr", "group": "lr"}) == st.View(group="lr")


def test_the_live_url_carries_the_view_and_the_columns() -> None:
    href = st.View(filter="wid > 1", page_token="t").live_href(["lr", "opt"])
    assert dict(parse_qsl(urlsplit(href).query)) == {
        "filter": "wid > 1",
        "page_token": "t",
        "cols": "lr,opt",
    }


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (st.View(), ""),
        (st.View(state="RUNNING"), "state = RUNNING"),
        (st.View(filter=" args.lr > 1 "), "args.lr > 1"),
        (st.View(state="FAILED", filter="a = 1 OR b = 2"), "(state = FAILED) AND (a = 1 OR b = 2)"),
    ],
)
def test_unit_filter(view: st.View, expected: str) -> None:
    assert view.unit_filter() == expected


@pytest.mark.parametrize("value", ["adam", 'say "hi"', "back\\slash", "star*", "two\nlines", ""])
def test_quote_makes_a_literal_the_filter_parser_reads_back(value: str) -> None:
    node = parse_filter(f"args.opt = {st.quote(value)}")
    assert node is not None
    assert (node.value, node.wildcard, node.quoted) == (value, False, True)  # type: ignore[union-attr]


def test_group_rows_link_to_their_group() -> None:
    view = st.View(filter="args.layers > 2", group="opt", order_by="wid desc", page_token="p")
    groups = [
        ArgGroup(value="adam", count=3, state_counts=[StateCount(state=S.RUNNING, count=3)]),
        ArgGroup(missing=True, count=1, state_counts=[StateCount(state=S.FAILED, count=1)]),
    ]
    rows = st.group_rows("opt", groups, view)
    assert [(r["value"], r["count"]) for r in rows] == [("adam", 3), ("(none)", 1)]
    assert [s["state"] for s in rows[0]["bar"]] == ["RUNNING"]
    queries = [dict(parse_qsl(urlsplit(r["href"]).query)) for r in rows]
    assert queries == [
        {"filter": '(args.layers > 2) AND (args.opt = "adam")', "order_by": "wid desc"},
        {"filter": "(args.layers > 2) AND (-args.opt:*)", "order_by": "wid desc"},
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["3", "1", "3"], [3, 1]),
        ([str(n) for n in range(1, st.MAX_SELECTED + 1)], list(range(1, st.MAX_SELECTED + 1))),
    ],
)
def test_selected_wids(values: list[str], expected: list[int]) -> None:
    assert st.selected_wids(values) == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "tick at least one work unit"),
        (["1", "x"], "wid: expected a work unit id, got 'x'"),
        (["0"], "wid: expected a work unit id"),
        ([str(2**63)], "wid: expected a work unit id"),
        ([str(n) for n in range(1, st.MAX_SELECTED + 2)], f"at most {st.MAX_SELECTED} at once"),
    ],
)
def test_selected_wids_refusals(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        st.selected_wids(values)


def test_selection_filters_name_every_wid_once_within_the_limit() -> None:
    wids = list(range(1, 301))
    filters = st.selection_filters(wids, limit=100)
    assert all(len(f) <= 100 for f in filters)
    named = [int(t.removeprefix("wid = ")) for f in filters for t in f.split(" OR ")]
    assert named == wids
    assert st.selection_filters([7]) == ["wid = 7"]
    # 500 ten-digit wids: 20 characters each with " OR ", so five filters of 2,000.
    assert len(st.selection_filters(list(range(10**9, 10**9 + st.MAX_SELECTED)))) == 5


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "0s"), (42, "42s"), (185, "3m 05s"), (7620, "2h 07m"), (3 * 86400 + 4 * 3600, "3d 4h")],
)
def test_fmt_duration(seconds: float, text: str) -> None:
    assert st.fmt_duration(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize(
    ("url", "href"),
    [
        ("https://x.example/a", "https://x.example/a"),
        ("http://x.example", "http://x.example"),
        ("javascript:alert(1)", ""),
        ("JavaScript:alert(1)", ""),
        ("data:text/html,hi", ""),
        ("/relative", ""),
        ("gs://bucket/ckpt", ""),
    ],
)
def test_only_http_links_are_drawn(url: str, href: str) -> None:
    assert views.safe_href(url) == href
    assert st.link(Url(url=url, display_name="x")) == {"label": "x", "href": href}


def test_artifacts_by_parent() -> None:
    found = st.artifacts_by_parent(
        [
            Artifact(name="artifacts/1", parent="experiments/1", url=Url(url="https://a")),
            Artifact(name="artifacts/2", parent="experiments/1/workUnits/2"),
        ]
    )
    assert found == {
        "experiments/1": [{"label": "https://a", "href": "https://a"}],
        "experiments/1/workUnits/2": [{"label": "2", "href": ""}],
    }


NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def _unit(complete: bool) -> WorkUnit:
    unit = WorkUnit(name="experiments/1/workUnits/3", notes="n")
    unit.executable.jobset.jobs.add().spec.args.update({"lr": "0.1"})
    execution = unit.current_work_unit_execution
    execution.name = "experiments/1/workUnits/3/executions/1"
    execution.create_time.FromDatetime(NOW - timedelta(minutes=10))
    execution.status.state = S.COMPLETED if complete else S.RUNNING
    execution.status.state_update_time.FromDatetime(NOW - timedelta(minutes=4))
    if complete:
        execution.complete_time.FromDatetime(NOW - timedelta(minutes=4))
    return unit


@pytest.mark.parametrize(("complete", "runtime"), [(False, "10m 00s"), (True, "6m 00s")])
def test_unit_row(complete: bool, runtime: str) -> None:
    links = {"experiments/1/workUnits/3": [{"label": "ckpt", "href": ""}]}
    row = st.unit_row(_unit(complete), NOW, links)
    assert row["args"] == {"lr": "0.1"}
    assert (row["runtime"], row["in_state"]) == (runtime, "4m 00s")
    assert row["links"] == [{"label": "ckpt", "href": ""}]
    assert row["notes"] == "n"


@pytest.mark.parametrize(
    ("requested", "cells"),
    [
        (Requested(), {"gpus": "", "cpus": ""}),
        (Requested(cpu_millicores=2500), {"gpus": "", "cpus": "2.5"}),
        (
            Requested(gpus=4, tpu_chips=8, accelerators={"tpu-v5": 8, "a100": 4}),
            {"gpus": "4 × a100, 8 × tpu-v5", "cpus": ""},
        ),
    ],
)
def test_resource_cells(requested: Requested, cells: dict[str, str]) -> None:
    assert st.resource_cells(requested) == cells
