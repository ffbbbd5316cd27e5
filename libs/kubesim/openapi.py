"""Minimal OpenAPI documents, generated from the resource table — pure.

kubectl (1.27+) validates ``create``/``apply`` on the server when the server's OpenAPI v3
says it can: ``/openapi/v3`` lists one document per group version, and a PATCH operation
tagged with the kind's ``x-kubernetes-group-version-kind`` that takes the
``fieldValidation`` query parameter tells kubectl to send ``fieldValidation=Strict``
instead of validating itself (kubectl ``pkg/cmd/util/factory_client_access.go``
``Validator``, cli-runtime ``resource/query_param_verifier_v3.go``). ``kubectl apply``
reads the PATCH request body's content types to choose strategic merge patch (built-in
types) or JSON merge patch (custom resources) (``pkg/cmd/apply/patcher.go``). Older
kubectl fetch ``/openapi/v2`` as protobuf and skip validation of kinds it does not
describe, so that answer is an empty, well-formed document. No object schemas are served:
kubesim validates no object contents.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubesim.resources import RESOURCES, Resource

Obj = dict[str, Any]

PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
_BUILT_IN_GROUPS = frozenset({"", "batch", "coordination.k8s.io"})
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)
_STRATEGIC = "application/strategic-merge-patch+json"


def _root_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _query(name: str, description: str) -> Obj:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }


_WRITE_PARAMETERS = [
    _query("dryRun", "When present, modifications are not persisted (All)."),
    _query("fieldManager", "The name of the actor making the change."),
    _query("fieldValidation", "Ignore, Warn or Strict handling of unknown fields."),
]


def _operation(resource: Resource, version: str, action: str, verb_id: str) -> Obj:
    kind = resource.kind
    return {
        "operationId": f"{verb_id}{kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource.group,
            "version": version,
            "kind": kind,
        },
        "responses": {"200": {"description": "OK"}},
    }


def _with_body(operation: Obj, content_types: tuple[str, ...]) -> Obj:
    return {
        **operation,
        "parameters": _WRITE_PARAMETERS,
        "requestBody": {"content": {t: {"schema": {"type": "object"}} for t in content_types}},
    }


def _paths(resource: Resource, version: str) -> dict[str, Obj]:
    prefix = "/" + _root_path(resource.group, version)
    scoped = f"{prefix}/namespaces/{{namespace}}" if resource.namespaced else prefix
    collection = f"{scoped}/{resource.plural}"
    item = f"{collection}/{{name}}"
    patch_types = _PATCH_TYPES + ((_STRATEGIC,) if resource.group in _BUILT_IN_GROUPS else ())
    json_type = ("application/json",)
    op = _operation
    paths: dict[str, Obj] = {
        collection: {
            "get": op(resource, version, "list", "list"),
            "post": _with_body(op(resource, version, "post", "create"), json_type),
            "delete": op(resource, version, "deletecollection", "deleteCollection"),
        },
        item: {
            "get": op(resource, version, "get", "read"),
            "put": _with_body(op(resource, version, "put", "replace"), json_type),
            "patch": _with_body(op(resource, version, "patch", "patch"), patch_types),
            "delete": op(resource, version, "delete", "delete"),
        },
    }
    if resource.status_subresource:
        paths[f"{item}/status"] = {
            "get": op(resource, version, "get", "readStatus"),
            "put": _with_body(op(resource, version, "put", "replaceStatus"), json_type),
            "patch": _with_body(op(resource, version, "patch", "patchStatus"), patch_types),
        }
    if resource.log_subresource:
        read_log = op(resource, version, "get", "readLog")
        read_log["responses"] = {"200": {"content": {"text/plain": {"schema": {"type": "string"}}}}}
        paths[f"{item}/log"] = {"get": read_log}
    if resource.namespaced:
        paths[f"{prefix}/{resource.plural}"] = {"get": op(resource, version, "list", "listAll")}
    return paths


def group_versions() -> list[tuple[str, str]]:
    """Every (group, version) kubesim serves resources in, in resource-table order."""
    seen: list[tuple[str, str]] = []
    for resource in RESOURCES:
        for version in resource.versions:
            if (resource.group, version) not in seen:
                seen.append((resource.group, version))
    return seen


def v3_document(group: str, version: str) -> Obj | None:
    """The OpenAPI v3 document of one group version, or None if nothing is served there."""
    paths: dict[str, Obj] = {}
    for resource in RESOURCES:
        if resource.group == group and version in resource.versions:
            paths.update(_paths(resource, version))
    if not paths:
        return None
    title = "Kubernetes" if group in _BUILT_IN_GROUPS else f"{group} (kubesim)"
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": {}},
    }


def _hash(document: Obj | None) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()


def v3_root() -> Obj:
    """``/openapi/v3``: where each group version's document is (with a content hash, as
    clients cache by it)."""
    paths = {}
    for group, version in group_versions():
        root = _root_path(group, version)
        digest = _hash(v3_document(group, version))
        paths[root] = {"serverRelativeURL": f"/openapi/v3/{root}?hash={digest}"}
    return {"paths": paths}


def v2_document() -> Obj:
    """``/openapi/v2`` as JSON: Swagger 2.0 with the same operations (served versions)."""
    paths: dict[str, Obj] = {}
    for resource in RESOURCES:
        for version in resource.versions:
            for path, item in _paths(resource, version).items():
                paths[path] = {verb: _v2_operation(operation) for verb, operation in item.items()}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths}


def _v2_operation(operation: Obj) -> Obj:
    body = operation.get("requestBody")
    v2 = {k: v for k, v in operation.items() if k not in ("requestBody", "parameters")}
    if body is not None:
        v2["consumes"] = list(body["content"])
        v2["parameters"] = [
            {"name": p["name"], "in": "query", "type": "string", "uniqueItems": True}
            for p in operation["parameters"]
        ]
    return v2


def v2_protobuf() -> bytes:
    """An OpenAPI v2 ``Document`` (gnostic's openapiv2 proto) with only ``swagger`` (field 1)
    and ``info`` (field 2: ``title`` 1, ``version`` 2): well formed, describing no kinds."""
    info = _field(1, b"Kubernetes") + _field(2, b"v1.33.0")
    return _field(1, b"2.0") + _field(2, info)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2); payloads here are < 128 bytes."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload
