"""What no request may carry, checked once for every RPC by walking the message.

``validation.py`` knows what each RPC means; this walk knows only what storage and the
wire can hold, and it visits every set field of every request, nested messages, repeated
fields and maps included, so a field added later cannot forget the check:

- **text**: no NUL. Postgres ``text`` cannot store U+0000, and a NUL that reached a
  column made the RPC fail INTERNAL (proto3 strings are valid UTF-8 already: a request
  that is not does not parse, so NUL is the only character left to refuse);
- **enums**: a number the enum defines. Proto3 enums are open, so an unknown number
  parses, and would be stored as-is (readers then fail on it) or overflow a ``smallint``;
- **google.protobuf.Timestamp**: within 0001-01-01 … 9999-12-30 with 0 ≤ nanos < 10⁹:
  the canonical range, ending one day early so that XMC's own stamps after a stored time
  (``stamp_after``: + 1 µs) cannot overflow;
- **google.protobuf.Duration**: the canonical ±10,000 years, nanos with the seconds' sign.

The first violation raises ``InvalidArgumentError`` naming its path in the request, e.g.
``work_unit.executable.jobset.jobs[1].spec.env_vars['A']: contains a NUL character``.

The masked write path carries up to 10,000 items per call, so the walk is compiled once
per message type into the fields worth looking at (``_Plan``), visits only the fields
that are set, skips strings when the request's bytes hold no 0x00 (a NUL in a string is
one), and builds the path of a problem only when there is one. Pure: no I/O
(docs/decisions/0015).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from xmc.errors import InvalidArgumentError

#: Seconds of 0001-01-01T00:00:00Z and of 9999-12-30T00:00:00Z (see the module docstring).
MIN_TIMESTAMP_SECONDS = -62_135_596_800
MAX_TIMESTAMP_SECONDS = 253_402_128_000
#: ±10,000 years, the range of ``google.protobuf.Duration``.
MAX_DURATION_SECONDS = 315_576_000_000
_NANOS = 1_000_000_000
#: Enums with at most this many values list them in the error message.
_LISTED_VALUES = 16
#: Why a string with a NUL is refused.
NUL_PROBLEM = "contains a NUL character (\\x00), which cannot be stored"


def enum_problem(enum: EnumDescriptor, value: int) -> str | None:
    return None if value in enum.values_by_number else _unknown_enum(enum, value)


def _unknown_enum(enum: EnumDescriptor, value: int) -> str:
    known = ""
    if len(enum.values) <= _LISTED_VALUES:
        known = "; expected one of " + ", ".join(v.name for v in enum.values)
    return f"{value} is not a valid value of {enum.full_name}{known}"


def timestamp_problem(seconds: int, nanos: int) -> str | None:
    if not 0 <= nanos < _NANOS:
        return f"nanos must be 0..999999999, got {nanos}"
    if not MIN_TIMESTAMP_SECONDS <= seconds < MAX_TIMESTAMP_SECONDS:
        return f"{seconds} seconds is outside 0001-01-01T00:00:00Z .. 9999-12-30T00:00:00Z"
    return None


def duration_problem(seconds: int, nanos: int) -> str | None:
    if not -MAX_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        return f"{seconds} seconds is outside ±{MAX_DURATION_SECONDS} (10,000 years)"
    if not -_NANOS < nanos < _NANOS or seconds > 0 > nanos or seconds < 0 < nanos:
        return f"nanos must be -999999999..999999999 with the sign of seconds, got {nanos}"
    return None


_TIME_CHECKS: dict[str, Callable[[int, int], str | None]] = {
    "google.protobuf.Timestamp": timestamp_problem,
    "google.protobuf.Duration": duration_problem,
}


class _Problem(Exception):
    """A problem found deep in the walk; ``path`` grows (reversed) on the way out."""

    def __init__(self, what: str, *path: str) -> None:
        self.what = what
        self.path = list(path)

    def describe(self) -> str:
        where = ""
        for part in reversed(self.path):
            where += part if part.startswith("[") or not where else f".{part}"
        return f"{where}: {self.what}"


#: What a field can hold that needs a look (fields of other types are never visited).
_STRING, _STRINGS, _ENUM, _ENUMS, _TIME, _MESSAGE, _MESSAGES, _MAP = range(8)


@dataclass
class _Plan:
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
_PLANS: dict[tuple[str, bool], _Plan] = {}
#: Message types whose fields, nested ones included, hold an enum, Timestamp or Duration.
_STRUCTURED: dict[str, bool] = {}


def _structured(descriptor: Descriptor) -> bool:
    """Whether the type can hold anything but strings to check (a type being computed
    counts as structured: a cycle may visit more, never less)."""
    known = _STRUCTURED.get(descriptor.full_name)
    if known is not None:
        return known
    _STRUCTURED[descriptor.full_name] = True
    result = descriptor.full_name in _TIME_CHECKS or any(
        f.type == FieldDescriptor.TYPE_ENUM
        or (f.message_type is not None and _structured(f.message_type))
        for f in descriptor.fields
    )
    _STRUCTURED[descriptor.full_name] = result
    return result


def _plan(descriptor: Descriptor, strings: bool = True) -> _Plan:
    """The plan of a message type, built once (recursive types end at the cached entry);
    without ``strings`` it leaves out strings and the types that hold only strings."""
    key = (descriptor.full_name, strings)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    plan = _PLANS[key] = _Plan(_TIME_CHECKS.get(descriptor.full_name), direct=not strings)
    for f in descriptor.fields:
        entry = f.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value = entry.fields_by_name["value"]
            if strings or _structured(entry):
                sub = _plan(value.message_type, strings) if value.message_type else None
                plan.fields[f.number] = (_MAP, f.name, (value, sub))
        elif entry is not None and entry.full_name in _TIME_CHECKS and not f.is_repeated:
            plan.fields[f.number] = (_TIME, f.name, _TIME_CHECKS[entry.full_name])
        elif entry is not None:
            if strings or _structured(entry):
                kind = _MESSAGES if f.is_repeated else _MESSAGE
                plan.fields[f.number] = (kind, f.name, _plan(entry, strings))
        elif f.type == FieldDescriptor.TYPE_STRING:
            if strings:
                plan.fields[f.number] = (_STRINGS if f.is_repeated else _STRING, f.name, None)
        elif f.type == FieldDescriptor.TYPE_ENUM and f.enum_type is not None:
            enum = f.enum_type
            numbers = frozenset(v.number for v in enum.values)
            kind = _ENUMS if f.is_repeated else _ENUM
            plan.fields[f.number] = (kind, f.name, (numbers, enum))
    plan.fields = dict(sorted(plan.fields.items()))  # number order, as ListFields
    return plan


def check_request(message: Message, *, nul_free: bool = False) -> None:
    """Raise ``InvalidArgumentError`` for the first value no request may carry.
    ``nul_free``: the request's bytes hold no 0x00, so no string needs a look."""
    problem = first_problem(message, nul_free=nul_free)
    if problem is not None:
        raise InvalidArgumentError(problem)


def first_problem(message: Message, *, nul_free: bool = False) -> str | None:
    """The first problem in ``message`` (fields in number order, depth first) as
    ``"<path>: <what>"``, or None."""
    try:
        _walk(message, _plan(message.DESCRIPTOR, not nul_free))  # type: ignore[arg-type]
    except _Problem as problem:
        return problem.describe()
    return None


def _walk(message: Message, plan: _Plan) -> None:
    """Visit only the fields that are set (``ListFields``, one call into upb): a proto3
    string or enum left at its default cannot hold a problem (every enum defines 0)."""
    if plan.time_check is not None:
        what = plan.time_check(message.seconds, message.nanos)  # type: ignore[attr-defined]
        if what is not None:
            raise _Problem(what)
        return
    if plan.direct:
        # The common kinds inline: a function call per field was most of the cost.
        for kind, name, extra in plan.fields.values():
            if kind == _MESSAGE:
                if message.HasField(name):
                    try:
                        _walk(getattr(message, name), extra)
                    except _Problem as problem:
                        problem.path.append(name)
                        raise
            elif kind == _ENUM:
                number = getattr(message, name)
                if number not in extra[0]:
                    raise _Problem(_unknown_enum(extra[1], number), name)
            elif kind == _TIME:
                if message.HasField(name):
                    stamp = getattr(message, name)
                    what = extra(stamp.seconds, stamp.nanos)
                    if what is not None:
                        raise _Problem(what, name)
            else:
                value = getattr(message, name)
                if value:  # an empty repeated field or map holds nothing
                    _check_named(kind, name, value, extra)
        return
    fields = plan.fields
    for descriptor, value in message.ListFields():
        action = fields.get(descriptor.number)
        if action is not None:
            _check_named(action[0], action[1], value, action[2])


def _check_named(kind: int, name: str, value: Any, extra: Any) -> None:
    try:
        _check_field(kind, value, extra)
    except _Problem as problem:
        problem.path.append(name)
        raise


def _check_field(kind: int, value: Any, extra: Any) -> None:
    if kind == _MESSAGE:
        _walk(value, extra)
    elif kind == _STRING:
        if "\x00" in value:
            raise _Problem(NUL_PROBLEM)
    elif kind == _MESSAGES:
        for i, item in enumerate(value):
            try:
                _walk(item, extra)
            except _Problem as problem:
                problem.path.append(f"[{i}]")
                raise
    elif kind == _ENUM:
        if value not in extra[0]:
            raise _Problem(_unknown_enum(extra[1], value))
    elif kind == _TIME:
        what = extra(value.seconds, value.nanos)
        if what is not None:
            raise _Problem(what)
    elif kind == _STRINGS:
        for i, text in enumerate(value):
            if "\x00" in text:
                raise _Problem(NUL_PROBLEM, f"[{i}]")
    elif kind == _ENUMS:
        for i, number in enumerate(value):
            if number not in extra[0]:
                raise _Problem(_unknown_enum(extra[1], number), f"[{i}]")
    else:  # _MAP
        value_field, value_plan = extra
        for key in value:
            try:
                _check_map_entry(key, value[key], value_field, value_plan)
            except _Problem as problem:
                problem.path.append(f"[{key!r}]")
                raise


def _check_map_entry(
    key: object, value: object, value_field: FieldDescriptor, sub: _Plan | None
) -> None:
    if isinstance(key, str) and "\x00" in key:
        raise _Problem(f"the key {NUL_PROBLEM}")
    if sub is not None:
        _walk(value, sub)  # type: ignore[arg-type]
    elif isinstance(value, str) and "\x00" in value:
        raise _Problem(NUL_PROBLEM)
    elif value_field.type == FieldDescriptor.TYPE_ENUM:
        what = enum_problem(value_field.enum_type, value)  # type: ignore[arg-type]
        if what is not None:
            raise _Problem(what)
