"""Artifacts (SPEC §2.1): metadata records with their payload stored as given."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from xmc.errors import NotFoundError
from xmc.masks import apply_update_mask
from xmc.query import FieldKind, FieldSpec, OrderKey
from xmc.store.connection import Connection, fetch_one
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact

_COLUMNS = "aid, parent, doc, create_time, update_time"

DataType = enum.IntEnum(  # type: ignore[misc]
    "DataType", {v.name: v.number for v in Artifact.DataType.DESCRIPTOR.values}
)
LifecyclePhase = enum.IntEnum(  # type: ignore[misc]
    "LifecyclePhase", {v.name: v.number for v in Artifact.LifecyclePhase.DESCRIPTOR.values}
)

ARTIFACT_LISTING = ListResource(
    source="artifacts a",
    columns="a.aid, a.parent, a.doc, a.create_time, a.update_time",
    fields={
        "tags": FieldSpec("a.tags", FieldKind.STRING_LIST, sortable=False),
        "priority": FieldSpec("a.priority", FieldKind.INT),
        "data_type": FieldSpec("a.data_type", FieldKind.ENUM, enum=DataType),
        "lifecycle_phase": FieldSpec("a.lifecycle_phase", FieldKind.ENUM, enum=LifecyclePhase),
        "mime_type": FieldSpec("a.mime_type", FieldKind.STRING),
        "create_time": FieldSpec("a.create_time", FieldKind.TIMESTAMP),
        "update_time": FieldSpec("a.update_time", FieldKind.TIMESTAMP),
    },
    default_order=(OrderKey("create_time"),),
    tiebreak=("a.aid",),
)

#: What ``UpdateArtifact`` may change.
ARTIFACT_UPDATABLE = frozenset(
    {
        "url",
        "acls",
        "tags",
        "notes",
        "lifecycle_phase",
        "data_type",
        "mime_type",
        "additional_info",
        "payload",
        "priority",
    }
)


def artifact_name(aid: int) -> str:
    return f"artifacts/{aid}"


def _doc(artifact: Artifact) -> bytes:
    doc = Artifact()
    doc.CopyFrom(artifact)
    for server_owned in ("name", "create_time", "update_time"):
        doc.ClearField(server_owned)
    return doc.SerializeToString()


def artifact_from_row(row: Mapping[str, Any]) -> Artifact:
    artifact = Artifact.FromString(row["doc"])
    artifact.name = artifact_name(row["aid"])
    artifact.parent = row["parent"]
    set_timestamp(artifact.create_time, row["create_time"])
    set_timestamp(artifact.update_time, row["update_time"])
    return artifact


def _column_values(artifact: Artifact) -> tuple[Any, ...]:
    return (
        list(artifact.tags),
        artifact.priority,
        int(artifact.data_type),
        int(artifact.lifecycle_phase),
        artifact.mime_type,
        _doc(artifact),
    )


async def insert_artifact(conn: Connection, artifact: Artifact, *, now: datetime) -> Artifact:
    row = await fetch_one(
        conn,
        f"""INSERT INTO artifacts (parent, tags, priority, data_type, lifecycle_phase,
                mime_type, doc, create_time, update_time)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING {_COLUMNS}""",
        artifact.parent,
        *_column_values(artifact),
        now,
    )
    return artifact_from_row(row)


async def fetch_artifact(conn: Connection, aid: int, *, for_update: bool = False) -> Artifact:
    lock = " FOR UPDATE" if for_update else ""
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM artifacts WHERE aid = $1{lock}", aid)
    if row is None:
        raise NotFoundError(f"name: {artifact_name(aid)} does not exist")
    return artifact_from_row(row)


async def update_artifact(
    conn: Connection, aid: int, source: Artifact, paths: tuple[str, ...], *, now: datetime
) -> Artifact:
    artifact = await fetch_artifact(conn, aid, for_update=True)
    apply_update_mask(artifact, source, paths)
    row = await fetch_one(
        conn,
        f"""UPDATE artifacts SET tags = $2, priority = $3, data_type = $4, lifecycle_phase = $5,
                mime_type = $6, doc = $7, update_time = $8
            WHERE aid = $1 RETURNING {_COLUMNS}""",
        aid,
        *_column_values(artifact),
        now,
    )
    return artifact_from_row(row)


async def delete_artifact(conn: Connection, aid: int) -> None:
    status: str = await conn.execute("DELETE FROM artifacts WHERE aid = $1", aid)
    if status.endswith(" 0"):
        raise NotFoundError(f"name: {artifact_name(aid)} does not exist")


async def list_artifacts(
    conn: Connection, parent: str, request: ListRequest
) -> tuple[list[Artifact], str]:
    """Artifacts of a parent; an experiment's listing includes its work units' artifacts."""
    rows, token = await fetch_page(
        conn,
        ARTIFACT_LISTING,
        request,
        where="a.parent = $1 OR a.parent LIKE $2",
        params=[parent, parent + "/%"],
        scope=parent,
    )
    return [artifact_from_row(r) for r in rows], token
