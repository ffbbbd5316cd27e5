"""The Grafana dashboard's shape (k8s/grafana/xmc-dashboard.json); its queries against
the metrics the running services export: tests/integration/test_business_metrics.py."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.grafana_check import load, problems_against, problems_of_syntax, queries


def test_panels_are_placed_once_with_unique_ids_and_queries() -> None:
    dashboard = load()
    assert dashboard["uid"] == "xmc-overview"
    ids = Counter(panel["id"] for panel in dashboard["panels"])
    assert [i for i, n in ids.items() if n > 1] == []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert ref_ids, panel["title"]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]


def test_no_two_panels_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in load()["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("query", list(queries(load())), ids=lambda q: q.panel)
def test_every_query_is_well_formed(query: object) -> None:
    assert problems_of_syntax(query.expr) == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("expr", "exported", "problem"),
    [
        ("sum(xmc_gone_total)", {}, "is not exported"),
        ("sum(rate(xmc_units[5m]))", {"xmc_units": "gauge"}, "rate/increase of the gauge"),
        (
            "histogram_quantile(0.5, sum by (le) (rate(xmc_t_total[5m])))",
            {"xmc_t_total": "counter"},
            "not a histogram's buckets",
        ),
        (
            "histogram_quantile(0.5, rate(xmc_h_bucket[5m]))",
            {"xmc_h_bucket": "histogram"},
            "not over sum by (le)",
        ),
    ],
)
def test_the_check_catches(expr: str, exported: dict[str, str], problem: str) -> None:
    dashboard = {"panels": [{"title": "p", "targets": [{"expr": expr}]}],
                 "templating": {"list": []}}  # fmt: skip
    found = problems_against(dashboard, exported)
    assert len(found) == 1
    assert problem in found[0]


def test_the_syntax_check_catches_a_typo_and_a_missing_bracket() -> None:
    assert problems_of_syntax("sum(rte(xmc_a_total[5m]))") == ["unknown function rte"]
    assert problems_of_syntax("sum(rate(xmc_a_total[5m])") == ["unbalanced ()"]
