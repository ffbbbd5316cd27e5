"""The request check's compiled screen (``services/ess/request_screen.py``) agrees with
the walk it short-cuts: on every request type of the API, for messages filled at random
with values on both sides of every rule (NULs, unknown enum numbers, times at and past
the ends of their ranges), in maps, oneofs, repeated and recursive fields, with strings
and without, it finds a message clean exactly when the walk finds no problem."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.longrunning import operations_proto_pb2 as ops
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from ess.request_checks import _map_is_clean, _Problem, _walk, first_problem
from ess.request_plans import (
    MAX_DURATION_SECONDS,
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    plan_for,
)
from ess.request_screen import compile_screen
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.internal.v1 import executions_pb2, scheduling_pb2

SECONDS = (
    0,
    1,
    -1,
    MIN_TIMESTAMP_SECONDS - 1,
    MIN_TIMESTAMP_SECONDS,
    MAX_TIMESTAMP_SECONDS - 1,
    MAX_TIMESTAMP_SECONDS,
    MAX_DURATION_SECONDS,
    MAX_DURATION_SECONDS + 1,
    -MAX_DURATION_SECONDS,
    -MAX_DURATION_SECONDS - 1,
)
NANOS = (0, 1, -1, 999_999_999, 1_000_000_000, -999_999_999, -1_000_000_000)
TEXTS = ("", "a", "é🙂", "a\x00b")


def _request_types() -> list[type[Message]]:
    types: list[type[Message]] = [ops.WaitOperationRequest, ops.GetOperationRequest]
    for module in (api_pb2, executions_pb2, scheduling_pb2):
        for descriptor in module.DESCRIPTOR.message_types_by_name.values():
            types.append(getattr(module, descriptor.name))
    return types


REQUEST_TYPES = _request_types()


def _scalar(rng: random.Random, field: FieldDescriptor, bad: float) -> Any:
    if field.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(TEXTS) if rng.random() < bad else rng.choice(TEXTS[:3])
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        numbers = [v.number for v in field.enum_type.values]
        return rng.choice([*numbers, 70000, -1]) if rng.random() < bad else rng.choice(numbers)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if field.type == FieldDescriptor.TYPE_BYTES:
        return b"\x00x"
    if field.cpp_type in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return 1.5
    return rng.choice((0, 1, 7))


def fill(message: Message, rng: random.Random, bad: float, depth: int = 0) -> None:
    """Set a random subset of ``message``'s fields, each problem with odds ``bad``."""
    descriptor: Descriptor = message.DESCRIPTOR  # type: ignore[assignment]
    if descriptor.full_name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        ok = rng.random() >= bad
        message.seconds = rng.choice(SECONDS[:3] if ok else SECONDS)  # type: ignore[attr-defined]
        message.nanos = rng.choice(NANOS[:2] if ok else NANOS)  # type: ignore[attr-defined]
        return
    for field in descriptor.fields:
        if rng.random() < 0.4 or depth > 6:
            continue
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value_field = entry.fields_by_name["value"]
            container = getattr(message, field.name)
            for _ in range(rng.randint(0, 2)):
                key = _scalar(rng, entry.fields_by_name["key"], bad)
                if value_field.message_type is not None:
                    fill(container[key], rng, bad, depth + 1)
                else:
                    container[key] = _scalar(rng, value_field, bad)
        elif field.is_repeated:
            container = getattr(message, field.name)
            for _ in range(rng.randint(0, 2)):
                if entry is not None:
                    fill(container.add(), rng, bad, depth + 1)
                else:
                    container.append(_scalar(rng, field, bad))
        elif entry is not None:
            child = getattr(message, field.name)
            child.SetInParent()
            fill(child, rng, bad, depth + 1)
        else:
            setattr(message, field.name, _scalar(rng, field, bad))


def _walk_is_clean(message: Message, strings: bool) -> bool:
    try:
        _walk(message, plan_for(message.DESCRIPTOR, strings))  # type: ignore[arg-type]
    except _Problem:
        return False
    return True


@pytest.mark.parametrize("request_type", REQUEST_TYPES, ids=lambda t: t.DESCRIPTOR.name)
@pytest.mark.parametrize("strings", [True, False], ids=["strings", "no strings"])
def test_the_screen_agrees_with_the_walk(request_type: type[Message], strings: bool) -> None:
    rng = random.Random(f"{request_type.DESCRIPTOR.full_name}/{strings}")
    plan = plan_for(request_type.DESCRIPTOR, strings)  # type: ignore[arg-type]
    screen = compile_screen(plan, _map_is_clean)
    verdicts = set()
    for i in range(150):
        message = request_type()
        fill(message, rng, bad=(0.0, 0.02, 0.1, 0.5)[i % 4])
        clean = _walk_is_clean(message, strings)
        assert screen(message) == clean, message
        verdicts.add(clean)
    assert True in verdicts  # the clean case is exercised for every type


def test_the_execution_updates_exercise_both_verdicts() -> None:
    """The masked write path, the screen's reason to be: clean and refused batches."""
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for i in range(300):
        request = executions_pb2.UpdateWorkUnitExecutionsRequest()
        for _ in range(3):
            fill(request.updates.add(), rng, bad=0.01 * (i % 5))
        for strings in (True, False):
            clean = _walk_is_clean(request, strings)
            seen[clean] += 1
            want = None if clean else first_problem(request, nul_free=not strings)
            assert (want is None) == clean
    assert seen[True] > 50
    assert seen[False] > 50
