"""The REST face's pure parts, as tables: path templates, route resolution over the ESS's
real rules, query parameters → request fields, request building, status mapping, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.api import annotations_pb2  # type: ignore[import-untyped]
from google.protobuf import (
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    field_mask_pb2,
    json_format,
    wrappers_pb2,
)
from google.rpc import error_details_pb2, status_pb2

from ui.http_rules import (
    HttpRoute,
    Matched,
    NoRoute,
    RuleError,
    Variable,
    WrongMethod,
    match_template,
    parse_template,
    path_prefixes,
    resolve,
    routes_from_service,
    rules_table,
    split_path,
)
from ui.rest import ESS_SERVICE, SERVICES, routes_of
from ui.transcode import (
    HTTP_STATUS,
    RequestError,
    bearer_metadata,
    build_request,
    details_json,
    error_body,
    http_status,
    query_json,
    response_json,
)
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ROUTES = routes_from_service(ESS_SERVICE)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "rest.md"


@pytest.mark.parametrize(
    ("text", "segments", "variables", "verb"),
    [
        ("/v1/experiments", ("v1", "experiments"), (), ""),
        ("/v1/experiments:search", ("v1", "experiments"), (), "search"),
        ("/v1/{name}", ("v1", "*"), (Variable("name", 1, 2),), ""),
        (
            "/v1/{name=experiments/*/workUnits/*}:stop",
            ("v1", "experiments", "*", "workUnits", "*"),
            (Variable("name", 1, 5),),
            "stop",
        ),
        (
            "/v1/{experiment.name=experiments/*}",
            ("v1", "experiments", "*"),
            (Variable("experiment.name", 1, 3),),
            "",
        ),
        ("/v1/*/x/**", ("v1", "*", "x", "**"), (), ""),
        (
            "/{a}/{b=c/**}",
            ("*", "c", "**"),
            (Variable("a", 0, 1), Variable("b", 1, 3)),
            "",
        ),
    ],
    ids=["literal", "verb", "bare-variable", "multi-segment", "nested-field", "wildcards", "deep"],
)
def test_parse_template(
    text: str, segments: tuple[str, ...], variables: tuple[Variable, ...], verb: str
) -> None:
    template = parse_template(text)
    assert (template.segments, template.variables, template.verb) == (segments, variables, verb)


@pytest.mark.parametrize(
    "text",
    [
        "v1/experiments",
        "/v1/{name",
        "/v1/name}",
        "/v1/{a={b}}",
        "/v1/{1name}",
        "/v1/{a..b}",
        "/v1//x",
        "/v1/**/x",
        "/v1/x:",
        "/v1/x:a/b",
        "/v1/{name=a=b}",
    ],
    ids=[
        "no-slash",
        "open-brace",
        "close-brace",
        "nested",
        "bad-ident",
        "empty-part",
        "empty-segment",
        "deep-not-last",
        "empty-verb",
        "verb-with-slash",
        "double-equals",
    ],
)
def test_parse_template_rejects(text: str) -> None:
    with pytest.raises(RuleError, match=r"^'"):
        parse_template(text)


@pytest.mark.parametrize(
    ("raw", "segments", "verb"),
    [
        ("/v1/experiments", ["v1", "experiments"], ""),
        ("/v1/experiments/7:stop", ["v1", "experiments", "7"], "stop"),
        ("/v1/experiments/7%3Astop", ["v1", "experiments", "7%3Astop"], ""),
        ("/v1/a:b:c", ["v1", "a:b"], "c"),
        ("/v1/", ["v1", ""], ""),
    ],
    ids=["plain", "verb", "encoded-colon", "last-colon", "trailing-slash"],
)
def test_split_path(raw: str, segments: list[str], verb: str) -> None:
    assert split_path(raw) == (segments, verb)


@pytest.mark.parametrize(
    ("template", "raw", "expected"),
    [
        ("/v1/{name=experiments/*}", "/v1/experiments/12", {"name": "experiments/12"}),
        ("/v1/{name=experiments/*}", "/v1/experiments/12/x", None),
        ("/v1/{name=experiments/*}", "/v1/experiments", None),
        ("/v1/{name=experiments/*}", "/v1/experiments/", None),
        ("/v1/{name=experiments/*}", "/v1/artifacts/12", None),
        ("/v1/{name=experiments/*}", "/v1/experiments/12:stop", None),
        ("/v1/{name=experiments/*}:stop", "/v1/experiments/12", None),
        ("/v1/{name=experiments/*}:stop", "/v1/experiments/12:stop", {"name": "experiments/12"}),
        ("/v1/{name=experiments/*}", "/v1/experiments/a%20b", {"name": "experiments/a b"}),
        ("/v1/{name=experiments/*}", "/v1/experiments/a%2Fb", {"name": "experiments/a%2Fb"}),
        ("/v1/{name}", "/v1/a%2Fb", {"name": "a/b"}),
        ("/v1/%65x/{name}", "/v1/%65x/1", None),
        ("/v1/ex/{name}", "/v1/%65x/1", {"name": "1"}),
        ("/v1/{path=files/**}", "/v1/files/a/b/c", {"path": "files/a/b/c"}),
        ("/v1/{path=files/**}", "/v1/files", {"path": "files"}),
        ("/v1/**", "/v1", {}),
    ],
    ids=[
        "match",
        "too-long",
        "too-short",
        "empty-segment",
        "other-literal",
        "unexpected-verb",
        "missing-verb",
        "verb",
        "decoded",
        "multi-segment-keeps-encoded-slash",
        "single-segment-decodes-slash",
        "template-literal-is-not-decoded",
        "request-literal-is-decoded",
        "deep",
        "deep-zero",
        "bare-deep-zero",
    ],
)
def test_match_template(template: str, raw: str, expected: dict[str, str] | None) -> None:
    segments, verb = split_path(raw)
    assert match_template(parse_template(template), segments, verb) == expected


@pytest.mark.parametrize(
    ("method", "path", "rpc", "bindings"),
    [
        ("POST", "/v1/experiments", "CreateExperiment", {}),
        ("GET", "/v1/experiments", "ListExperiments", {}),
        ("GET", "/v1/experiments:search", "SearchExperiments", {}),
        ("get", "/v1/experiments/5", "GetExperiment", {"name": "experiments/5"}),
        ("GET", "/v1/experiments/5/status", "GetExperimentStatus", {"name": "experiments/5"}),
        ("PATCH", "/v1/experiments/5", "UpdateExperiment", {"experiment.name": "experiments/5"}),
        ("POST", "/v1/experiments/5:updateLaunchState", "UpdateExperimentLaunchState", None),
        ("GET", "/v1/experiments/5/workUnits", "ListWorkUnits", {"parent": "experiments/5"}),
        ("GET", "/v1/experiments/5/workUnits:search", "SearchWorkUnits", None),
        ("POST", "/v1/experiments/5/workUnits:batchStop", "BatchStopWorkUnits", None),
        ("POST", "/v1/experiments/5/workUnits/2:stop", "StopWorkUnit", None),
        ("POST", "/v1/experiments/5/workUnits/2:restart", "RestartWorkUnit", None),
        ("GET", "/v1/experiments/5/workUnits/2/executions", "ListWorkUnitExecutions", None),
        (
            "GET",
            "/v1/experiments/5/workUnits/2/currentExecution",
            "GetCurrentWorkUnitExecution",
            None,
        ),
        ("PATCH", "/v1/experiments/5/workUnits/2", "UpdateWorkUnit", None),
        ("GET", "/v1/artifacts", "ListArtifacts", {}),
        ("GET", "/v1/experiments/5/workUnits/2/artifacts", "ListArtifacts", None),
        ("POST", "/v1/experiments/5/workUnits/2/artifacts", "CreateArtifact", None),
        ("DELETE", "/v1/artifacts/a1", "DeleteArtifact", {"name": "artifacts/a1"}),
        (
            "GET",
            "/v1/experiments/5/workUnits/2/statusMessages:search",
            "SearchStatusMessages",
            None,
        ),
    ],
)
def test_resolve_ess_routes(
    method: str, path: str, rpc: str, bindings: dict[str, str] | None
) -> None:
    outcome = resolve(ROUTES, method, path)
    assert isinstance(outcome, Matched), outcome
    assert outcome.route.rpc == rpc
    if bindings is not None:
        assert outcome.bindings == bindings


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/v1/experiments/5/workUnits/2:stop", WrongMethod(("POST",))),
        ("DELETE", "/v1/experiments/5", WrongMethod(("GET", "PATCH"))),
        ("PUT", "/v1/experiments", WrongMethod(("GET", "POST"))),
        ("GET", "/v1/experiments/5:stop", NoRoute()),
        ("GET", "/v1/nothing", NoRoute()),
        ("GET", "/v1/experiments/5/", NoRoute()),
        ("GET", "/v2/experiments", NoRoute()),
    ],
    ids=["verb-only-post", "get-or-patch", "collection", "unknown-verb", "unknown", "slash", "v2"],
)
def test_resolve_misses(method: str, path: str, expected: NoRoute | WrongMethod) -> None:
    assert resolve(ROUTES, method, path) == expected


def _sample_path(route: HttpRoute) -> str:
    parts = [{"*": "7", "**": "a/b"}.get(s, s) for s in route.template.segments]
    verb = f":{route.template.verb}" if route.template.verb else ""
    return "/" + "/".join(parts) + verb


MOUNTED = routes_of(SERVICES)


@pytest.mark.parametrize("route", MOUNTED, ids=[f"{r.rpc}:{r.template.text}" for r in MOUNTED])
def test_every_route_is_reachable(route: HttpRoute) -> None:
    """No earlier rule with the same method shadows a later one, across every mounted
    service (the timeline routes extend the published API's paths)."""
    outcome = resolve(MOUNTED, route.http_method, _sample_path(route))
    assert isinstance(outcome, Matched)
    assert outcome.route is route


def test_routes_cover_every_rpc() -> None:
    assert {r.rpc for r in ROUTES} == {m.name for m in ESS_SERVICE.methods}
    assert len(ROUTES) == 33
    assert path_prefixes(ROUTES) == ["/v1"]


def _service_with_rule(rule_text: dict[str, Any]) -> Any:
    """A throwaway service (its own pool) whose one method carries ``rule_text``."""
    file = descriptor_pb2.FileDescriptorProto(name="t/bad.proto", package="t", syntax="proto3")
    request = file.message_type.add(name="Req")
    request.field.add(name="name", number=1, type=9, label=1)
    request.field.add(name="tags", number=2, type=9, label=3)
    method = file.service.add(name="S").method.add(name="M", input_type=".t.Req")
    method.output_type = ".t.Req"
    json_format.ParseDict(rule_text, method.options.Extensions[annotations_pb2.http])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool.FindFileByName(file.name).services_by_name["S"]


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"get": "/v1/{nope=x/*}"}, "has no field nope"),
        ({"get": "/v1/{tags}"}, "tags is not a scalar"),
        ({"get": "/v1/{name.x}"}, "name is not a singular message"),
        ({"post": "/v1/x", "body": "nope"}, "has no field nope"),
        ({"get": "/v1/x", "responseBody": "nope"}, "has no field nope"),
        ({"get": "v1/x"}, "starts with '/'"),
        ({"body": "*"}, "without a pattern"),
    ],
    ids=[
        "unknown-path-field",
        "repeated-path-field",
        "through-scalar",
        "body",
        "response",
        "slash",
        "no-pattern",
    ],
)
def test_bad_rules_fail_at_startup(rule: dict[str, Any], fragment: str) -> None:
    with pytest.raises(RuleError, match=fragment):
        routes_from_service(_service_with_rule(rule))


def test_custom_verb_and_bindings() -> None:
    service = _service_with_rule(
        {
            "custom": {"kind": "HEAD", "path": "/v1/{name=x/*}"},
            "additionalBindings": [{"delete": "/v1/{name=y/*}"}],
        }
    )
    routes = routes_from_service(service)
    assert [(r.http_method, r.template.text, r.full_method) for r in routes] == [
        ("HEAD", "/v1/{name=x/*}", "/t.S/M"),
        ("DELETE", "/v1/{name=y/*}", "/t.S/M"),
    ]


LIST_WORK_UNITS = api_pb2.ListWorkUnitsRequest.DESCRIPTOR
UPDATE_WORK_UNIT = api_pb2.UpdateWorkUnitRequest.DESCRIPTOR


@pytest.mark.parametrize(
    ("descriptor", "pairs", "expected"),
    [
        (LIST_WORK_UNITS, [("pageSize", "5")], {"pageSize": "5"}),
        (
            LIST_WORK_UNITS,
            [("page_size", "5"), ("filter", "a=b")],
            {"pageSize": "5", "filter": "a=b"},
        ),
        (
            UPDATE_WORK_UNIT,
            [("workUnit.tags", "a"), ("work_unit.tags", "b")],
            None,
        ),
        (
            UPDATE_WORK_UNIT,
            [("workUnit.tags", "a"), ("workUnit.tags", "b")],
            {"workUnit": {"tags": ["a", "b"]}},
        ),
        (UPDATE_WORK_UNIT, [("updateMask", "tags,notes")], {"updateMask": "tags,notes"}),
        (UPDATE_WORK_UNIT, [("workUnit.priority.value", "3")], None),
        (
            UPDATE_WORK_UNIT,
            [("workUnit.notes", "x"), ("workUnit.name", "n")],
            {"workUnit": {"notes": "x", "name": "n"}},
        ),
        (LIST_WORK_UNITS, [], {}),
    ],
    ids=[
        "json-name",
        "proto-name",
        "two-spellings",
        "repeated",
        "field-mask",
        "deep",
        "siblings",
        "none",
    ],
)
def test_query_json(descriptor: Any, pairs: list[tuple[str, str]], expected: Any) -> None:
    if expected is None:
        with pytest.raises(RequestError):
            query_json(descriptor, pairs)
    else:
        assert query_json(descriptor, pairs) == expected


@pytest.mark.parametrize(
    ("pairs", "excluded", "fragment"),
    [
        ([("pageSise", "5")], (), "unknown query parameter pageSise"),
        ([("pageSize", "5"), ("pageSize", "6")], (), "given 2 times"),
        ([("parent", "experiments/1")], ("parent",), "parent is set by the path"),
        ([("filter.x", "1")], (), "filter has no subfields"),
    ],
    ids=["unknown", "twice", "path-bound", "through-scalar"],
)
def test_query_json_errors(
    pairs: list[tuple[str, str]], excluded: tuple[str, ...], fragment: str
) -> None:
    with pytest.raises(RequestError, match=fragment):
        query_json(LIST_WORK_UNITS, pairs, excluded)


def test_query_message_fields_and_bools() -> None:
    with pytest.raises(RequestError, match="set its subfields"):
        query_json(UPDATE_WORK_UNIT, [("workUnit", "x")])
    with pytest.raises(RequestError, match="jobs is a list of messages; use a JSON body"):
        query_json(UPDATE_WORK_UNIT, [("workUnit.executable.jobset.jobs.name", "x")])
    with pytest.raises(RequestError, match="labels is a map; use a JSON body"):
        query_json(UPDATE_WORK_UNIT, [("workUnit.executable.jobset.labels", "x")])
    with pytest.raises(RequestError, match="work_unit is set by the path or body"):
        query_json(UPDATE_WORK_UNIT, [("workUnit.notes", "x")], ["work_unit"])
    with pytest.raises(RequestError, match=r"work_unit\.name is set"):
        query_json(UPDATE_WORK_UNIT, [("workUnit.name", "x")], ["work_unit.name"])
    # A bool field parses true/false/1/0 and refuses the rest.
    # No request type has a bool field: BoolValue's own `value` stands in.
    bool_value = wrappers_pb2.BoolValue.DESCRIPTOR
    assert query_json(bool_value, [("value", "TRUE")]) == {"value": True}
    assert query_json(bool_value, [("value", "0")]) == {"value": False}
    with pytest.raises(RequestError, match="not true or false"):
        query_json(bool_value, [("value", "yes")])


def _route(method: str, path: str) -> Matched:
    outcome = resolve(ROUTES, method, path)
    assert isinstance(outcome, Matched)
    return outcome


def test_build_request_layers() -> None:
    matched = _route("PATCH", "/v1/experiments/5")
    request = build_request(
        matched.route,
        matched.bindings,
        {"name": "experiments/999", "title": "t", "tags": ["a"]},
        [("updateMask", "title,tags")],
    )
    assert request == api_pb2.UpdateExperimentRequest(
        experiment=Experiment(name="experiments/5", title="t", tags=["a"]),
        update_mask=field_mask_pb2.FieldMask(paths=["title", "tags"]),
    )
    matched = _route("POST", "/v1/experiments/5/workUnits")
    request = build_request(matched.route, matched.bindings, None, [("workUnitId", "4")])
    assert request == api_pb2.CreateWorkUnitRequest(parent="experiments/5", work_unit_id=4)
    matched = _route("POST", "/v1/experiments/5/workUnits/2:stop")
    request = build_request(matched.route, matched.bindings, {}, [])
    assert request == api_pb2.StopWorkUnitRequest(name="experiments/5/workUnits/2")


@pytest.mark.parametrize(
    ("method", "path", "payload", "query", "error", "fragment"),
    [
        ("POST", "/v1/experiments", {"titel": "x"}, [], json_format.ParseError, "titel"),
        ("POST", "/v1/experiments", {"title": 5}, [], json_format.ParseError, "title"),
        ("POST", "/v1/experiments/1/workUnits/2:stop", [], [], RequestError, "JSON object"),
        ("POST", "/v1/experiments/1/workUnits/2:stop", {}, [("a", "b")], RequestError, "takes no"),
        (
            "GET",
            "/v1/experiments",
            None,
            [("pageSize", "five")],
            json_format.ParseError,
            "pageSize",
        ),
        ("GET", "/v1/experiments", None, [("orderBy", "a"), ("nope", "1")], RequestError, "nope"),
        (
            "POST",
            "/v1/experiments/1:updateLaunchState",
            {"launchState": "SOMEDAY"},
            [],
            json_format.ParseError,
            "launchState",
        ),
    ],
    ids=[
        "unknown-body-field",
        "wrong-type",
        "body-not-object",
        "query-with-star-body",
        "bad-int",
        "unknown-param",
        "bad-enum",
    ],
)
def test_build_request_errors(
    method: str,
    path: str,
    payload: Any,
    query: list[tuple[str, str]],
    error: type[Exception],
    fragment: str,
) -> None:
    matched = _route(method, path)
    with pytest.raises(error, match=fragment):
        build_request(matched.route, matched.bindings, payload, query)


def test_response_json_is_lower_camel_case() -> None:
    matched = _route("GET", "/v1/experiments/5/workUnits")
    response = api_pb2.ListWorkUnitsResponse(next_page_token="t")
    assert response_json(matched.route, response) == {"nextPageToken": "t"}


@pytest.mark.parametrize(
    ("code", "http"),
    [
        (grpc.StatusCode.OK, 200),
        (grpc.StatusCode.INVALID_ARGUMENT, 400),
        (grpc.StatusCode.FAILED_PRECONDITION, 400),
        (grpc.StatusCode.OUT_OF_RANGE, 400),
        (grpc.StatusCode.UNAUTHENTICATED, 401),
        (grpc.StatusCode.PERMISSION_DENIED, 403),
        (grpc.StatusCode.NOT_FOUND, 404),
        (grpc.StatusCode.ALREADY_EXISTS, 409),
        (grpc.StatusCode.ABORTED, 409),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (grpc.StatusCode.CANCELLED, 499),
        (grpc.StatusCode.UNIMPLEMENTED, 501),
        (grpc.StatusCode.UNAVAILABLE, 503),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
        (grpc.StatusCode.INTERNAL, 500),
        (grpc.StatusCode.UNKNOWN, 500),
        (grpc.StatusCode.DATA_LOSS, 500),
    ],
    ids=lambda value: value.name if isinstance(value, grpc.StatusCode) else str(value),
)
def test_http_status(code: grpc.StatusCode, http: int) -> None:
    assert http_status(code) == http


def test_every_status_code_is_mapped() -> None:
    assert set(HTTP_STATUS) == set(grpc.StatusCode)


def test_error_body_and_details() -> None:
    known = any_pb2.Any()
    known.Pack(
        error_details_pb2.BadRequest(field_violations=[{"field": "filter", "description": "bad"}])
    )
    unknown = any_pb2.Any(type_url="type.googleapis.com/x.Unknown", value=b"\x08\x01")
    blob = status_pb2.Status(code=3, message="m", details=[known, unknown]).SerializeToString()
    details = details_json(blob)
    assert details == [
        {
            "@type": "type.googleapis.com/google.rpc.BadRequest",
            "fieldViolations": [{"field": "filter", "description": "bad"}],
        },
        {"@type": "type.googleapis.com/x.Unknown"},
    ]
    assert details_json(None) == []
    assert details_json(b"\xff\xff") == []
    assert error_body(404, "NOT_FOUND", "gone", details) == {
        "error": {"code": 404, "message": "gone", "status": "NOT_FOUND", "details": details}
    }


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, ()),
        ("", ()),
        ("Bearer abc", (("authorization", "Bearer abc"),)),
        ("bearer  abc ", (("authorization", "Bearer abc"),)),
        ("Basic dXNlcjpwdw==", ()),
        ("Bearer", ()),
        ("Bearer ", ()),
    ],
    ids=["absent", "empty", "bearer", "lowercase", "basic", "no-token", "blank-token"],
)
def test_bearer_metadata(header: str | None, expected: tuple[tuple[str, str], ...]) -> None:
    assert bearer_metadata(header) == expected


def test_docs_route_table_is_current() -> None:
    """docs/rest.md embeds ``rules_table`` between its markers (``python -m ui.rest``
    prints it)."""
    text = DOCS.read_text(encoding="utf-8")
    begin, end = "<!-- routes:begin -->\n", "<!-- routes:end -->"
    assert begin in text, f"{DOCS} lacks the route table markers"
    assert end in text, f"{DOCS} lacks the route table markers"
    embedded = text.split(begin, 1)[1].split(end, 1)[0]
    assert embedded == rules_table(MOUNTED)
