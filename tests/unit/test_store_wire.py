"""Framing stored WorkUnit bytes (``xmc.store.wire``) gives what protobuf serializes."""

from __future__ import annotations

import pytest
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

from xmc.store.wire import frame, list_response_from_parts, varint, work_unit_wire
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_152, 2**31, 2**40])
def test_varint_is_protobufs(value: int) -> None:
    assert varint(value) == _VarintBytes(value)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_384])
def test_frame_is_a_length_delimited_field(size: int) -> None:
    data = b"x" * size
    assert frame(b"\x0a", data) == b"\x0a" + _VarintBytes(size) + data


def work_unit(i: int, notes_size: int) -> WorkUnit:
    unit = WorkUnit(name=f"experiments/1/workUnits/{i}", notes="n" * notes_size, tags=["é"])
    unit.current_work_unit_execution.name = f"{unit.name}/executions/1"
    unit.current_work_unit_execution.metadata.resource_name = "r" * notes_size
    return unit


def split(unit: WorkUnit) -> tuple[bytes, bytes]:
    head = WorkUnit()
    head.CopyFrom(unit)
    head.ClearField("current_work_unit_execution")
    return head.SerializeToString(), unit.current_work_unit_execution.SerializeToString()


@pytest.mark.parametrize(
    ("sizes", "token"),
    [
        ([], ""),
        ([0], ""),
        ([0, 10, 100], "next"),
        ([200, 20_000], "t" * 300),  # lengths of two and three varint bytes
    ],
)
def test_pages_from_parts_parse_as_the_messages(sizes: list[int], token: str) -> None:
    units = [work_unit(i, n) for i, n in enumerate(sizes)]
    expected = api_pb2.ListWorkUnitsResponse(work_units=units, next_page_token=token)
    parts = [split(u) for u in units]
    from_parts = list_response_from_parts(parts, token)
    assert from_parts == expected.SerializeToString()
    assert [WorkUnit.FromString(work_unit_wire(*part)) for part in parts] == units
