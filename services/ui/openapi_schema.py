"""JSON Schemas (OpenAPI 3.1, JSON Schema 2020-12) of protobuf messages in the proto3 JSON
mapping, as the REST face writes them (``ui.transcode.response_json``: ``json_format.
MessageToDict``) and reads them (``build_request``).

Why schemas of what is *written*: a client of the REST face reads answers far more than it
writes requests, and the transcoder's reading is a superset of its writing (it also takes
``snake_case`` names, enum numbers, int64 as a JSON number, ``null``), so the written form
describes both without letting a client send what would be refused. What the schemas say:

- names are the fields' ``json_name`` (lowerCamelCase); no field is ``required`` and none
  is listed when at its default (an empty list is ``{}``); unknown names are refused
  (``additionalProperties: false``, as ``ignore_unknown_fields=False`` refuses them);
- 64-bit integers are decimal strings, 32-bit ones JSON integers; ``double`` and ``float``
  are numbers or ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``; ``bytes`` is base64;
- an enum is one of its value names (a component of its own);
- the well-known types have their special forms (:data:`WELL_KNOWN`): ``Timestamp`` an RFC
  3339 string, ``Duration`` ``"1.5s"``, ``FieldMask`` ``"a,b.c"``, a wrapper its value,
  ``Any`` an object with ``@type``;
- a message is a ``$ref`` to a component named by its full name, so recursive messages
  are described without unrolling; a map is an object of its values; a oneof's members are
  plain fields, at most one of them set (said in the description and enforced with
  ``not``).

Pure: descriptors in, dicts out.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

Schema = dict[str, Any]

#: Where components live; a ``$ref`` is this plus the message's or enum's full name.
REF_PREFIX: Final = "#/components/schemas/"

_INT64: Final[Schema] = {"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"}
_UINT64: Final[Schema] = {"type": "string", "format": "uint64", "pattern": "^[0-9]+$"}
_INT32: Final[Schema] = {
    "type": "integer",
    "format": "int32",
    "minimum": -(2**31),
    "maximum": 2**31 - 1,
}
_UINT32: Final[Schema] = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
_BYTES: Final[Schema] = {"type": "string", "contentEncoding": "base64"}


def _floating(fmt: str) -> Schema:
    """``json_format`` writes a non-finite double as one of these strings."""
    return {
        "anyOf": [
            {"type": "number", "format": fmt},
            {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]},
        ]
    }


#: Every scalar field type → its schema in the proto3 JSON mapping.
SCALARS: Final[dict[int, Schema]] = {
    FieldDescriptor.TYPE_DOUBLE: _floating("double"),
    FieldDescriptor.TYPE_FLOAT: _floating("float"),
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT64: _UINT64,
    FieldDescriptor.TYPE_FIXED64: _UINT64,
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_UINT32: _UINT32,
    FieldDescriptor.TYPE_FIXED32: _UINT32,
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: _BYTES,
}

_WRAPPED: Final = {
    "DoubleValue": FieldDescriptor.TYPE_DOUBLE,
    "FloatValue": FieldDescriptor.TYPE_FLOAT,
    "Int64Value": FieldDescriptor.TYPE_INT64,
    "UInt64Value": FieldDescriptor.TYPE_UINT64,
    "Int32Value": FieldDescriptor.TYPE_INT32,
    "UInt32Value": FieldDescriptor.TYPE_UINT32,
    "BoolValue": FieldDescriptor.TYPE_BOOL,
    "StringValue": FieldDescriptor.TYPE_STRING,
    "BytesValue": FieldDescriptor.TYPE_BYTES,
}

#: The well-known types whose JSON form is not an object of their fields.
WELL_KNOWN: Final[dict[str, Schema]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {
        "type": "string",
        "pattern": "^-?[0-9]+(\\.[0-9]{1,9})?s$",
        "description": "Seconds with an `s` suffix, e.g. `90s` or `1.500s`.",
    },
    "google.protobuf.FieldMask": {
        "type": "string",
        "description": "Comma-separated lowerCamelCase field paths, e.g. `title,notes`.",
    },
    "google.protobuf.Any": {
        "type": "object",
        "required": ["@type"],
        "properties": {"@type": {"type": "string"}},
        "additionalProperties": True,
        "description": "A message of the type `@type` names, its fields beside `@type`.",
    },
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.NullValue": {"type": "null"},
    **{f"google.protobuf.{name}": SCALARS[kind] for name, kind in _WRAPPED.items()},
}


def ref(full_name: str) -> Schema:
    return {"$ref": f"{REF_PREFIX}{full_name}"}


def enum_schema(enum: EnumDescriptor) -> Schema:
    return {"type": "string", "enum": [value.name for value in enum.values]}


def _map_key(fd: FieldDescriptor) -> Schema | None:
    """Map keys are JSON object keys, so strings; an integer or bool key's string form."""
    if fd.type == FieldDescriptor.TYPE_STRING:
        return None
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return {"enum": ["true", "false"]}
    return {"pattern": "^-?[0-9]+$"}


def oneof_groups(descriptor: Descriptor) -> list[list[str]]:
    """The JSON names of each real oneof's members (proto3 ``optional`` makes a synthetic
    oneof of one field, which constrains nothing)."""
    groups = [[fd.json_name for fd in oneof.fields] for oneof in descriptor.oneofs]
    return [group for group in groups if len(group) > 1]


class SchemaSet:
    """The components every schema of a document refers to, filled on demand: asking for
    a message's schema adds it (and what it refers to) once, so a recursive message is a
    ``$ref`` to itself."""

    def __init__(self) -> None:
        self.components: dict[str, Schema] = {}

    def field(self, fd: FieldDescriptor) -> Schema:
        """One field's schema, repetition and maps included."""
        entry = fd.message_type
        if entry is not None and entry.GetOptions().map_entry:
            key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
            schema: Schema = {"type": "object", "additionalProperties": self.single(value)}
            names = _map_key(key)
            if names is not None:
                schema["propertyNames"] = names
            return schema
        if fd.is_repeated:
            return {"type": "array", "items": self.single(fd)}
        return self.single(fd)

    def single(self, fd: FieldDescriptor) -> Schema:
        """One value of the field (an element, for a repeated one)."""
        if fd.message_type is not None:
            return self.message(fd.message_type)
        if fd.enum_type is not None:
            return self.enum(fd.enum_type)
        return dict(SCALARS[fd.type])

    def enum(self, enum: EnumDescriptor) -> Schema:
        if enum.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[enum.full_name])
        if enum.full_name not in self.components:
            self.components[enum.full_name] = enum_schema(enum)
        return ref(enum.full_name)

    def message(self, descriptor: Descriptor) -> Schema:
        """A ``$ref`` to the message's component (a well-known type: its schema inline)."""
        if descriptor.full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[descriptor.full_name])
        if descriptor.full_name not in self.components:
            self.components[descriptor.full_name] = {}  # taken before recursing
            self.components[descriptor.full_name] = self.object(descriptor)
        return ref(descriptor.full_name)

    def object(self, descriptor: Descriptor, *, without: frozenset[str] = frozenset()) -> Schema:
        """The message as an object schema, leaving out the fields (proto names) in
        ``without``: those the path sets, for a ``body: "*"`` request."""
        fields = [fd for fd in descriptor.fields if fd.name not in without]
        schema: Schema = {
            "type": "object",
            "properties": {fd.json_name: self.field(fd) for fd in fields},
            "additionalProperties": False,
        }
        present = {fd.json_name for fd in fields}
        groups = [[name for name in group if name in present] for group in oneof_groups(descriptor)]
        groups = [group for group in groups if len(group) > 1]
        if groups:
            schema["description"] = " ".join(
                f"At most one of {', '.join(f'`{name}`' for name in group)}." for group in groups
            )
            schema["not"] = {
                "anyOf": [
                    {"required": list(pair)} for group in groups for pair in combinations(group, 2)
                ]
            }
        return schema
