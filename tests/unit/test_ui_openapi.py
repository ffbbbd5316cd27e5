"""The OpenAPI document of the REST face (``ui.openapi``, ``ui.openapi_schema``): path
templates → OpenAPI paths, query parameters, bodies, answers, as tables over a test proto
that has every kind of field; the JSON ``json_format`` writes validated against the schemas
the generator gives; and the checked-in ``docs/openapi.json`` kept current."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    json_format,
    message_factory,
    text_format,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, ServiceDescriptor
from google.protobuf.message import Message

from ui.http_rules import parse_template
from ui.openapi import (
    error_statuses,
    openapi_document,
    path_parameters,
    query_fields,
    render,
    segment_description,
    singular,
)
from ui.openapi_schema import REF_PREFIX, SchemaSet
from ui.rest import SERVICES
from ui.transcode import error_body

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"

#: Node's fields: (name, type, message or enum type, repeated, more options), numbered in order.
NODE_FIELDS: list[tuple[str, str, str, bool, str]] = [
    ("name", "STRING", "", False, ""),
    ("big", "INT64", "", False, ""),
    ("ubig", "UINT64", "", False, ""),
    ("small", "INT32", "", False, ""),
    ("ratio", "DOUBLE", "", False, ""),
    ("on", "BOOL", "", False, ""),
    ("blob", "BYTES", "", False, ""),
    ("color", "ENUM", ".t.Color", False, ""),
    ("page_tags", "STRING", "", True, ""),
    ("labels", "MESSAGE", ".t.Node.LabelsEntry", True, ""),
    ("by_id", "MESSAGE", ".t.Node.ByIdEntry", True, ""),
    ("at", "MESSAGE", ".google.protobuf.Timestamp", False, ""),
    ("took", "MESSAGE", ".google.protobuf.Duration", False, ""),
    ("maybe", "MESSAGE", ".google.protobuf.Int64Value", False, ""),
    ("extra", "MESSAGE", ".google.protobuf.Any", False, ""),
    ("parent", "MESSAGE", ".t.Node", False, ""),
    ("kids", "MESSAGE", ".t.Node", True, ""),
    ("text", "STRING", "", False, "oneof_index: 0"),
    ("count", "INT32", "", False, "oneof_index: 0"),
    ("kept", "BOOL", "", False, "oneof_index: 1 proto3_optional: true"),
]


def _fields_text(fields: list[tuple[str, str, str, bool, str]]) -> str:
    return "\n".join(
        f'  field {{ name: "{name}" number: {number} type: TYPE_{kind}'
        + (f' type_name: "{type_name}"' if type_name else "")
        + f" label: LABEL_{'REPEATED' if repeated else 'OPTIONAL'} {more} }}"
        for number, (name, kind, type_name, repeated, more) in enumerate(fields, 1)
    )


#: A service with every kind of field and rule the generator must describe.
TEST_PROTO = """
name: "openapi_test.proto" package: "t" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto" dependency: "google/protobuf/duration.proto"
dependency: "google/protobuf/wrappers.proto" dependency: "google/protobuf/any.proto"
message_type {
  name: "Node"
%(node_fields)s
  oneof_decl { name: "value" } oneof_decl { name: "_kept" }
  nested_type {
    name: "LabelsEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL }
    field { name: "value" number: 2 type: TYPE_INT64 label: LABEL_OPTIONAL }
  }
  nested_type {
    name: "ByIdEntry" options { map_entry: true }
    field { name: "key" number: 1 type: TYPE_INT32 label: LABEL_OPTIONAL }
    field { name: "value" number: 2 type: TYPE_MESSAGE type_name: ".t.Node" label: LABEL_OPTIONAL }
  }
}
message_type {
  name: "UpdateNodeRequest"
  field { name: "node" number: 1 type: TYPE_MESSAGE type_name: ".t.Node" label: LABEL_OPTIONAL }
  field { name: "validate_only" number: 2 type: TYPE_BOOL label: LABEL_OPTIONAL }
}
message_type {
  name: "Answer"
  field { name: "node" number: 1 type: TYPE_MESSAGE type_name: ".t.Node" label: LABEL_OPTIONAL }
}
enum_type { name: "Color" value { name: "COLOR_UNSPECIFIED" number: 0 }
            value { name: "RED" number: 1 } }
service {
  name: "Nodes"
  method { name: "GetNode" input_type: ".t.Node" output_type: ".t.Node"
    options { [google.api.http] { get: "/v1/{name=trees/*/nodes/*}"
      additional_bindings { get: "/v1/{name=nodes/*}" } } } }
  method { name: "MoveNode" input_type: ".t.Node" output_type: ".t.Answer"
    options { [google.api.http] { post: "/v1/{name=trees/*/nodes/*}:move" body: "*"
      response_body: "node" } } }
  method { name: "UpdateNode" input_type: ".t.UpdateNodeRequest" output_type: ".t.Node"
    options { [google.api.http] { patch: "/v1/{node.name=trees/*/nodes/*}" body: "node" } } }
  method { name: "WatchNode" input_type: ".t.Node" output_type: ".t.Node" server_streaming: true
    options { [google.api.http] { get: "/v1/{name=trees/*/nodes/*}:watch" } } }
}
"""


def _test_service() -> ServiceDescriptor:
    pool = descriptor_pool.DescriptorPool()
    for module in (timestamp_pb2, duration_pb2, wrappers_pb2, any_pb2):
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        pool.Add(file)
    text = TEST_PROTO % {"node_fields": _fields_text(NODE_FIELDS)}
    pool.Add(text_format.Parse(text, descriptor_pb2.FileDescriptorProto()))
    service: ServiceDescriptor = pool.FindServiceByName("t.Nodes")
    return service


SERVICE = _test_service()
NODE: Descriptor = SERVICE.methods_by_name["GetNode"].input_type
DOC = openapi_document([SERVICE])


@pytest.mark.parametrize(
    ("template", "path", "params"),
    [
        ("/v1/{name=experiments/*}", "/v1/experiments/{experiment}", [("experiment", "name", 2)]),
        (
            "/v1/{name=experiments/*/workUnits/*}:stop",
            "/v1/experiments/{experiment}/workUnits/{workUnit}:stop",
            [("experiment", "name", 2), ("workUnit", "name", 4)],
        ),
        (
            "/v1/{parent=experiments/*}/workUnits:batchStop",
            "/v1/experiments/{experiment}/workUnits:batchStop",
            [("experiment", "parent", 2)],
        ),
        ("/v1/{name}", "/v1/{name}", [("name", "name", 1)]),
        (
            "/v1/{experiment.name}",
            "/v1/{experiment_name}",
            [("experiment_name", "experiment.name", 1)],
        ),
        ("/v1/a/*/b", "/v1/a/{a}/b", [("a", "", 2)]),
        (
            "/v1/{name=dirs/*/dirs/*}",
            "/v1/dirs/{dir}/dirs/{dir2}",
            [("dir", "name", 2), ("dir2", "name", 4)],
        ),
        ("/v1/{name=files/**}", "/v1/files/{file}", [("file", "name", 2)]),
        ("/v1/experiments:search", "/v1/experiments:search", []),
        ("/v1/*/*", "/v1/{v1}/{segment}", [("v1", "", 1), ("segment", "", 2)]),
        ("/v1/{a.b=x/*/*}", "/v1/x/{x}/{a_b}", [("x", "a.b", 2), ("a_b", "a.b", 3)]),
        (
            "/{a.b}/{a.b2=*}/{c=a_b/*}",
            "/{a_b}/{a_b2}/a_b/{a_b3}",
            [("a_b", "a.b", 0), ("a_b2", "a.b2", 1), ("a_b3", "c", 3)],
        ),
    ],
)
def test_path_parameters(template: str, path: str, params: list[tuple[str, str, int]]) -> None:
    assert path_parameters(parse_template(template)) == (path, params)


@pytest.mark.parametrize(
    ("segment", "field", "start"),
    [
        ("*", "name", "One segment of `name`, percent-encoded: `/` and `:` too"),
        ("*", "", "Any one segment, percent-encoded"),
        ("**", "name", "The rest of the path, one or more segments, the end of `name`."),
    ],
)
def test_segment_description(segment: str, field: str, start: str) -> None:
    assert segment_description(segment, field).startswith(start)


@pytest.mark.parametrize(
    ("literal", "name"),
    [("experiments", "experiment"), ("workUnits", "workUnit"), ("s", "s"), ("data", "data")],
)
def test_singular(literal: str, name: str) -> None:
    assert singular(literal) == name


def _names(excluded: list[str]) -> list[str]:
    return [".".join(fd.json_name for fd in path) for path in query_fields(NODE, excluded)]


def test_query_fields_are_the_scalars_the_path_and_body_leave() -> None:
    names = _names(["name"])
    # Scalars, repeated scalars and scalar-like well-known types, nested through singular
    # messages; maps, repeated messages, Any and the recursion back into Node are not.
    assert names == [
        "big", "ubig", "small", "ratio", "on", "blob", "color", "pageTags", "at", "took",
        "maybe", "text", "count", "kept",
    ]  # fmt: skip
    update = SERVICE.methods_by_name["UpdateNode"].input_type
    got = [".".join(f.json_name for f in p) for p in query_fields(update, ["node.name"])]
    assert got[:3] == ["node.big", "node.ubig", "node.small"]
    assert "node.name" not in got
    assert [".".join(f.json_name for f in p) for p in query_fields(update, ["node"])] == [
        "validateOnly"
    ]


@pytest.mark.parametrize(
    ("field", "schema"),
    [
        ("big", {"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"}),
        ("ubig", {"type": "string", "format": "uint64", "pattern": "^[0-9]+$"}),
        (
            "small",
            {"type": "integer", "format": "int32", "minimum": -(2**31), "maximum": 2**31 - 1},
        ),
        ("on", {"type": "boolean"}),
        ("blob", {"type": "string", "contentEncoding": "base64"}),
        ("color", {"$ref": f"{REF_PREFIX}t.Color"}),
        ("page_tags", {"type": "array", "items": {"type": "string"}}),
        ("at", {"type": "string", "format": "date-time"}),
        ("maybe", {"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"}),
        ("parent", {"$ref": f"{REF_PREFIX}t.Node"}),
        ("kids", {"type": "array", "items": {"$ref": f"{REF_PREFIX}t.Node"}}),
        (
            "labels",
            {
                "type": "object",
                "additionalProperties": {
                    "type": "string",
                    "format": "int64",
                    "pattern": "^-?[0-9]+$",
                },
            },
        ),
        (
            "by_id",
            {
                "type": "object",
                "additionalProperties": {"$ref": f"{REF_PREFIX}t.Node"},
                "propertyNames": {"pattern": "^-?[0-9]+$"},
            },
        ),
    ],
)
def test_field_schemas(field: str, schema: dict[str, Any]) -> None:
    assert SchemaSet().field(NODE.fields_by_name[field]) == schema


def test_message_schema_names_oneofs_and_recursion() -> None:
    schemas = SchemaSet()
    assert schemas.message(NODE) == {"$ref": f"{REF_PREFIX}t.Node"}
    node = schemas.components["t.Node"]
    assert node["additionalProperties"] is False
    assert "pageTags" in node["properties"]
    assert "page_tags" not in node["properties"]
    assert node["not"] == {"anyOf": [{"required": ["text", "count"]}]}  # not `kept` alone
    assert schemas.components["t.Color"] == {"type": "string", "enum": ["COLOR_UNSPECIFIED", "RED"]}


def _validator(schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator:
    components = {**DOC["components"]}
    return jsonschema_rs.Draft202012Validator({**schema, "components": components})


def _node(**fields: Any) -> Message:
    cls = message_factory.GetMessageClass(NODE)
    return cls(**fields)


def _written(message: Message) -> Any:
    return json_format.MessageToDict(message, descriptor_pool=NODE.file.pool)


def test_what_json_format_writes_fits_the_schema() -> None:
    child = _node(name="kid", big=-(2**63), color=1)
    node = _node(
        name="n", big=2**62, ubig=2**64 - 1, small=-7, ratio=math.nan, on=True, blob=b"\x00\xff",
        page_tags=["a", "b"], labels={"x": 3}, by_id={4: child}, kids=[child], parent=child,
        text="t", kept=False,
    )  # fmt: skip
    later = {
        "at": "2026-12-02T10:00:00.5Z",
        "took": "1.500s",
        "maybe": "9",
        "extra": {
            "@type": "type.googleapis.com/google.protobuf.Timestamp",
            "value": "1970-01-01T00:00:05Z",
        },
    }
    json_format.ParseDict(later, node, descriptor_pool=NODE.file.pool)
    written = _written(node)
    assert written["big"] == str(2**62)
    assert written["ratio"] == "NaN"
    validator = _validator({"$ref": f"{REF_PREFIX}t.Node"})
    assert validator.is_valid(written), list(validator.iter_errors(written))
    assert validator.is_valid({})  # every field at its default: left out
    for wrong in ({"big": 5}, {"color": "BLUE"}, {"text": "a", "count": 1}, {"bogus": 1}):
        assert not validator.is_valid(wrong), wrong


def _operation(path: str, method: str) -> dict[str, Any]:
    operation: dict[str, Any] = DOC["paths"][path][method]
    return operation


def test_operations_of_the_test_service() -> None:
    assert list(DOC["paths"]) == [
        "/v1/trees/{tree}/nodes/{node}",
        "/v1/nodes/{node}",
        "/v1/trees/{tree}/nodes/{node}:move",
        "/v1/trees/{tree}/nodes/{node}:watch",
    ]
    get = _operation("/v1/trees/{tree}/nodes/{node}", "get")
    assert get["operationId"] == "Nodes.GetNode"
    assert _operation("/v1/nodes/{node}", "get")["operationId"] == "Nodes.GetNode_2"
    assert "`name` is `trees/{tree}/nodes/{node}`" in get["description"]
    assert [p["name"] for p in get["parameters"] if p["in"] == "path"] == ["tree", "node"]
    assert "requestBody" not in get
    assert "415" not in get["responses"]
    assert "413" in get["responses"]

    move = _operation("/v1/trees/{tree}/nodes/{node}:move", "post")
    body = move["requestBody"]["content"]["application/json"]["schema"]
    assert "name" not in body["properties"]
    assert "big" in body["properties"]
    assert [p["in"] for p in move["parameters"]] == ["path", "path"]  # body "*": no query
    answer = move["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": f"{REF_PREFIX}t.Node"}  # response_body: "node"
    assert "415" in move["responses"]

    patch = _operation("/v1/trees/{tree}/nodes/{node}", "patch")
    assert patch["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": f"{REF_PREFIX}t.Node"
    }
    assert [p["name"] for p in patch["parameters"] if p["in"] == "query"] == ["validateOnly"]

    watch = _operation("/v1/trees/{tree}/nodes/{node}:watch", "get")
    line = watch["responses"]["200"]["content"]["application/x-ndjson"]["schema"]
    validator = _validator(line)
    assert validator.is_valid({"result": {"name": "n"}})
    assert validator.is_valid(error_body(503, "UNAVAILABLE", "the ESS went away"))
    assert not validator.is_valid({"result": {"bogus": 1}})


@pytest.mark.parametrize(
    ("http", "status"),
    [(400, "INVALID_ARGUMENT"), (404, "NOT_FOUND"), (413, "OUT_OF_RANGE"), (503, "UNAVAILABLE")],
)
def test_error_body_fits_the_error_schema(http: int, status: str) -> None:
    body = error_body(http, status, "name: bad", [{"@type": "type.googleapis.com/x.Y", "a": 1}])
    validator = _validator({"$ref": f"{REF_PREFIX}Error"})
    assert validator.is_valid(body), list(validator.iter_errors(body))
    assert not validator.is_valid({"error": {"code": http}})


def test_every_error_status_the_transcoder_maps_is_documented() -> None:
    assert set(error_statuses()) == {400, 401, 403, 404, 409, 429, 499, 500, 501, 503, 504}
    responses = openapi_document(SERVICES)["components"]["responses"]
    assert set(responses) == {str(h) for h in error_statuses()} | {"413", "415"}


def test_checked_in_document_is_current() -> None:
    """docs/openapi.json is what xmc-ui serves; `make openapi` rewrites it."""
    assert DOCUMENT.read_text() == render(openapi_document(SERVICES)), "run `make openapi`"
    assert json.loads(DOCUMENT.read_text())["openapi"] == "3.1.0"
