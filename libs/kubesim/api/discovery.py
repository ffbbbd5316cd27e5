"""Discovery and health: ``/version``, the OpenAPI documents, ``/api`` and ``/apis`` with
their ``APIGroup``s and ``APIResourceList``s (subresources and short names included).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubesim import openapi
from kubesim.api.context import json_response, no_route
from kubesim.api.visibility import VISIBILITY_GROUP, VISIBILITY_VERSION
from kubesim.resources import RESOURCES, Resource

Obj = dict[str, Any]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def server_version(_: web.Request) -> web.Response:
    return json_response(
        {"major": "1", "minor": "33", "gitVersion": "v1.33.0-kubesim", "platform": "linux/amd64"}
    )


async def openapi_v2(request: web.Request) -> web.Response:
    if "protobuf" in request.headers.get("Accept", ""):
        return web.Response(body=openapi.v2_protobuf(), content_type=openapi.PROTOBUF_V2)
    return json_response(openapi.v2_document())


async def openapi_v3_root(_: web.Request) -> web.Response:
    return json_response(openapi.v3_root())


async def openapi_v3(request: web.Request) -> web.Response:
    segments = request.match_info["tail"].strip("/").split("/")
    if segments[:1] == ["api"] and len(segments) == 2:
        document = openapi.v3_document("", segments[1])
    elif segments[:1] == ["apis"] and len(segments) == 3:
        document = openapi.v3_document(segments[1], segments[2])
    else:
        document = None
    if document is None:
        raise no_route()
    return json_response(document)


async def api_versions(request: web.Request) -> web.Response:
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


async def group_list(_: web.Request) -> web.Response:
    groups = [api_group(name, versions) for name, versions in served_groups().items()]
    return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


async def named_group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    versions = served_groups().get(name)
    if versions is None:
        raise no_route()
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
    entries = [main]
    if resource.log_subresource:
        entries.append(
            _entry(f"{resource.plural}/log", resource.kind, resource.namespaced, ["get"])
        )
    if resource.status_subresource:
        status_verbs = ["get", "patch", "update"]
        entries.append(
            _entry(f"{resource.plural}/status", resource.kind, resource.namespaced, status_verbs)
        )
    return entries


def _entry(name: str, kind: str, namespaced: bool, verbs: list[str]) -> Obj:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    }


async def core_resource_list(request: web.Request) -> web.Response:
    return _resource_list_response("", request.match_info["version"])


async def group_resource_list(request: web.Request) -> web.Response:
    return _resource_list_response(request.match_info["group"], request.match_info["version"])


def _resource_list_response(group: str, version: str) -> web.Response:
    body = resource_list(group, version)
    if body is None:
        raise no_route()
    return json_response(body)
