"""Server-side printing: ``meta.k8s.io/v1`` ``Table`` answers for ``kubectl get`` — pure.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server sends. Built-in kinds follow kubernetes ``pkg/printers/internalversion/
printers.go`` (their cells: ``printers.py``); the server always generates the wide cells,
kubectl hides columns with ``priority`` > 0 unless ``-o wide``. Custom resources follow
apiextensions-apiserver's ``tableconvertor``: Name, then the CRD's
``additionalPrinterColumns`` (upstream's CRDs, listed here), or Age when it has none. Each
row's ``object`` is the object's ``PartialObjectMetadata`` (``includeObject=Metadata``,
the default) or the whole object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubesim.printers import PRINTERS, Cell, since
from kubesim.resources import EVENT, JOB, LEASE, NAMESPACE, POD, Resource

Obj = dict[str, Any]


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    json_path: str = ""
    """For custom resources: the CRD's ``jsonPath``; built-in cells are computed."""
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> Obj:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description or self.name,
            "priority": self.priority,
        }


_NAME = Column("Name", format="name", description="Name must be unique within a namespace.")
_AGE_DATE = Column("Age", "date", ".metadata.creationTimestamp")
_READY_COND = ".status.conditions[?(@.type=='{}')].status"

CRD_COLUMNS: Mapping[str, tuple[Column, ...]] = {
    # kubernetes-sigs/jobset config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml
    "jobsets.jobset.x-k8s.io": (
        Column("TerminalState", json_path=".status.terminalState"),
        Column("Restarts", json_path=".status.restarts"),
        Column("Completed", json_path='.status.conditions[?(@.type=="Completed")].status'),
        Column("Suspended", json_path=".spec.suspend"),
        _AGE_DATE,
    ),
    # kubernetes-sigs/kueue config/components/crd/bases/kueue.x-k8s.io_*.yaml (v1beta2)
    "workloads.kueue.x-k8s.io": (
        Column("Queue", json_path=".spec.queueName"),
        Column("Reserved in", json_path=".status.admission.clusterQueue"),
        Column("Admitted", json_path=_READY_COND.format("Admitted")),
        Column("Finished", json_path=_READY_COND.format("Finished")),
        _AGE_DATE,
    ),
    "clusterqueues.kueue.x-k8s.io": (
        Column("Cohort", json_path=".spec.cohortName"),
        Column("Strategy", json_path=".spec.queueingStrategy", priority=1),
        Column("Pending Workloads", "integer", ".status.pendingWorkloads"),
        Column("Admitted Workloads", "integer", ".status.admittedWorkloads", priority=1),
    ),
    "localqueues.kueue.x-k8s.io": (
        Column("ClusterQueue", json_path=".spec.clusterQueue"),
        Column("Pending Workloads", "integer", ".status.pendingWorkloads"),
        Column("Admitted Workloads", "integer", ".status.admittedWorkloads"),
    ),
    "workloadpriorityclasses.kueue.x-k8s.io": (Column("Value", "integer", ".value"),),
}


_BUILT_IN_COLUMNS: Mapping[str, tuple[Column, ...]] = {
    POD.key: (
        _NAME,
        Column("Ready"),
        Column("Status"),
        Column("Restarts"),
        Column("Age"),
        Column("IP", priority=1),
        Column("Node", priority=1),
        Column("Nominated Node", priority=1),
        Column("Readiness Gates", priority=1),
    ),
    JOB.key: (
        _NAME,
        Column("Status"),
        Column("Completions"),
        Column("Duration"),
        Column("Age"),
        Column("Containers", priority=1),
        Column("Images", priority=1),
        Column("Selector", priority=1),
    ),
    NAMESPACE.key: (_NAME, Column("Status"), Column("Age")),
    EVENT.key: (
        Column("Last Seen"),
        Column("Type"),
        Column("Reason"),
        Column("Object"),
        Column("Subobject", priority=1),
        Column("Source", priority=1),
        Column("Message"),
        Column("First Seen", priority=1),
        Column("Count", "integer", priority=1),
        Column("Name", priority=1),
    ),
    LEASE.key: (_NAME, Column("Holder"), Column("Age")),
}


def columns_for(resource: Resource) -> tuple[Column, ...]:
    built_in = _BUILT_IN_COLUMNS.get(resource.key)
    if built_in is not None:
        return built_in
    return (_NAME, *CRD_COLUMNS.get(resource.key, (_AGE_DATE,)))


def table(
    resource: Resource,
    objects: list[Obj],
    list_metadata: Obj,
    now: datetime,
    *,
    include_object: str = "Metadata",
    no_headers: bool = False,
) -> Obj:
    """The ``Table`` for ``objects`` (one, for a get) with ``list_metadata``."""
    columns = columns_for(resource)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [] if no_headers else [c.definition() for c in columns],
        "rows": [_row(resource, columns, obj, now, include_object) for obj in objects],
    }


def _row(
    resource: Resource, columns: tuple[Column, ...], obj: Obj, now: datetime, include: str
) -> Obj:
    printer = PRINTERS.get(resource.key)
    cells = printer(obj, now) if printer else [_crd_cell(c, obj, now) for c in columns]
    row: Obj = {"cells": cells}
    if include == "Metadata":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata", {}),
        }
    elif include == "Object":
        row["object"] = obj
    return row


# --- custom resources: JSONPath columns ----------------------------------------------

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_-]+)==[\"']([^\"']*)[\"']\)\]")


def json_path(obj: Any, path: str) -> Any:
    """The value at a CRD column's simple JSONPath (fields and ``[?(@.f=="v")]`` filters),
    or None where it is missing."""
    value = obj
    position = 0
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            return None
        position = match.end()
        field, filter_field, filter_value = match.groups()
        if field is not None:
            value = value.get(field) if isinstance(value, dict) else None
        elif isinstance(value, list):
            found = [
                i for i in value if isinstance(i, dict) and i.get(filter_field) == filter_value
            ]
            value = found[0] if found else None
        else:
            value = None
        if value is None:
            return None
    return value


def _crd_cell(column: Column, obj: Obj, now: datetime) -> Cell:
    if column is _NAME:
        return str(obj.get("metadata", {}).get("name", ""))
    value = json_path(obj, column.json_path)
    if value is None:
        return None
    if column.type == "string":  # printed as kubectl's JSONPath printer does
        return str(value).lower() if isinstance(value, bool) else str(value)
    if column.type == "integer":
        return (
            int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    if column.type == "date":
        return since(value, now) if isinstance(value, str) else None
    return None


def wants_table(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for a ``meta.k8s.io`` Table (any version): the
    first JSON media type kubesim can serve decides, as content negotiation picks the first
    acceptable one (other ``as=`` kinds, e.g. PartialObjectMetadataList, are skipped)."""
    for media in (accept or "").split(","):
        kind, *parts = (part.strip() for part in media.split(";"))
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        params = dict(part.split("=", 1) for part in parts if "=" in part)
        if "as" not in params:
            return False
        if params["as"] == "Table" and params.get("g") == "meta.k8s.io":
            return True
    return False
