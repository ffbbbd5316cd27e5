"""The field catalogue a resource exposes to List/Search, and the request size limits.

A resource's ``Mapping[str, FieldSpec]`` says which names a filter or order_by may use and
how each one's values are written and compared; every other module of the package reads it.

A field of kind ``ARGS`` is a map (a ``jsonb`` object of text values): it is not named
itself but through its keys, ``args.lr``, which ``resolve_field`` turns into a field of
kind ``ARG`` (docs/decisions/0035-args-are-filterable.md).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from xmc.errors import InvalidArgumentError

MAX_FILTER_LENGTH = 2000
MAX_FILTER_DEPTH = 32
MAX_ORDER_BY_LENGTH = 1000
MAX_PAGE_TOKEN_LENGTH = 4096
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class FieldKind(enum.Enum):
    """How a field's values are written in a filter and compared in SQL."""

    STRING = "string"
    INT = "int"
    ENUM = "enum"
    TIMESTAMP = "timestamp"
    STRING_LIST = "string_list"
    BOOL = "bool"
    #: A map of text values (``jsonb``), named by its keys only: ``args.lr``.
    ARGS = "args"
    #: One key of an ``ARGS`` map: text, compared as a number against a number literal.
    ARG = "arg"
    #: A ``numeric`` sort column (the numeric reading of an ``ARG``); never a field itself.
    NUMBER = "number"


@dataclass(frozen=True)
class FieldSpec:
    """One filterable/sortable field of a resource.

    ``column`` is a SQL expression (``"w.state"``); ``enum`` names the IntEnum whose member
    names and numbers an ENUM field accepts. ``nullable`` must be set for columns that can
    be NULL so that paging past a NULL sort value stays correct.
    """

    column: str
    kind: FieldKind
    enum: type[enum.IntEnum] | None = None
    sortable: bool = True
    nullable: bool = False
    #: Sort only: a derived value (``runtime``) that a filter has no literal for.
    filterable: bool = True
    #: Larger values are older column values (``time_in_state`` is ``state_update_time``
    #: read backwards), so the column sorts the other way round.
    inverted: bool = False
    #: ``ARGS``: the ``jsonb`` column of the map's numeric readings (``{"lr": 0.01}``);
    #: ``ARG``: the SQL of its key's numeric reading (NULL when the value is no number).
    numbers: str = ""


#: Stands in a column's SQL for "now": the time a walk through the pages began, bound as a
#: parameter on every page and carried in the page token, so a value measured to it (a
#: running unit's runtime) stays put while the walk goes on.
AS_OF = "$as_of"

MAX_ARG_KEY_LENGTH = 64
_ARG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
"""The keys a filter or order_by may name: identifiers joined by dots. The key is spliced
into SQL as a string literal (so an index or plan can see it), which this character set
makes safe: it cannot hold a quote or a backslash."""


def is_arg_key(key: str) -> bool:
    """Whether a filter or order_by can name ``args.<key>``."""
    return len(key) <= MAX_ARG_KEY_LENGTH and _ARG_KEY.fullmatch(key) is not None


def resolve_field(
    name: str, fields: Mapping[str, FieldSpec], error: Callable[[str], InvalidArgumentError]
) -> FieldSpec | None:
    """The spec of ``name``: a catalogue entry, or ``map.key`` of an ``ARGS`` field (an
    ``ARG`` whose column reads that key); None when it names nothing. A key outside the
    safe character set is ``error(message)`` (the request field's prefix) naming it."""
    spec = fields.get(name)
    if spec is not None:
        return None if spec.kind is FieldKind.ARGS else spec
    prefix, dot, key = name.partition(".")
    parent = fields.get(prefix)
    if not dot or parent is None or parent.kind is not FieldKind.ARGS:
        return None
    if not is_arg_key(key):
        raise error(
            f"field '{name}': key {key!r} is not allowed; keys are letters, digits and '_' "
            f"(not leading with a digit) joined by '.', at most {MAX_ARG_KEY_LENGTH} characters"
        )
    return FieldSpec(
        f"({parent.column} ->> '{key}')",
        FieldKind.ARG,
        nullable=True,
        numbers=f"(({parent.numbers} ->> '{key}')::numeric)",
    )


def describe_fields(fields: Mapping[str, FieldSpec], *, sortable_only: bool = False) -> str:
    """The names a request may use, for error messages (``args.<key>`` for a map): the
    sortable ones with ``sortable_only``, else the filterable ones."""
    names = (
        f"{name}.<key>" if spec.kind is FieldKind.ARGS else name
        for name, spec in fields.items()
        if (spec.sortable if sortable_only else spec.filterable)
    )
    return ", ".join(sorted(names))
