"""The field catalogue a resource exposes to List/Search, and the request size limits.

A resource's ``Mapping[str, FieldSpec]`` says which names a filter or order_by may use and
how each one's values are written and compared; every other module of the package reads it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
