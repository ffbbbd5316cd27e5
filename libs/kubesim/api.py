"""The Kubernetes API over HTTP (aiohttp), with the semantics kubernetes-asyncio relies on.

Routing turns a path into a ``Target`` (resource, version, namespace, name, subresource) and
dispatches on its shape and the HTTP method; every handler reads the request body *before*
touching the store and then reads and writes the store without an ``await`` in between, so
a patch or a conditional delete is atomic like it is on the real server. Errors are
``ApiError``s turned into ``Status`` bodies in one middleware.

Traps of a real server reproduced on purpose (docs/kubesim.md lists them):
- custom resources take merge and JSON patches only (strategic merge patch is 415);
- a custom resource PUT without ``metadata.resourceVersion`` is 422 (no unconditional
  update), and a custom resource body without ``apiVersion``/``kind`` is 400;
- create answers 201 (kubernetes-asyncio returns None for custom objects otherwise).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from kubesim import openapi
from kubesim.errors import ApiError, bad_request, invalid, not_found
from kubesim.faults import Faults, fault_from_json
from kubesim.patch import apply_patch, patch_type_for
from kubesim.resources import CLUSTER_QUEUE, LOCAL_QUEUE, RESOURCES, Resource, find_resource
from kubesim.selectors import parse_field_selector, parse_label_selector
from kubesim.store import ObjectStore
from kubesim.tables import table, wants_table
from kubesim.watch import (
    WatchHub,
    WatchSpec,
    is_true,
    parse_resource_version,
    serve_watch,
    served_as,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)

BUILT_IN_GROUPS = frozenset({"", "batch", "coordination.k8s.io"})
"""Groups compiled into the real API server: they take strategic merge patches and allow
unconditional updates; every other group here is a custom resource."""

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta1"
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_JSON_SEPARATORS = (",", ":")


@dataclass
class ApiContext:
    store: ObjectStore
    faults: Faults
    watches: WatchHub
    bookmark_interval: float = 1.0
    """Seconds between BOOKMARK events on watches that allow them."""
    update_checks: dict[str, Callable[[Obj, Obj], None]] = field(default_factory=dict)
    """Per resource key, a validating admission check of (old, new) for updates and
    patches of the main resource; it raises ``ApiError`` to deny (stands in for webhooks)."""
    create_defaults: dict[str, Callable[[Obj], Obj]] = field(default_factory=dict)
    """Per resource key, a mutating admission step applied to a create's body before it is
    stored (stands in for mutating webhooks)."""


CONTEXT = web.AppKey("kubesim", ApiContext)


def build_app(context: ApiContext) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=8 * 1024 * 1024)
    app[CONTEXT] = context
    add = app.router.add_route
    for path in ("/healthz", "/livez", "/readyz"):
        add("GET", path, _ok)
    add("GET", "/version", _version)
    add("GET", "/openapi/v2", _openapi_v2)
    add("GET", "/openapi/v3", _openapi_v3_root)
    add("GET", "/openapi/v3/{tail:.+}", _openapi_v3)
    for slash in ("", "/"):  # kubernetes-asyncio asks for "/api/", "/api/v1/", ...
        add("GET", "/api" + slash, _api_versions)
        add("GET", "/apis" + slash, _group_list)
        add("GET", "/apis/{group}" + slash, _api_group)
        add("GET", "/api/{version}" + slash, _core_resource_list)
        add("GET", "/apis/{group}/{version}" + slash, _group_resource_list)
    add("POST", "/kubesim/faults", _add_fault)
    add("GET", "/kubesim/faults", _list_faults)
    add("DELETE", "/kubesim/faults", _clear_faults)
    add("POST", "/kubesim/close-watches", _close_watches)
    visibility = f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
    add("GET", visibility + "/clusterqueues/{name}/pendingworkloads", _cluster_queue_pending)
    add(
        "GET",
        visibility + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
        _local_queue_pending,
    )
    add("*", "/api/v1/{tail:.+}", _core_resource)
    add("*", "/apis/{group}/{version}/{tail:.+}", _group_resource)
    return app


# --- errors --------------------------------------------------------------------------


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPMethodNotAllowed:
        return error_response(_method_not_allowed(request.method))
    except web.HTTPNotFound:
        return error_response(_no_route())
    except web.HTTPException:
        raise
    except Exception as error:  # a kubesim bug: answer like a real server's 500, and say so
        log.exception("kubesim: %s %s failed", request.method, request.path)
        return error_response(ApiError(500, "InternalError", f"kubesim: {error!r}"))


def error_response(error: ApiError) -> web.Response:
    headers = {}
    if "retryAfterSeconds" in error.details:
        headers["Retry-After"] = str(error.details["retryAfterSeconds"])
    return json_response(error.status(), error.code, headers)


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=_JSON_SEPARATORS).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _no_route() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")


# --- discovery -----------------------------------------------------------------------


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _version(_: web.Request) -> web.Response:
    return json_response(
        {"major": "1", "minor": "33", "gitVersion": "v1.33.0-kubesim", "platform": "linux/amd64"}
    )


async def _openapi_v2(request: web.Request) -> web.Response:
    if "protobuf" in request.headers.get("Accept", ""):
        return web.Response(body=openapi.v2_protobuf(), content_type=openapi.PROTOBUF_V2)
    return json_response(openapi.v2_document())


async def _openapi_v3_root(_: web.Request) -> web.Response:
    return json_response(openapi.v3_root())


async def _openapi_v3(request: web.Request) -> web.Response:
    segments = request.match_info["tail"].strip("/").split("/")
    if segments[:1] == ["api"] and len(segments) == 2:
        document = openapi.v3_document("", segments[1])
    elif segments[:1] == ["apis"] and len(segments) == 3:
        document = openapi.v3_document(segments[1], segments[2])
    else:
        document = None
    if document is None:
        raise _no_route()
    return json_response(document)


async def _api_versions(request: web.Request) -> web.Response:
    address = request.host
    return json_response(
        {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }
    )


def served_groups() -> dict[str, list[str]]:
    """Named API groups and their versions, the preferred (storage) version first."""
    groups: dict[str, list[str]] = {}
    for resource in RESOURCES:
        if resource.group:
            versions = groups.setdefault(resource.group, [])
            versions.extend(v for v in resource.versions if v not in versions)
    groups[VISIBILITY_GROUP] = [VISIBILITY_VERSION]
    return groups


def api_group(name: str, versions: list[str]) -> Obj:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": listed[0],
    }


async def _group_list(_: web.Request) -> web.Response:
    groups = [api_group(name, versions) for name, versions in served_groups().items()]
    return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


async def _api_group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    versions = served_groups().get(name)
    if versions is None:
        raise _no_route()
    return json_response(api_group(name, versions))


def resource_list(group: str, version: str) -> Obj | None:
    """The APIResourceList of one group version (subresources included), or None."""
    entries: list[Obj] = []
    for resource in RESOURCES:
        if resource.group == group and version in resource.versions:
            entries.extend(_resource_entries(resource))
    if group == VISIBILITY_GROUP and version == VISIBILITY_VERSION:
        entries = [
            _entry("clusterqueues/pendingworkloads", "PendingWorkloadsSummary", False, ["get"]),
            _entry("localqueues/pendingworkloads", "PendingWorkloadsSummary", True, ["get"]),
        ]
    if not entries:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _resource_entries(resource: Resource) -> list[Obj]:
    main = _entry(resource.plural, resource.kind, resource.namespaced, _VERBS)
    main["singularName"] = resource.kind.lower()
    if resource.short_names:
        main["shortNames"] = list(resource.short_names)
    if not resource.status_subresource:
        return [main]
    status = _entry(
        f"{resource.plural}/status", resource.kind, resource.namespaced, ["get", "patch", "update"]
    )
    return [main, status]


def _entry(name: str, kind: str, namespaced: bool, verbs: list[str]) -> Obj:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    }


async def _core_resource_list(request: web.Request) -> web.Response:
    return _resource_list_response("", request.match_info["version"])


async def _group_resource_list(request: web.Request) -> web.Response:
    return _resource_list_response(request.match_info["group"], request.match_info["version"])


def _resource_list_response(group: str, version: str) -> web.Response:
    body = resource_list(group, version)
    if body is None:
        raise _no_route()
    return json_response(body)


# --- resources -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a resource path names."""

    resource: Resource
    version: str
    namespace: str | None
    name: str | None = None
    subresource: str | None = None

    @property
    def shape(self) -> str:
        if self.name is None:
            return "collection"
        return "item" if self.subresource is None else "status"

    @property
    def fault_resource(self) -> str:
        plural = self.resource.plural
        return plural if self.subresource is None else f"{plural}/{self.subresource}"

    @property
    def built_in(self) -> bool:
        return self.resource.group in BUILT_IN_GROUPS


def parse_target(group: str, version: str, path: str) -> Target:
    """``[namespaces/{ns}/]{plural}[/{name}[/status]]`` under a group version; 404 when the
    path names nothing served (including a namespaced object without its namespace)."""
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 3 and segments[0] == "namespaces":
        resource = find_resource(group, version, segments[2])
        if resource is not None and resource.namespaced:
            return _target(resource, version, segments[1], segments[3:])
    resource = find_resource(group, version, segments[0]) if segments else None
    if resource is None or (resource.namespaced and len(segments) > 1):
        raise _no_route()
    return _target(resource, version, None, segments[1:])


def _target(resource: Resource, version: str, namespace: str | None, rest: list[str]) -> Target:
    if len(rest) > 2:
        raise _no_route()
    name = rest[0] if rest else None
    subresource = rest[1] if len(rest) == 2 else None
    if subresource is not None and (subresource != "status" or not resource.status_subresource):
        raise _no_route()
    return Target(resource, version, namespace, name, subresource)


Handler = Callable[[ApiContext, web.Request, Target], Awaitable[web.StreamResponse]]


async def _core_resource(request: web.Request) -> web.StreamResponse:
    return await _dispatch(request, parse_target("", "v1", request.match_info["tail"]))


async def _group_resource(request: web.Request) -> web.StreamResponse:
    info = request.match_info
    return await _dispatch(request, parse_target(info["group"], info["version"], info["tail"]))


def verb_of(target: Target, method: str, watch: bool) -> str | None:
    """The Kubernetes verb of a request (what faults match on), or None if not allowed."""
    if target.shape == "collection":
        if target.namespace is None and target.resource.namespaced and method != "GET":
            return None  # across namespaces only list and watch exist
        verbs = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "delete"}
    elif target.shape == "item":
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    else:
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch"}
    return verbs.get(method)


async def _dispatch(request: web.Request, target: Target) -> web.StreamResponse:
    context = request.app[CONTEXT]
    verb = verb_of(target, request.method, is_true(request.query.get("watch")))
    if verb is None:
        raise _method_not_allowed(request.method)
    await context.faults.apply(verb, target.fault_resource)
    handler = _HANDLERS[(target.shape == "collection", verb)]
    return await handler(context, request, target)


async def _list(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    query = request.query
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    store = context.store
    objects = store.list(target.resource, target.namespace, labels=labels, fields=fields)
    limit = _non_negative_int(query.get("limit"), "limit")
    token = query.get("continue")
    start = decode_continue(token) if token else None
    if start is not None:
        store.check_resumable(start[0])
    resource_version = start[0] if start else store.resource_version
    items, after, remaining = list_page(objects, limit, start[1] if start else None)
    metadata: Obj = {"resourceVersion": str(resource_version)}
    if after is not None:
        metadata["continue"] = encode_continue(resource_version, after)
        metadata["remainingItemCount"] = remaining
    if wants_table(request.headers.get("Accept")):
        return _table_response(context, request, target, items, metadata)
    return json_response(
        {
            "apiVersion": target.resource.api_version(target.version),
            "kind": target.resource.list_kind,
            "metadata": metadata,
            "items": [_in_version(obj, target) for obj in items],
        }
    )


async def _watch(context: ApiContext, request: web.Request, target: Target) -> web.StreamResponse:
    query = request.query
    timeout = query.get("timeoutSeconds")
    spec = WatchSpec(
        resource=target.resource,
        version=target.version,
        namespace=target.namespace,
        labels=parse_label_selector(query.get("labelSelector")),
        fields=parse_field_selector(query.get("fieldSelector")),
        resource_version=parse_resource_version(query.get("resourceVersion")),
        bookmarks=is_true(query.get("allowWatchBookmarks")),
        timeout_seconds=None if not timeout else _non_negative_int(timeout, "timeoutSeconds"),
        render=_table_renderer(context, request, target),
    )
    return await serve_watch(
        request, context.store, context.watches, spec, bookmark_interval=context.bookmark_interval
    )


async def _create(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    body = object_body(await request.read(), target)
    if body["metadata"].get("resourceVersion"):  # an object re-sent as read: a real 500
        raise ApiError(500, "", "resourceVersion should not be set on objects to be created")
    dry_run = dry_run_of(query_values(request.query, "dryRun"), "CreateOptions")
    default = context.create_defaults.get(target.resource.key)
    if default is not None and target.subresource is None:
        body = default(body)
    created = context.store.create(target.resource, body, target.namespace, dry_run=dry_run)
    return json_response(_in_version(created, target), 201)


async def _get(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    obj = context.store.get(target.resource, target.namespace, _name(target))
    if target.subresource is None and wants_table(request.headers.get("Accept")):
        metadata = {"resourceVersion": obj["metadata"]["resourceVersion"]}
        return _table_response(context, request, target, [obj], metadata)
    return json_response(_in_version(obj, target))


def _include_object(request: web.Request) -> str:
    include = request.query.get("includeObject") or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request(f'invalid includeObject: "{include}"')
    return include


def _table_response(
    context: ApiContext, request: web.Request, target: Target, objects: list[Obj], metadata: Obj
) -> web.Response:
    body = table(
        target.resource,
        [_in_version(obj, target) for obj in objects],
        metadata,
        context.store.clock(),
        include_object=_include_object(request),
    )
    return json_response(body)


def _table_renderer(
    context: ApiContext, request: web.Request, target: Target
) -> Callable[[Obj], Obj] | None:
    """For a watch asked ``as=Table`` (``kubectl get -w``): each event's object becomes a
    one-row Table, as the API server's watch encoder converts it."""
    if not wants_table(request.headers.get("Accept")):
        return None
    include = _include_object(request)

    def render(obj: Obj) -> Obj:
        metadata = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
        now = context.store.clock()
        return table(target.resource, [obj], metadata, now, include_object=include)

    return render


async def _replace(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    dry_run = dry_run_of(query_values(request.query, "dryRun"), "UpdateOptions")
    body = object_body(await request.read(), target)
    check_identity(body, target)
    if not target.built_in and not body["metadata"].get("resourceVersion"):
        raise invalid(
            target.resource.kind,
            _name(target),
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
        )
    _check_update(context, target, body)
    updated = context.store.replace(
        target.resource, body, target.namespace, subresource=target.subresource, dry_run=dry_run
    )
    return json_response(_in_version(updated, target))


async def _patch(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    patch_type = patch_type_for(
        request.headers.get("Content-Type"), strategic_allowed=target.built_in
    )
    dry_run = dry_run_of(query_values(request.query, "dryRun"), "PatchOptions")
    body = await request.read()
    store = context.store
    current = store.get(target.resource, target.namespace, _name(target))
    patched = apply_patch(patch_type, current, body)
    check_identity(patched, target)
    _check_update(context, target, patched)
    updated = store.replace(
        target.resource, patched, target.namespace, subresource=target.subresource, dry_run=dry_run
    )
    return json_response(_in_version(updated, target))


def _check_update(context: ApiContext, target: Target, new: Obj) -> None:
    check = context.update_checks.get(target.resource.key)
    if check is not None and target.subresource is None:
        check(context.store.get(target.resource, target.namespace, _name(target)), new)


async def _delete(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    options = delete_options(_decode(await request.read()), request.query)
    deleted = context.store.delete(
        target.resource,
        target.namespace,
        _name(target),
        uid=options.uid,
        resource_version=options.resource_version,
        propagation=options.propagation,
        dry_run=options.dry_run,
    )
    return json_response(_in_version(deleted, target))


async def _delete_collection(
    context: ApiContext, request: web.Request, target: Target
) -> web.Response:
    options = delete_options(_decode(await request.read()), request.query)
    store = context.store
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(request.query.get("fieldSelector"))
    deleted = []
    for obj in store.list(target.resource, target.namespace, labels=labels, fields=fields):
        meta = obj["metadata"]
        if store.find(target.resource, meta.get("namespace"), meta["name"]) is not None:
            deleted.append(
                store.delete(
                    target.resource,
                    meta.get("namespace"),
                    meta["name"],
                    propagation=options.propagation,
                    dry_run=options.dry_run,
                )
            )
    return json_response(
        {
            "apiVersion": target.resource.api_version(target.version),
            "kind": target.resource.list_kind,
            "metadata": {"resourceVersion": str(store.resource_version)},
            "items": [_in_version(obj, target) for obj in deleted],
        }
    )


_HANDLERS: dict[tuple[bool, str], Handler] = {
    (True, "list"): _list,
    (True, "watch"): _watch,
    (True, "create"): _create,
    (True, "delete"): _delete_collection,
    (False, "get"): _get,
    (False, "update"): _replace,
    (False, "patch"): _patch,
    (False, "delete"): _delete,
}


# --- request decoding (pure) ---------------------------------------------------------


def _decode(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as error:
        raise bad_request(f"error decoding request body: {error}") from None


def object_body(raw: bytes, target: Target) -> Obj:
    """A create/replace body: a JSON object of the URL's kind. Custom resources must say
    ``apiVersion`` and ``kind`` (the real server cannot decode them otherwise); built-in
    types take them from the URL."""
    body = _decode(raw)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    expected = target.resource.api_version(target.version)
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if not target.built_in and not (api_version and kind):
        raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
    if api_version and api_version != expected:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({expected})"
        )
    if kind and kind != target.resource.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind "
            f"({target.resource.kind})"
        )
    if not isinstance(body.setdefault("metadata", {}), dict):
        raise bad_request("metadata must be a JSON object")
    return body


def check_identity(body: Obj, target: Target) -> None:
    """An update names the object of the URL: same name, same namespace (400 otherwise)."""
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        raise invalid(target.resource.kind, _name(target), "metadata: Required value")
    name = meta.setdefault("name", target.name)
    if name != target.name:
        raise bad_request(
            f"the name of the object ({name}) does not match the name on the URL ({target.name})"
        )
    if target.resource.namespaced and meta.setdefault("namespace", target.namespace) != (
        target.namespace
    ):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


@dataclass(frozen=True)
class DeleteOptions:
    uid: str | None = None
    resource_version: str | None = None
    propagation: str = "Background"
    dry_run: bool = False


_PROPAGATION = {"Background": "Background", "Foreground": "Background", "Orphan": "Orphan"}


def delete_options(body: Any, query: Any) -> DeleteOptions:
    """``DeleteOptions`` from the body and/or the query (the query wins). Foreground is
    served as Background: dependents are collected at once either way."""
    body = body if isinstance(body, dict) else {}
    preconditions = body.get("preconditions") or {}
    policy = query.get("propagationPolicy") or body.get("propagationPolicy")
    orphan = query.get("orphanDependents", body.get("orphanDependents"))
    if policy is None:
        policy = "Orphan" if orphan in (True, "true") else "Background"
    if policy not in _PROPAGATION:
        raise ApiError(
            422,
            "Invalid",
            f'DeleteOptions.propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan"',
        )
    dry_run = query_values(query, "dryRun") or body.get("dryRun") or []
    return DeleteOptions(
        preconditions.get("uid"),
        preconditions.get("resourceVersion"),
        _PROPAGATION[policy],
        dry_run_of(dry_run, "DeleteOptions"),
    )


def query_values(query: Any, name: str) -> list[str]:
    """Every value of a repeatable query parameter (a plain mapping has one at most)."""
    if hasattr(query, "getall"):
        return list(query.getall(name, []))
    value = query.get(name)
    return [] if value is None else [value]


def _go_strings(values: Any) -> str:
    if not isinstance(values, list):
        return json.dumps(values)
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def dry_run_of(values: Any, options_kind: str) -> bool:
    """Whether ``dryRun`` asks for a dry run: only ``All`` is known; anything else is 422
    Invalid against the verb's options kind, as apimachinery's ``ValidateDryRun``."""
    if not isinstance(values, list) or any(value != "All" for value in values):
        raise ApiError(
            422,
            "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
            f'{_go_strings(values)}: supported values: "All"',
        )
    return bool(values)


def _non_negative_int(value: str | None, name: str) -> int:
    try:
        number = int(value or 0)
    except ValueError:
        raise bad_request(f"invalid {name}: {value!r}") from None
    if number < 0:
        raise bad_request(f"invalid {name}: {value!r}")
    return number


def _name(target: Target) -> str:
    assert target.name is not None  # item and status paths always carry a name
    return target.name


def _in_version(obj: Obj, target: Target) -> Obj:
    return served_as(obj, target.resource, target.version)


# --- pagination (pure) ---------------------------------------------------------------


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name") or "")


def list_page(
    objects: list[Obj], limit: int, after: tuple[str, str] | None
) -> tuple[list[Obj], tuple[str, str] | None, int]:
    """One page of (namespace, name)-ordered ``objects`` after ``after``: the items, the
    key to continue after (None on the last page) and how many items remain after it."""
    rest = [obj for obj in objects if after is None or _sort_key(obj) > after]
    if not limit or len(rest) <= limit:
        return rest, None, 0
    page = rest[:limit]
    return page, _sort_key(page[-1]), len(rest) - limit


def encode_continue(resource_version: int, after: tuple[str, str]) -> str:
    """An opaque token: the list's resourceVersion and the last key served."""
    raw = json.dumps({"rv": resource_version, "start": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, name = data["start"]
        return int(data["rv"]), (str(namespace), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad_request("continue key is not valid") from None


# --- Kueue visibility ----------------------------------------------------------------


def _pending_workloads(store: ObjectStore, cluster_queue: str) -> list[Obj]:
    """From the Kueue simulator (imported here so the API alone never needs it)."""
    try:
        from kubesim.controllers.kueue.visibility import pending_workloads
    except ImportError:
        raise ApiError(503, "ServiceUnavailable", "the Kueue simulator is not available") from None
    return pending_workloads(store, cluster_queue)


def _summary(items: list[Obj], query: Any) -> web.Response:
    offset = _non_negative_int(query.get("offset"), "offset")
    limit = _non_negative_int(query.get("limit"), "limit") or 1000
    return json_response(
        {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}",
            "metadata": {"creationTimestamp": None},
            "items": items[offset : offset + limit],
        }
    )


async def _cluster_queue_pending(request: web.Request) -> web.Response:
    store = request.app[CONTEXT].store
    name = request.match_info["name"]
    store.get(CLUSTER_QUEUE, None, name)
    return _summary(_pending_workloads(store, name), request.query)


async def _local_queue_pending(request: web.Request) -> web.Response:
    store = request.app[CONTEXT].store
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    queue = store.get(LOCAL_QUEUE, namespace, name)
    cluster_queue = (queue.get("spec") or {}).get("clusterQueue")
    if not cluster_queue:
        raise not_found("clusterqueues", "", CLUSTER_QUEUE.group)
    items = [
        item
        for item in _pending_workloads(store, cluster_queue)
        if item.get("metadata", {}).get("namespace") == namespace
        and item.get("localQueueName") == name
    ]
    return _summary(items, request.query)


# --- kubesim control -----------------------------------------------------------------


async def _add_fault(request: web.Request) -> web.Response:
    fault = request.app[CONTEXT].faults.add(fault_from_json(_decode(await request.read())))
    return json_response(dataclasses.asdict(fault), 201)


async def _list_faults(request: web.Request) -> web.Response:
    faults = request.app[CONTEXT].faults.pending
    return json_response({"faults": [dataclasses.asdict(f) for f in faults]})


async def _clear_faults(request: web.Request) -> web.Response:
    request.app[CONTEXT].faults.clear()
    return json_response({"faults": []})


async def _close_watches(request: web.Request) -> web.Response:
    return json_response({"closed": request.app[CONTEXT].faults.close_watches()})
