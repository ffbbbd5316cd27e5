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
per message type into the list of fields worth looking at (``_Plan``), and the path of a
problem is only built when there is one. Pure: no I/O (docs/decisions/0015).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass
class _Plan:
    """The fields of one message type that can hold something to refuse."""

    time_check: Callable[[int, int], str | None] | None = None
    strings: list[str] = field(default_factory=list)
    string_lists: list[str] = field(default_factory=list)
    #: (name, the enum's numbers, the enum).
    enums: list[tuple[str, frozenset[int], EnumDescriptor]] = field(default_factory=list)
    enum_lists: list[tuple[str, frozenset[int], EnumDescriptor]] = field(default_factory=list)
    #: Singular Timestamp and Duration fields, checked in place (the common case).
    times: list[tuple[str, Callable[[int, int], str | None]]] = field(default_factory=list)
    messages: list[tuple[str, _Plan]] = field(default_factory=list)
    message_lists: list[tuple[str, _Plan]] = field(default_factory=list)
    #: (name, value field, the value's plan if it is a message) of map fields.
    maps: list[tuple[str, FieldDescriptor, _Plan | None]] = field(default_factory=list)


_PLANS: dict[str, _Plan] = {}


def _plan(descriptor: Descriptor) -> _Plan:
    """The plan of a message type, built once (recursive types end at the cached entry)."""
    plan = _PLANS.get(descriptor.full_name)
    if plan is not None:
        return plan
    plan = _PLANS[descriptor.full_name] = _Plan(_TIME_CHECKS.get(descriptor.full_name))
    for f in descriptor.fields:
        entry = f.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value = entry.fields_by_name["value"]
            sub = _plan(value.message_type) if value.message_type is not None else None
            plan.maps.append((f.name, value, sub))
        elif entry is not None and entry.full_name in _TIME_CHECKS and not f.is_repeated:
            plan.times.append((f.name, _TIME_CHECKS[entry.full_name]))
        elif entry is not None:
            (plan.message_lists if f.is_repeated else plan.messages).append((f.name, _plan(entry)))
        elif f.type == FieldDescriptor.TYPE_STRING:
            (plan.string_lists if f.is_repeated else plan.strings).append(f.name)
        elif f.type == FieldDescriptor.TYPE_ENUM and f.enum_type is not None:
            enum = f.enum_type
            numbers = frozenset(v.number for v in enum.values)
            (plan.enum_lists if f.is_repeated else plan.enums).append((f.name, numbers, enum))
    return plan


def check_request(message: Message) -> None:
    """Raise ``InvalidArgumentError`` for the first value no request may carry."""
    problem = first_problem(message)
    if problem is not None:
        raise InvalidArgumentError(problem)


def first_problem(message: Message) -> str | None:
    """The first problem in ``message`` as ``"<path>: <what>"``, or None."""
    try:
        _walk(message, _plan(message.DESCRIPTOR))  # type: ignore[arg-type]
    except _Problem as problem:
        return problem.describe()
    return None


def _walk(message: Message, plan: _Plan) -> None:
    if plan.time_check is not None:
        what = plan.time_check(message.seconds, message.nanos)  # type: ignore[attr-defined]
        if what is not None:
            raise _Problem(what)
        return
    for name in plan.strings:
        if "\x00" in getattr(message, name):
            raise _Problem(NUL_PROBLEM, name)
    for name in plan.string_lists:
        for i, text in enumerate(getattr(message, name)):
            if "\x00" in text:
                raise _Problem(NUL_PROBLEM, f"[{i}]", name)
    for name, numbers, enum in plan.enums:
        number = getattr(message, name)
        if number not in numbers:
            raise _Problem(_unknown_enum(enum, number), name)
    for name, numbers, enum in plan.enum_lists:
        for i, number in enumerate(getattr(message, name)):
            if number not in numbers:
                raise _Problem(_unknown_enum(enum, number), f"[{i}]", name)
    for name, check in plan.times:
        if message.HasField(name):
            stamp = getattr(message, name)
            what = check(stamp.seconds, stamp.nanos)
            if what is not None:
                raise _Problem(what, name)
    for name, sub in plan.messages:
        if message.HasField(name):
            try:
                _walk(getattr(message, name), sub)
            except _Problem as problem:
                problem.path.append(name)
                raise
    for name, sub in plan.message_lists:
        for i, item in enumerate(getattr(message, name)):
            try:
                _walk(item, sub)
            except _Problem as problem:
                problem.path += (f"[{i}]", name)
                raise
    for name, value_field, value_plan in plan.maps:
        entries = getattr(message, name)
        for key in entries:
            try:
                _check_map_entry(key, entries[key], value_field, value_plan)
            except _Problem as problem:
                problem.path += (f"[{key!r}]", name)
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
