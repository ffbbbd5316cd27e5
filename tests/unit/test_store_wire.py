"""Framing stored WorkUnit bytes (``xmc.store.wire``) gives what protobuf serializes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

from xmc.model.states import WorkUnitState
from xmc.model.stored import write_execution
from xmc.store import wire
from xmc.store.wire import (
    execution_wire_from_values,
    frame,
    list_response_from_parts,
    signed_varint,
    varint,
    work_unit_wire,
)
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.status_pb2 import ExecutableStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_152, 2**31, 2**40])
def test_varint_is_protobufs(value: int) -> None:
    assert varint(value) == _VarintBytes(value)


@pytest.mark.parametrize("value", [-1, -(2**31), -(2**62), -62135596800])
def test_a_negative_int64_is_protobufs_ten_byte_varint(value: int) -> None:
    assert signed_varint(value) == _VarintBytes(value & (2**64 - 1))
    assert len(signed_varint(value)) == 10


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


def test_a_page_of_more_lengths_than_the_prefix_caches_hold_still_parses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tag-and-length caches are cleared when full; the page must not notice."""
    monkeypatch.setattr(wire, "_MAX_PREFIXES", 2)
    units = [work_unit(i, n) for i, n in enumerate([0, 1, 2, 3, 200, 201, 20_000])]
    parts = [split(u) for u in units]
    for _ in range(2):  # the second page meets caches filled by the first
        from_parts = list_response_from_parts(parts, "next")
        expected = api_pb2.ListWorkUnitsResponse(work_units=units, next_page_token="next")
        assert from_parts == expected.SerializeToString()
    assert len(wire._UNIT_PREFIXES) <= 2
    assert len(wire._EXECUTION_PREFIXES) <= 2


_TIMES = [
    None,
    datetime(1970, 1, 1, tzinfo=UTC),  # both Timestamp fields zero: an empty message
    datetime(1, 1, 1, tzinfo=UTC),  # negative seconds: a ten-byte varint
    datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2026, 12, 1, 21, 58, 3, 123_456, tzinfo=UTC),
    datetime(2026, 12, 1, 23, 58, 3, tzinfo=timezone(timedelta(hours=2))),  # not UTC
    datetime(2026, 12, 1, 21, 58, 3),  # naive: UTC
    datetime(9999, 12, 30, tzinfo=UTC),
]


def _message(rng: random.Random) -> bytes | None:
    choice = rng.randrange(4)
    if choice == 0:
        return None
    if choice == 1:
        return b""  # present but empty
    message = StructuredMessage(
        severity=StructuredMessage.INFO, user_facing_text="c" * rng.randrange(300)
    )
    return message.SerializeToString()


def _random_values(rng: random.Random) -> list[Any]:
    required = [t for t in _TIMES if t is not None]
    metadata = rng.choice(
        [
            None,
            b"",
            WorkUnitExecutionMetadata(resource_name="r" * rng.randrange(200)).SerializeToString(),
        ]
    )
    detailed = rng.choice([None, b"", ExecutableStatus().SerializeToString(), b"\x0a\x02\x08\x01"])
    return [
        rng.choice(required),
        rng.choice(required),
        rng.choice(_TIMES),
        rng.choice(list(WorkUnitState)),
        rng.choice(required),
        rng.choice(required),
        _message(rng),
        _message(rng),
        _message(rng),
        detailed,
        metadata,
    ]


def test_exec_wire_is_upbs_serialization_of_the_built_message() -> None:
    """The direct encoder writes the very bytes upb writes for the message the readers
    build (``write_execution``): every field set or not, empty messages, times before
    1970, in other zones and naive, names of every varint length."""
    rng = random.Random(14)
    for i in range(2_000):
        values = _random_values(rng)
        name = rng.choice(["", "experiments/1/workUnits/2/executions/3", "n" * (i % 300)])
        expected = WorkUnitExecution()
        write_execution(expected, name, values)
        expected.state = WorkUnitExecution.WorkUnitExecutionState.ACTIVE
        assert execution_wire_from_values(name, values) == expected.SerializeToString(), values


def test_a_time_encodes_the_same_from_the_cache() -> None:
    moment = datetime(2026, 12, 1, 21, 58, 3, 5, tzinfo=UTC)
    values = [moment, moment, None, WorkUnitState.RUNNING, moment, moment] + [None] * 5
    first = execution_wire_from_values("n", values)
    assert execution_wire_from_values("n", values) == first
    assert WorkUnitExecution.FromString(first).create_time.ToDatetime(UTC) == moment
