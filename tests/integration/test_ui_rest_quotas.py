"""Quotas over the REST face (docs/quotas.md): an admin sets one with PUT, a create past
it is 429 with Retry-After and the RetryInfo in the error's details."""

from __future__ import annotations

from tests.integration.test_ui_rest import WORK_UNIT, Http, call, http, new_experiment

ROOT = {"Authorization": "Bearer token-root"}

__all__ = ["http"]  # the fixture, used by name


async def test_a_refused_create_is_429_with_retry_after(http: Http) -> None:
    quota = {"liveWorkUnits": "1", "createsPerSecond": 5}
    found = await call(http, "PUT", "/v1/quotas/users/alice@example.com", json=quota, headers=ROOT)
    assert (found["principal"], found["liveWorkUnits"]) == ("user:alice@example.com", "1")
    listed = await call(http, "GET", "/v1/quotas", headers=ROOT)
    assert [q["name"] for q in listed["quotas"]] == ["quotas/users/alice@example.com"]
    parent = await new_experiment(http)
    await call(http, "POST", f"/v1/{parent}/workUnits", json=WORK_UNIT)
    sent = {"Authorization": "Bearer token-alice", "Content-Type": "application/json"}
    response = await http.post(f"/v1/{parent}/workUnits", json=WORK_UNIT, headers=sent)
    body = await response.json()
    assert response.status == 429, body
    assert response.headers["Retry-After"] == "9"  # 10 s, less the 1 s hold
    error = body["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert "user:alice@example.com may have at most 1 live work units" in error["message"]
    assert error["details"][0] == {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "9s",
    }
    mine = await call(http, "GET", "/v1/quotas/users/alice@example.com")
    assert mine["usage"] == {"liveWorkUnits": "1", "liveExperiments": "1"}
    await call(http, "DELETE", "/v1/quotas/users/alice@example.com", headers=ROOT)
    await call(http, "POST", f"/v1/{parent}/workUnits", json=WORK_UNIT)
