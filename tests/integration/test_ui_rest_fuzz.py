"""Seeded fuzzing of the REST face over a real ESS: every route, sent bodies and query
parameters a client may get wrong — wrong types, unknown fields, numbers beyond a double
(``1e400``), ``NaN``, integers too long to convert, nesting 100,000 and 200,000 deep,
text that is not JSON. No answer may be a 5xx: client input is a 4xx, always (decision
0015), and every answer is a JSON error in the Google API shape.

The seed is fixed (``XMC_FUZZ_SEED`` overrides it) and printed, so a failure replays.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.integration.ess_harness import Ess
from tests.integration.test_ui_rest import (
    JSON_ALICE,
    WORK_UNIT,
    Http,
    _client,
    call,
    new_experiment,
)
from ui.http_rules import routes_from_service
from ui.rest import ESS_SERVICE, add_rest_routes

SEED = int(os.environ.get("XMC_FUZZ_SEED", "20261202"))
REQUESTS = 300
#: Bodies no field can take, as text (json.dumps cannot write most of them).
HOSTILE = (
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "1" + "0" * 5000,
    "[" * 100_000 + "]" * 100_000,
    '{"a":[' * 100_000 + "]}" * 100_000,
    '"\\ud800"',
    "{",
    "",
)
SCALARS: tuple[Any, ...] = (0, -1, 2**63, 1.5, 1e308, True, None, "", "x" * 300, [], {})


@pytest.fixture
async def rest(ess: Ess) -> AsyncIterator[Http]:
    app = web.Application()
    add_rest_routes(app, ess.channel)
    client = await _client(app)
    yield client
    await client.close()


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return rng.choice(SCALARS)
    if roll < 0.8:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(("title", "priority", "filter", "x")): _value(rng, depth + 1)}


def _body(rng: random.Random, known: dict[str, Any]) -> str:
    """Mostly a plausible body with one field made hostile or wrong."""
    base = dict(rng.choice(list(known.values())))
    if base and rng.random() < 0.8:
        field = rng.choice(sorted(base))
        if rng.random() < 0.5:
            text = json.dumps({**base, field: "@@"})
            return text.replace('"@@"', rng.choice(HOSTILE[:5]))
        base[field] = _value(rng)
    if rng.random() < 0.15:
        return rng.choice(HOSTILE)
    return json.dumps(base)


async def test_no_client_input_is_a_server_error(rest: Http) -> None:
    print(f"XMC_FUZZ_SEED={SEED}")
    rng = random.Random(SEED)
    parent = await new_experiment(rest)
    unit = (await call(rest, "POST", f"/v1/{parent}/workUnits", json=WORK_UNIT))["name"]
    unit = unit.split("/operations/")[0]
    known: dict[str, Any] = {
        "experiment": {"title": "t", "priority": "HIGH", "tags": ["a"]},
        "work_unit": WORK_UNIT,
        "filter": {"filter": "state = RUNNING"},
        "launch": {"launchState": "COMPLETED"},
        "artifact": {"tags": ["a"], "dataType": "MODEL_SNAPSHOTS"},
    }
    names = {"experiments/*": parent, "experiments/*/workUnits/*": unit, "artifacts/*": "1"}
    routes = routes_from_service(ESS_SERVICE)
    seen: dict[int, int] = {}
    for i in range(REQUESTS):
        route = rng.choice(routes)
        path = route.template.text.split(":")[0] if route.template.verb else route.template.text
        for pattern, name in names.items():
            for variable in ("name", "parent", "experiment.name", "work_unit.name"):
                path = path.replace(f"{{{variable}={pattern}}}", name)
                path = path.replace(f"{{artifact.name={pattern}}}", name)
        if route.template.verb:
            path += f":{route.template.verb}"
        kwargs: dict[str, Any] = {}
        if route.http_method != "GET" and route.body:
            kwargs["data"] = _body(rng, known).encode("utf-8", "surrogatepass")
        if rng.random() < 0.2:
            kwargs["params"] = {rng.choice(("pageSize", "filter", "x")): rng.choice(HOSTILE[:5])}
        response = await rest.request(route.http_method, path, headers=JSON_ALICE, **kwargs)
        answer = await response.json()
        seen[response.status] = seen.get(response.status, 0) + 1
        assert response.status < 500, (i, route.http_method, path, kwargs, answer)
        if response.status >= 400:
            assert set(answer["error"]) == {"code", "message", "status", "details"}, answer
    print("answers by status:", dict(sorted(seen.items())))
    assert seen.get(400, 0) > REQUESTS // 10, "the mix must mostly test refusals"
