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

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ess.request_plans import (
    ENUM,
    ENUMS,
    MAP,
    MESSAGE,
    MESSAGES,
    NUL_PROBLEM,
    STRING,
    STRINGS,
    TIME,
    Plan,
    duration_problem,
    enum_problem,
    plan_for,
    timestamp_problem,
    unknown_enum,
)
from ess.request_screen import Screen, compile_screen
from xmc.errors import InvalidArgumentError

__all__ = [
    "NUL_PROBLEM",
    "check_request",
    "duration_problem",
    "enum_problem",
    "first_problem",
    "timestamp_problem",
]


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


def check_request(message: Message, *, nul_free: bool = False) -> None:
    """Raise ``InvalidArgumentError`` for the first value no request may carry.
    ``nul_free``: the request's bytes hold no 0x00, so no string needs a look."""
    problem = first_problem(message, nul_free=nul_free)
    if problem is not None:
        raise InvalidArgumentError(problem)


def first_problem(message: Message, *, nul_free: bool = False) -> str | None:
    """The first problem in ``message`` (fields in number order, depth first) as
    ``"<path>: <what>"``, or None."""
    plan = plan_for(message.DESCRIPTOR, not nul_free)  # type: ignore[arg-type]
    screen = _SCREENS.get(id(plan))
    if screen is None:
        screen = _SCREENS[id(plan)] = compile_screen(plan, _map_is_clean)
    if screen(message):  # the common case: nothing to refuse, no path to build
        return None
    try:
        _walk(message, plan)
    except _Problem as problem:
        return problem.describe()
    return None


#: The compiled screen of each plan (plans live as long as the process: ``id`` is stable).
_SCREENS: dict[int, Screen] = {}


def _map_is_clean(value: Any, extra: Any) -> bool:
    try:
        _check_field(MAP, value, extra)
    except _Problem:
        return False
    return True


def _walk(message: Message, plan: Plan) -> None:
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
            if kind == MESSAGE:
                if message.HasField(name):
                    try:
                        _walk(getattr(message, name), extra)
                    except _Problem as problem:
                        problem.path.append(name)
                        raise
            elif kind == ENUM:
                number = getattr(message, name)
                if number not in extra[0]:
                    raise _Problem(unknown_enum(extra[1], number), name)
            elif kind == TIME:
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
    if kind == MESSAGE:
        _walk(value, extra)
    elif kind == STRING:
        if "\x00" in value:
            raise _Problem(NUL_PROBLEM)
    elif kind == MESSAGES:
        for i, item in enumerate(value):
            try:
                _walk(item, extra)
            except _Problem as problem:
                problem.path.append(f"[{i}]")
                raise
    elif kind == ENUM:
        if value not in extra[0]:
            raise _Problem(unknown_enum(extra[1], value))
    elif kind == TIME:
        what = extra(value.seconds, value.nanos)
        if what is not None:
            raise _Problem(what)
    elif kind == STRINGS:
        for i, text in enumerate(value):
            if "\x00" in text:
                raise _Problem(NUL_PROBLEM, f"[{i}]")
    elif kind == ENUMS:
        for i, number in enumerate(value):
            if number not in extra[0]:
                raise _Problem(unknown_enum(extra[1], number), f"[{i}]")
    else:  # MAP
        value_field, value_plan = extra
        for key in value:
            try:
                _check_map_entry(key, value[key], value_field, value_plan)
            except _Problem as problem:
                problem.path.append(f"[{key!r}]")
                raise


def _check_map_entry(
    key: object, value: object, value_field: FieldDescriptor, sub: Plan | None
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
