"""kubesim's own control endpoints (``/kubesim/*``): inject, list and clear faults, and
close every open watch.
"""

from __future__ import annotations

import dataclasses

from aiohttp import web

from kubesim.api.context import CONTEXT, json_response
from kubesim.api.decode import decode_json
from kubesim.faults import fault_from_json


async def add_fault(request: web.Request) -> web.Response:
    fault = request.app[CONTEXT].faults.add(fault_from_json(decode_json(await request.read())))
    return json_response(dataclasses.asdict(fault), 201)


async def list_faults(request: web.Request) -> web.Response:
    faults = request.app[CONTEXT].faults.pending
    return json_response({"faults": [dataclasses.asdict(f) for f in faults]})


async def clear_faults(request: web.Request) -> web.Response:
    request.app[CONTEXT].faults.clear()
    return json_response({"faults": []})


async def close_watches(request: web.Request) -> web.Response:
    return json_response({"closed": request.app[CONTEXT].faults.close_watches()})
