"""``kubectl logs`` — the real binary, through a kubeconfig — against containers run by
kubesim's kubelet: ``-c``, ``--tail``, ``--since``, ``--timestamps``, ``--limit-bytes``,
``--previous`` and ``-f`` until the container ends."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kubesim.container_logs import timestamp
from kubesim.resources import POD
from kubesim.server import KubeSim
from tests.kubesim.support import MakeKubeSim, kubectl, needs_kubectl, run_kubectl
from tests.waiting import eventually

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

pytestmark = needs_kubectl

LINES = ["one", "two", "three"]


def two_container_pod(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    annotations = {"kubesim.xmc/behavior.a": json.dumps(a), "kubesim.xmc/behavior.b": json.dumps(b)}
    return {
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in ("a", "b")]},
    }


def state_of(sim: KubeSim, container: str) -> dict[str, Any]:
    statuses = (sim.store.get(POD, "default", "p").get("status") or {}).get("containerStatuses")
    for status in statuses or []:
        if status["name"] == container:
            state: dict[str, Any] = status["state"]
            return state
    return {}


async def test_kubectl_logs_of_a_failed_container(
    make_kubesim: MakeKubeSim, tmp_path: Path
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=20.0)
    failing = {"logs": LINES, "run_seconds": 5, "exit_code": 3, "message": "boom"}
    sim.store.create(POD, two_container_pod(failing, {"run_seconds": None}), "default")
    ended = await eventually(lambda: state_of(sim, "a").get("terminated"), what="a exited")
    start = datetime.fromisoformat(ended["startedAt"])

    async def logs(*args: str) -> str:
        return await kubectl(sim, tmp_path, "logs", "p", *args)

    assert await logs("-c", "a") == "one\ntwo\nthree\nboom\n"
    assert await logs("-c", "a", "--tail=2") == "three\nboom\n"
    assert await logs("-c", "a", "--since=1h") == "one\ntwo\nthree\nboom\n"
    assert await logs("-c", "a", "--limit-bytes=6") == "one\ntw"
    stamps = [timestamp(start + timedelta(seconds=s)) for s in (0, 1, 2, 5)]
    assert await logs("-c", "a", "--timestamps") == "".join(
        f"{at} {text}\n" for at, text in zip(stamps, [*LINES, "boom"], strict=True)
    )
    code, out, err = await run_kubectl(sim, tmp_path, "logs", "p")
    assert (code, out) == (0, "one\ntwo\nthree\nboom\n"), err
    assert 'Defaulted container "a" out of: a, b' in err
    code, _, err = await run_kubectl(sim, tmp_path, "logs", "p", "-c", "a", "--previous")
    assert code != 0
    assert 'previous terminated container "a" in pod "p" not found' in err


async def test_kubectl_logs_follow_ends_with_the_container(
    make_kubesim: MakeKubeSim, tmp_path: Path
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=5.0)
    sim.store.create(
        POD, two_container_pod({"logs": LINES, "run_seconds": 6}, {"run_seconds": None}), "default"
    )
    await eventually(lambda: "running" in state_of(sim, "a"), what="a running")
    out = await kubectl(sim, tmp_path, "logs", "p", "-c", "a", "-f")
    assert out == "one\ntwo\nthree\n"
    assert "terminated" in state_of(sim, "a"), "kubectl -f returned before the container ended"
    assert "running" in state_of(sim, "b")
