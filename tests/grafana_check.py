"""What the Grafana dashboard (k8s/grafana/xmc-dashboard.json) asks of the metrics, and
whether the services' ``/metrics`` can answer it: every series a query names exists, with
a type its function makes sense of (``histogram_quantile`` over a histogram's buckets,
``rate``/``increase`` over counters), so a renamed metric breaks a test, not a dashboard
in production."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "k8s" / "grafana" / "xmc-dashboard.json"

_SERIES = re.compile(r"\b(xmc_[a-z0-9_]+)\b")
_RATED = re.compile(r"\b(?:rate|irate|increase)\((xmc_[a-z0-9_]+)")
_QUANTILE = re.compile(
    r"histogram_quantile\([0-9.]+,\s*sum by \([a-z_, ]*\ble\b[a-z_, ]*\) "
    r"\(rate\((xmc_[a-z0-9_]+)\["
)
_FUNCTIONS = frozenset(
    {"sum", "max", "rate", "irate", "increase", "histogram_quantile", "label_values", "by"}
)
_WORD_CALL = re.compile(r"\b([a-z_]+)\s*\(")


@dataclass(frozen=True)
class Query:
    panel: str
    expr: str


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries(dashboard: Mapping[str, Any]) -> Iterator[Query]:
    """Every PromQL expression: the panels' targets and the template variables'."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield Query(panel["title"], target["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield Query(f"variable {variable['name']}", variable["query"]["query"])


def series(expr: str) -> set[str]:
    return set(_SERIES.findall(expr))


def problems_of_syntax(expr: str) -> list[str]:
    """What a PromQL parser would refuse that a regex can see: unbalanced brackets, a
    function Prometheus does not have (a typo), a series that is not XMC's."""
    found = []
    for opening, closing in ("()", "{}", "[]"):
        depth = 0
        for char in expr:
            depth += (char == opening) - (char == closing)
            if depth < 0:
                break
        if depth != 0:
            found.append(f"unbalanced {opening}{closing}")
    found += [f"unknown function {name}" for name in _WORD_CALL.findall(expr)
              if name not in _FUNCTIONS]  # fmt: skip
    if not series(expr):
        found.append("names no xmc_ series")
    return found


def exported_series(texts: Mapping[str, str]) -> dict[str, str]:
    """Series name → metric type, from each service's ``/metrics`` text (families with no
    samples yet are described all the same, so labelled metrics count before first use)."""
    found: dict[str, str] = {}
    for text in texts.values():
        for family in text_string_to_metric_families(text):
            if family.type == "counter":
                found[f"{family.name}_total"] = "counter"
            elif family.type == "histogram":
                for suffix in ("_bucket", "_sum", "_count"):
                    found[f"{family.name}{suffix}"] = "histogram"
            else:
                found[family.name] = family.type
    return found


def problems_against(dashboard: Mapping[str, Any], exported: Mapping[str, str]) -> list[str]:
    """Each query's series checked against what the services export."""
    found = []
    for query in queries(dashboard):
        where = f"{query.panel}: {query.expr}"
        for name in sorted(series(query.expr)):
            if name not in exported:
                found.append(f"{where}: {name} is not exported by any service")
        for name in _RATED.findall(query.expr):
            if exported.get(name) == "gauge":
                found.append(f"{where}: rate/increase of the gauge {name}")
        for name in _QUANTILE.findall(query.expr):
            if exported.get(name) != "histogram" or not name.endswith("_bucket"):
                found.append(f"{where}: histogram_quantile over {name}, not a histogram's buckets")
        if "histogram_quantile" in query.expr and not _QUANTILE.search(query.expr):
            found.append(f"{where}: histogram_quantile not over sum by (le) (rate(…_bucket[…]))")
    return found
