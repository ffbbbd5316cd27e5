"""What the request check looks at, per message type: the rules' ranges and wordings, and
each type's ``Plan`` (the fields that can hold something to refuse), built once per
type. ``request_checks`` walks a plan to name the first problem; ``request_screen``
compiles it into a yes/no answer. Pure: no I/O (docs/decisions/0015).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

#: Seconds of 0001-01-01T00:00:00Z and of 9999-12-30T00:00:00Z (see the module docstring).
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_128_000
#: ±10,000 years, the range of ``google.protobuf.Duration``.
MAX_DURATION_SECONDS = 315_576_000_000
NANOS = 1_000_000_000
#: Enums with at most this many values list them in the error message.
_LISTED_VALUES = 16
#: Why a string with a NUL is refused.
NUL_PROBLEM = "contains a NUL character (\\x00), which cannot be stored"


def enum_problem(enum: EnumDescriptor, value: int) -> str | None:
    return None if value in enum.values_by_number else unknown_enum(enum, value)


def unknown_enum(enum: EnumDescriptor, value: int) -> str:
    known = ""
    if len(enum.values) <= _LISTED_VALUES:
        known = "; expected one of " + ", ".join(v.name for v in enum.values)
    return f"{value} is not a valid value of {enum.full_name}{known}"


def timestamp_problem(seconds: int, nanos: int) -> str | None:
    if not 0 <= nanos < NANOS:
        return f"nanos must be 0..999999999, got {nanos}"
    if not MIN_TIMESTAMP_SECONDS <= seconds < MAX_TIMESTAMP_SECONDS:
        return f"{seconds} seconds is outside 0001-01-01T00:00:00Z .. 9999-12-30T00:00:00Z"
    return None


def duration_problem(seconds: int, nanos: int) -> str | None:
    if not -MAX_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        return f"{seconds} seconds is outside ±{MAX_DURATION_SECONDS} (10,000 years)"
    if not -NANOS < nanos < NANOS or seconds > 0 > nanos or seconds < 0 < nanos:
        return f"nanos must be -999999999..999999999 with the sign of seconds, got {nanos}"
    return None


TIME_CHECKS: dict[str, Callable[[int, int], str | None]] = {
    "google.protobuf.Timestamp": timestamp_problem,
    "google.protobuf.Duration": duration_problem,
}


#: What a field can hold that needs a look (fields of other types are never visited).
STRING, STRINGS, ENUM, ENUMS, TIME, MESSAGE, MESSAGES, MAP = range(8)


@dataclass
class Plan:
    """The fields of one message type that can hold something to refuse, by number:
    (kind, name, what the kind needs: the enum's numbers and descriptor, the time check,
    the nested plan, or the map's value field and its value's plan)."""

    time_check: Callable[[int, int], str | None] | None = None
    fields: dict[int, tuple[int, str, Any]] = field(default_factory=dict)
    #: Look the planned fields up by name instead of listing the set ones: cheaper when
    #: strings are skipped, as most set fields are strings then.
    direct: bool = False


#: Plans by (message type, strings too): without strings for a request whose bytes hold
#: no 0x00 at all, since a NUL in a string is a 0x00 byte on the wire.
_PLANS: dict[tuple[str, bool], Plan] = {}
#: Message types whose fields, nested ones included, hold an enum, Timestamp or Duration.
_STRUCTURED: dict[str, bool] = {}


def _structured(descriptor: Descriptor) -> bool:
    """Whether the type can hold anything but strings to check (a type being computed
    counts as structured: a cycle may visit more, never less)."""
    known = _STRUCTURED.get(descriptor.full_name)
    if known is not None:
        return known
    _STRUCTURED[descriptor.full_name] = True
    result = descriptor.full_name in TIME_CHECKS or any(
        f.type == FieldDescriptor.TYPE_ENUM
        or (f.message_type is not None and _structured(f.message_type))
        for f in descriptor.fields
    )
    _STRUCTURED[descriptor.full_name] = result
    return result


def plan_for(descriptor: Descriptor, strings: bool = True) -> Plan:
    """The plan of a message type, built once (recursive types end at the cached entry);
    without ``strings`` it leaves out strings and the types that hold only strings."""
    key = (descriptor.full_name, strings)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = _PLANS[key] = Plan(TIME_CHECKS.get(descriptor.full_name), direct=not strings)
    for f in descriptor.fields:
        entry = f.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value = entry.fields_by_name["value"]
            if strings or _structured(entry):
                sub = plan_for(value.message_type, strings) if value.message_type else None
                plan.fields[f.number] = (MAP, f.name, (value, sub))
        elif entry is not None and entry.full_name in TIME_CHECKS and not f.is_repeated:
            plan.fields[f.number] = (TIME, f.name, TIME_CHECKS[entry.full_name])
        elif entry is not None:
            if strings or _structured(entry):
                kind = MESSAGES if f.is_repeated else MESSAGE
                plan.fields[f.number] = (kind, f.name, plan_for(entry, strings))
        elif f.type == FieldDescriptor.TYPE_STRING:
            if strings:
                plan.fields[f.number] = (STRINGS if f.is_repeated else STRING, f.name, None)
        elif f.type == FieldDescriptor.TYPE_ENUM and f.enum_type is not None:
            enum = f.enum_type
            numbers = frozenset(v.number for v in enum.values)
            kind = ENUMS if f.is_repeated else ENUM
            plan.fields[f.number] = (kind, f.name, (numbers, enum))
    plan.fields = dict(sorted(plan.fields.items()))  # number order, as ListFields
    return plan
