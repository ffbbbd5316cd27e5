"""The resource verbs: each request on a resource path is dispatched on its shape and
method (after the fault injector had its say) to one handler, which reads the body
before it touches the store and then reads and writes the store without an ``await`` in
between.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kubesim.api.context import CONTEXT, ApiContext, json_response, method_not_allowed
from kubesim.api.decode import (
    Target,
    check_identity,
    decode_continue,
    decode_json,
    delete_options,
    dry_run_of,
    encode_continue,
    in_version,
    list_page,
    name_of,
    non_negative_int,
    object_body,
    parse_target,
    query_values,
    verb_of,
)
from kubesim.errors import ApiError, bad_request, invalid
from kubesim.freshness import ReadAt, list_read, wait_until_fresh
from kubesim.patch import apply_patch, patch_type_for
from kubesim.selectors import parse_field_selector, parse_label_selector
from kubesim.tables import table, wants_table
from kubesim.watch import WatchSpec, is_true, parse_resource_version, serve_watch

Obj = dict[str, Any]

Handler = Callable[[ApiContext, web.Request, Target], Awaitable[web.StreamResponse]]


async def core_resource(request: web.Request) -> web.StreamResponse:
    return await _dispatch(request, parse_target("", "v1", request.match_info["tail"]))


async def group_resource(request: web.Request) -> web.StreamResponse:
    info = request.match_info
    return await _dispatch(request, parse_target(info["group"], info["version"], info["tail"]))


async def _dispatch(request: web.Request, target: Target) -> web.StreamResponse:
    context = request.app[CONTEXT]
    verb = verb_of(target, request.method, is_true(request.query.get("watch")))
    if verb is None:
        raise method_not_allowed(request.method)
    # Decoded, parameter by parameter: a label selector reads as written (``app=a``).
    query = "&".join(f"{key}={value}" for key, value in request.query.items())
    url = f"{request.path}?{query}"
    await context.faults.apply(verb, target.fault_resource, url)
    handler = _HANDLERS[(target.shape == "collection", verb)]
    return await handler(context, request, target)


async def _list(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    query = request.query
    labels = parse_label_selector(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"))
    store = context.store
    limit = non_negative_int(query.get("limit"), "limit")
    token = query.get("continue")
    read = list_read(
        query.get("resourceVersion"), query.get("resourceVersionMatch"), limit, bool(token)
    )
    await wait_until_fresh(store, read, context.fresh_wait_seconds)
    objects = store.list(target.resource, target.namespace, labels=labels, fields=fields)
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
            "items": [in_version(obj, target) for obj in items],
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
        timeout_seconds=None if not timeout else non_negative_int(timeout, "timeoutSeconds"),
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
    return json_response(in_version(created, target), 201)


async def _get(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    minimum = parse_resource_version(request.query.get("resourceVersion"))
    await wait_until_fresh(context.store, ReadAt(minimum), context.fresh_wait_seconds)
    obj = context.store.get(target.resource, target.namespace, name_of(target))
    if target.subresource is None and wants_table(request.headers.get("Accept")):
        metadata = {"resourceVersion": obj["metadata"]["resourceVersion"]}
        return _table_response(context, request, target, [obj], metadata)
    return json_response(in_version(obj, target))


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
        [in_version(obj, target) for obj in objects],
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
            name_of(target),
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
        )
    _check_update(context, target, body)
    updated = context.store.replace(
        target.resource, body, target.namespace, subresource=target.subresource, dry_run=dry_run
    )
    return json_response(in_version(updated, target))


async def _patch(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    patch_type = patch_type_for(
        request.headers.get("Content-Type"), strategic_allowed=target.built_in
    )
    dry_run = dry_run_of(query_values(request.query, "dryRun"), "PatchOptions")
    body = await request.read()
    store = context.store
    current = store.get(target.resource, target.namespace, name_of(target))
    patched = apply_patch(patch_type, current, body)
    check_identity(patched, target)
    _check_update(context, target, patched)
    updated = store.replace(
        target.resource, patched, target.namespace, subresource=target.subresource, dry_run=dry_run
    )
    return json_response(in_version(updated, target))


def _check_update(context: ApiContext, target: Target, new: Obj) -> None:
    check = context.update_checks.get(target.resource.key)
    if check is not None and target.subresource is None:
        check(context.store.get(target.resource, target.namespace, name_of(target)), new)


async def _delete(context: ApiContext, request: web.Request, target: Target) -> web.Response:
    options = delete_options(decode_json(await request.read()), request.query)
    deleted = context.store.delete(
        target.resource,
        target.namespace,
        name_of(target),
        uid=options.uid,
        resource_version=options.resource_version,
        propagation=options.propagation,
        dry_run=options.dry_run,
    )
    return json_response(in_version(deleted, target))


async def _delete_collection(
    context: ApiContext, request: web.Request, target: Target
) -> web.Response:
    options = delete_options(decode_json(await request.read()), request.query)
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
            "items": [in_version(obj, target) for obj in deleted],
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
