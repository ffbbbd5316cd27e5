"""The aiohttp application: every route kubesim serves, and the middleware that turns
errors into ``Status`` bodies.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from kubesim.api.context import CONTEXT, ApiContext, error_response, method_not_allowed, no_route
from kubesim.api.control import add_fault, clear_faults, close_watches, list_faults
from kubesim.api.discovery import (
    api_versions,
    core_resource_list,
    group_list,
    group_resource_list,
    healthz,
    named_group,
    openapi_v2,
    openapi_v3,
    openapi_v3_root,
    server_version,
)
from kubesim.api.pod_logs import pod_log
from kubesim.api.verbs import core_resource, group_resource
from kubesim.api.visibility import (
    VISIBILITY_GROUP,
    VISIBILITY_VERSION,
    cluster_queue_pending,
    local_queue_pending,
)
from kubesim.errors import ApiError

log = logging.getLogger(__name__)


def build_app(context: ApiContext) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=8 * 1024 * 1024)
    app[CONTEXT] = context
    add = app.router.add_route
    for path in ("/healthz", "/livez", "/readyz"):
        add("GET", path, healthz)
    add("GET", "/version", server_version)
    add("GET", "/openapi/v2", openapi_v2)
    add("GET", "/openapi/v3", openapi_v3_root)
    add("GET", "/openapi/v3/{tail:.+}", openapi_v3)
    for slash in ("", "/"):  # kubernetes-asyncio asks for "/api/", "/api/v1/", ...
        add("GET", "/api" + slash, api_versions)
        add("GET", "/apis" + slash, group_list)
        add("GET", "/apis/{group}" + slash, named_group)
        add("GET", "/api/{version}" + slash, core_resource_list)
        add("GET", "/apis/{group}/{version}" + slash, group_resource_list)
    add("POST", "/kubesim/faults", add_fault)
    add("GET", "/kubesim/faults", list_faults)
    add("DELETE", "/kubesim/faults", clear_faults)
    add("POST", "/kubesim/close-watches", close_watches)
    visibility = f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
    add("GET", visibility + "/clusterqueues/{name}/pendingworkloads", cluster_queue_pending)
    add(
        "GET",
        visibility + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
        local_queue_pending,
    )
    add("GET", "/api/v1/namespaces/{namespace}/pods/{name}/log", pod_log)
    add("*", "/api/v1/{tail:.+}", core_resource)
    add("*", "/apis/{group}/{version}/{tail:.+}", group_resource)
    return app


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error)
    except web.HTTPMethodNotAllowed:
        return error_response(method_not_allowed(request.method))
    except web.HTTPNotFound:
        return error_response(no_route())
    except web.HTTPException:
        raise
    except Exception as error:  # a kubesim bug: answer like a real server's 500, and say so
        log.exception("kubesim: %s %s failed", request.method, request.path)
        return error_response(ApiError(500, "InternalError", f"kubesim: {error!r}"))
