"""The experiment page's sweep table, as pure decisions: its columns (the args that vary
first), the view it shows and how that view lives in the URL, the groups of one arg with
their state counts, the links of units and of the experiment, and the selection a Stop or
Restart acts on (docs/ui.md, docs/decisions/0037-the-sweep-table.md).

Nothing here calls the ESS: ``ui.pages`` fetches one page of units, the arg keys and the
groups, and these functions lay them out, so every rule is table-tested without a server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from urllib.parse import urlencode

from ui.views import Row, fmt_time, safe_href, state_bar, tail_id, work_unit_row
from xmc.model.args import work_unit_args
from xmc.model.usage import Requested, requested_resources
from xmc.query.fields import MAX_FILTER_LENGTH, is_arg_key
from xmc.timestamps import to_datetime
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.url_pb2 import Url
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1.sweep_pb2 import ArgGroup, ArgKey

#: The most units one Stop or Restart of a selection may name: half the largest page, well
#: inside the 1,000 form fields aiohttp reads; a filter and "Stop filtered" act on any number.
MAX_SELECTED = 500


@dataclass(frozen=True)
class View:
    """What the table shows; every field is a query parameter of the page's URL, so a link
    or a reload shows the same view."""

    state: str = ""
    filter: str = ""
    order_by: str = ""
    group: str = ""
    page_size: str = ""
    page_token: str = ""

    def href(self, **changes: str) -> str:
        """``?…`` of this view with ``changes``; empty fields are left out. Any change
        but a page token starts again at the first page."""
        view = replace(self, **changes)
        if "page_token" not in changes:
            view = replace(view, page_token="")
        pairs = [(f.name, getattr(view, f.name)) for f in fields(view)]
        return "?" + urlencode([(k, v) for k, v in pairs if v])

    def live_href(self, arg_keys: Sequence[str]) -> str:
        """``?…`` of what the live region polls: this very view (its page too) and the
        page's arg columns, so a poll needs no aggregate over the args."""
        return self.href(page_token=self.page_token) + "&" + urlencode({"cols": ",".join(arg_keys)})

    def unit_filter(self) -> str:
        """The AIP-160 filter of the units shown: the state choice and the typed filter."""
        parts = [f"state = {self.state}" if self.state else "", self.filter.strip()]
        return and_filters(*parts)


def parse_view(query: Mapping[str, str]) -> View:
    """The view of a page's query string (unknown parameters, like ``notice``, ignored;
    the ESS judges the filter and order and the page checks the page size)."""
    names = {f.name for f in fields(View)}
    return View(**{k: v for k, v in query.items() if k in names})


def and_filters(*parts: str) -> str:
    """The conjunction of non-empty AIP-160 filters, each parenthesized when combined."""
    present = [p for p in parts if p]
    if len(present) <= 1:
        return present[0] if present else ""
    return " AND ".join(f"({p})" for p in present)


def quote(value: str) -> str:
    """An AIP-160 string literal matching ``value`` exactly (a ``*`` too, not a prefix)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("*", "\\*")
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{escaped}"'


@dataclass(frozen=True)
class Column:
    """One column: ``id`` names the row's cell (an arg column's ``arg`` its key); ``order``
    is its ``order_by`` field ('' = not sortable); ``kind`` says how the cell is drawn."""

    id: str
    label: str
    order: str = ""
    kind: str = "text"
    arg: str = ""


LEADING: tuple[Column, ...] = (
    Column("wid", "wid", "wid", "wid"),
    Column("state", "state", "state", "state"),
)
#: After the arg columns. A new sortable column is one line here and its cell one key of
#: the row (the exit code's comes from ``ListExitCodes``, read by the page).
TRAILING: tuple[Column, ...] = (
    Column("gpus", "GPUs"),
    Column("cpus", "CPUs"),
    Column("runtime", "runtime", "runtime"),
    Column("in_state", "time in state", "time_in_state"),
    Column("exit_code", "exit code", "exit_code"),
    Column("execution", "execution", "execution_id"),
    Column("tags", "tags", kind="tags"),
    Column("changed", "last change", "state_update_time"),
    Column("message", "message", kind="message"),
    Column("links", "links", kind="links"),
)


def columns(arg_keys: Iterable[str]) -> list[Column]:
    """wid and state, then one column per arg key in the order given (the varying keys,
    most distinct values first), then the rest. A key a filter cannot name is shown but
    not sortable."""
    args = [
        Column(f"args.{k}", k, f"args.{k}" if is_arg_key(k) else "", "arg", k) for k in arg_keys
    ]
    return [*LEADING, *args, *TRAILING]


def split_keys(keys: Sequence[ArgKey]) -> tuple[list[str], list[tuple[str, str]]]:
    """The varying keys (the arg columns, in the ESS's order) and the constant keys with
    their one value (shown once above the table, not as columns)."""
    varying = [k.key for k in keys if k.varying]
    constant = [(k.key, k.constant_value) for k in keys if not k.varying]
    return varying, constant


def sort_header(view: View, column: Column) -> Row:
    """A header's link and arrow: a click sorts by the column ascending, a second click
    descending, a third ascending again."""
    if not column.order:
        return {"href": "", "arrow": ""}
    current = view.order_by.strip()
    if current == column.order:
        return {"href": view.href(order_by=f"{column.order} desc"), "arrow": "▲"}
    arrow = "▼" if current == f"{column.order} desc" else ""
    return {"href": view.href(order_by=column.order), "arrow": arrow}


def fmt_duration(value: timedelta) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``, ``3d 4h``; a negative span (skewed clocks) is 0s."""
    seconds = max(0, int(value.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def link(url: Url) -> Row:
    return {"label": url.display_name or url.url, "href": safe_href(url.url)}


def artifact_link(artifact: Artifact) -> Row:
    label = artifact.url.display_name or artifact.url.url or tail_id(artifact.name)
    return {"label": label, "href": safe_href(artifact.url.url)}


def artifacts_by_parent(artifacts: Iterable[Artifact]) -> dict[str, list[Row]]:
    """Artifact links keyed by their parent's name (the experiment, or one unit)."""
    found: dict[str, list[Row]] = {}
    for artifact in artifacts:
        found.setdefault(artifact.parent, []).append(artifact_link(artifact))
    return found


def unit_row(unit: WorkUnit, now: datetime, artifacts: Mapping[str, list[Row]]) -> Row:
    """A unit's table row: the dashboard's unit row with its args, runtime (its current
    execution's creation to its completion, or to ``now``), time in state, urls, notes and
    artifacts."""
    execution = unit.current_work_unit_execution
    status = execution.status
    row = work_unit_row(unit)
    end = to_datetime(execution.complete_time) if execution.HasField("complete_time") else now
    since = status.state_update_time if status.HasField("state_update_time") else unit.update_time
    row.update(
        args=work_unit_args(unit),
        runtime=fmt_duration(end - to_datetime(execution.create_time)) if execution.name else "",
        in_state=fmt_duration(now - to_datetime(since)),
        **resource_cells(requested_resources(unit)),
        links=[link(u) for u in unit.urls] + artifacts.get(unit.name, []),
        notes=unit.notes,
        created=fmt_time(unit.create_time),
    )
    return row


def resource_cells(requested: Requested) -> dict[str, str]:
    """The GPUs and CPUs a unit holds while it runs (all its pods): ``4 × nvidia-tesla-a100``
    (TPU chips count as accelerators too), ``2.5``; empty when it asks for none."""
    kinds = ", ".join(f"{n} × {kind}" for kind, n in sorted(requested.accelerators.items()))
    cpus = requested.cpu_millicores / 1000
    return {"gpus": kinds, "cpus": f"{cpus:g}" if cpus else ""}


def group_rows(key: str, groups: Iterable[ArgGroup], view: View) -> list[Row]:
    """One row per value of ``key``: the value (``(none)`` for units without the key), the
    count, the state bar, and the link that filters the table to the group."""
    rows = []
    for group in groups:
        narrow = f"-args.{key}:*" if group.missing else f"args.{key} = {quote(group.value)}"
        rows.append(
            {
                "value": "(none)" if group.missing else group.value,
                "count": group.count,
                "bar": state_bar((c.state, c.count) for c in group.state_counts),
                "href": view.href(filter=and_filters(view.filter.strip(), narrow), group=""),
            }
        )
    return rows


def selected_wids(values: Iterable[str]) -> list[int]:
    """The ticked units' wids, in order, each once; ValueError naming what is wrong."""
    wids: list[int] = []
    for value in values:
        if not value.isdigit() or not 0 < int(value) < 2**63:
            raise ValueError(f"wid: expected a work unit id, got {value!r}")
        if int(value) not in wids:
            wids.append(int(value))
    if not wids:
        raise ValueError("tick at least one work unit")
    if len(wids) > MAX_SELECTED:
        raise ValueError(
            f"{len(wids)} units selected; at most {MAX_SELECTED} at once "
            "(a filter and Stop / Restart filtered act on any number)"
        )
    return wids


def selection_filters(wids: Sequence[int], limit: int = MAX_FILTER_LENGTH) -> list[str]:
    """``wid = 1 OR wid = 5 …`` filters naming every wid once, each within ``limit``
    characters (the ESS's filter limit), so a selection is a few batch calls."""
    filters: list[str] = []
    current = ""
    for wid in wids:
        term = f"wid = {wid}"
        joined = f"{current} OR {term}" if current else term
        if len(joined) > limit:
            filters.append(current)
            joined = term
        current = joined
    return [*filters, current] if current else filters
