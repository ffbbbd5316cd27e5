"""The request check's fast yes/no answer: does a message hold anything to refuse at all?

``request_checks._walk`` finds the first problem and names its path; it interprets a
``_Plan`` field by field, and that interpretation (a call, a dispatch on the kind and a
``HasField`` per planned field, for every nested message) was most of its cost on the
masked write path, whose requests carry thousands of items with nothing wrong. This
module compiles each plan once into a Python function of straight-line code, nested
messages inlined, that only answers whether the message is clean: ``True`` for almost
every request, and on ``False`` the walk runs to say what and where. So the wording of
every refusal stays the walk's, and this screen only has to agree with it on *whether*
there is a problem (``tests/unit/test_ess_request_screen.py`` checks that it does).

What each kind compiles to (``m`` a message of the plan's type; the plan lists only the
fields worth a look):

- a Timestamp or Duration field: its range, read only when ``HasField`` (an unset one is
  in range, and reading it would build an empty message: checking presence first took the
  masked write's screen from 6.4 to 4.0 µs per item);
- an enum: membership of the defined numbers (0, the default, is always defined);
- a string: no NUL (only in plans with strings);
- a nested message: its own checks, inlined, when ``HasField``; repeated ones in a loop;
- a map, or a type already being inlined (a recursive type): a call, to the walk itself
  for a map, to the type's own compiled function otherwise.

Pure: no I/O (docs/decisions/0015).
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from ess.request_plans import (
    ENUM,
    ENUMS,
    MAX_TIMESTAMP_SECONDS,
    MESSAGE,
    MESSAGES,
    MIN_TIMESTAMP_SECONDS,
    NANOS,
    STRING,
    STRINGS,
    TIME,
    Plan,
    timestamp_problem,
)

#: Nested messages deeper than this are called rather than inlined (keeps functions small).
_MAX_INLINE_DEPTH = 8

Screen = Callable[[Message], bool]
#: Whether a map field's value (the container) is clean, given its plan entry's extra.
MapScreen = Callable[[Any, Any], bool]


class _Compiler:
    """Source of one function per plan; nested plans are inlined, cycles become calls."""

    def __init__(self, map_screen: MapScreen) -> None:
        self.map_screen = map_screen
        self.namespace: dict[str, Any] = {}
        self.names: dict[int, str] = {}  # id(plan) -> its function's name
        self.pending: list[Plan] = []

    def constant(self, value: object) -> str:
        name = f"_c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def function_name(self, plan: Plan) -> str:
        name = self.names.get(id(plan))
        if name is None:
            name = self.names[id(plan)] = f"_screen{len(self.names)}"
            self.pending.append(plan)
        return name

    def function(self, plan: Plan) -> str:
        lines = [f"def {self.names[id(plan)]}(m0):"]
        self.body(plan, "m0", 1, lines, (id(plan),))
        lines.append("    return True")
        return "\n".join(lines)

    def body(
        self, plan: Plan, var: str, depth: int, out: list[str], inlining: tuple[int, ...]
    ) -> None:
        pad = "    " * depth
        if plan.time_check is not None:
            out.append(f"{pad}if {self.time_check(plan.time_check, var)}:")
            out.append(f"{pad}    return False")
            return
        for kind, name, extra in plan.fields.values():
            value = _attribute(var, name)
            if kind == ENUM:
                out.append(f"{pad}if {value} not in {self.constant(extra[0])}:")
                out.append(f"{pad}    return False")
            elif kind == TIME:
                out.append(f"{pad}if {var}.HasField({name!r}):")
                out.append(f"{pad}    t = {value}")
                out.append(f"{pad}    if {self.time_check(extra, 't')}:")
                out.append(f"{pad}        return False")
            elif kind == STRING:
                out.append(f"{pad}if '\\x00' in {value}:")
                out.append(f"{pad}    return False")
            elif kind == STRINGS:
                out.append(f"{pad}for s in {value}:")
                out.append(f"{pad}    if '\\x00' in s:")
                out.append(f"{pad}        return False")
            elif kind == ENUMS:
                out.append(f"{pad}if not {self.constant(extra[0])}.issuperset({value}):")
                out.append(f"{pad}    return False")
            elif kind == MESSAGE:
                out.append(f"{pad}if {var}.HasField({name!r}):")
                self.nested(extra, value, depth + 1, out, inlining)
            elif kind == MESSAGES:
                item = f"m{depth + 1}"
                out.append(f"{pad}for {item} in {value}:")
                self.nested(extra, item, depth + 1, out, inlining)
            else:  # MAP: rare on the hot paths; the walk's own map check decides
                screen = self.constant(self.map_screen)
                out.append(f"{pad}if {value} and not {screen}({value}, {self.constant(extra)}):")
                out.append(f"{pad}    return False")

    def nested(
        self, plan: Plan, value: str, depth: int, out: list[str], inlining: tuple[int, ...]
    ) -> None:
        pad = "    " * depth
        if id(plan) in inlining or depth > _MAX_INLINE_DEPTH:
            out.append(f"{pad}if not {self.function_name(plan)}({value}):")
            out.append(f"{pad}    return False")
            return
        var = f"m{depth}"
        start = len(out)
        self.body(plan, var, depth, out, (*inlining, id(plan)))
        if len(out) == start:
            out.append(f"{pad}pass")
        elif value != var:
            out.insert(start, f"{pad}{var} = {value}")

    def time_check(self, check: Callable[[int, int], str | None], stamp: str) -> str:
        """A condition true when ``stamp`` (Timestamp or Duration) is out of range."""
        s, n = f"{stamp}.seconds", f"{stamp}.nanos"
        if check is timestamp_problem:  # inlined: the negation of its two conditions
            return (
                f"not (0 <= {n} < {NANOS}"
                f" and {MIN_TIMESTAMP_SECONDS} <= {s} < {MAX_TIMESTAMP_SECONDS})"
            )
        return f"{self.constant(check)}({s}, {n}) is not None"


def _attribute(var: str, name: str) -> str:
    return f"getattr({var}, {name!r})" if keyword.iskeyword(name) else f"{var}.{name}"


def compile_screen(plan: Plan, map_screen: MapScreen) -> Screen:
    """The screen of ``plan`` and of every plan it reaches; maps are left to
    ``map_screen``."""
    compiler = _Compiler(map_screen)
    root = compiler.function_name(plan)
    sources = []
    while compiler.pending:
        sources.append(compiler.function(compiler.pending.pop()))
    exec("\n\n".join(sources), compiler.namespace)  # our own source, from the plans alone
    screen: Screen = compiler.namespace[root]
    return screen
