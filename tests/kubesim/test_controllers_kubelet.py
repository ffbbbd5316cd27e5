"""The simulated kubelet on bare pods (no JobSet, no Kueue): phases, container states
from the behaviour annotations, and timers that die with their pods."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from kubesim.clock import SimClock
from kubesim.controllers import ControllerSettings
from kubesim.controllers.kubelet import Kubelet
from kubesim.resources import POD
from kubesim.store import ObjectStore
from tests.kubesim.controller_support import Sim, condition_is, running_sim

KUBELET_ONLY = ControllerSettings(jobset=False, kueue=False)


def pod(
    name: str,
    *,
    containers: tuple[str, ...] = ("main",),
    init_containers: tuple[str, ...] = (),
    annotations: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {k: json.dumps(v) for k, v in (annotations or {}).items()},
        },
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": c, "image": f"img/{c}"} for c in init_containers],
            "containers": [{"name": c, "image": f"img/{c}"} for c in containers],
        },
    }


def phase(sim: Sim, name: str) -> str | None:
    found = sim.store.find(POD, "default", name)
    return ((found or {}).get("status") or {}).get("phase")


def container_state(sim: Sim, name: str, container: str, *, init: bool = False) -> dict[str, Any]:
    found = sim.store.find(POD, "default", name) or {}
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (found.get("status") or {}).get(key) or []:
        if status["name"] == container:
            return dict(status["state"])
    return {}


async def test_plain_pod_starts_ready_then_succeeds() -> None:
    async with running_sim(KUBELET_ONLY) as sim:
        sim.create(POD, pod("plain"))
        running = await sim.until(
            lambda: sim.store.find(POD, "default", "plain"),
            lambda p: (p.get("status") or {}).get("phase") == "Running",
            "the pod to run",
        )
        assert condition_is(running, "Ready")
        assert "running" in running["status"]["containerStatuses"][0]["state"]
        assert running["status"]["containerStatuses"][0]["ready"] is True

        await sim.wait_for(lambda: phase(sim, "plain") == "Succeeded", "the pod to succeed")
        done = sim.store.get(POD, "default", "plain")
        terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
        assert condition_is(done, "Ready", "False")


async def test_image_pull_error_waits_on_the_right_container_and_never_runs() -> None:
    async with running_sim(KUBELET_ONLY) as sim:
        annotations = {"kubesim.xmc/behavior.bad": {"image_pull_error": True}}
        sim.create(POD, pod("pull", containers=("good", "bad"), annotations=annotations))
        await sim.wait_for(
            lambda: (
                container_state(sim, "pull", "bad").get("waiting", {}).get("reason")
                == "ErrImagePull"
            ),
            "ErrImagePull",
        )
        await sim.wait_for(
            lambda: (
                container_state(sim, "pull", "bad").get("waiting", {}).get("reason")
                == "ImagePullBackOff"
            ),
            "ImagePullBackOff",
        )
        waiting = container_state(sim, "pull", "bad")["waiting"]
        assert waiting["message"] == 'Back-off pulling image "img/bad"'
        assert "waiting" not in container_state(sim, "pull", "good")  # it ran
        assert phase(sim, "pull") == "Pending"


@pytest.mark.parametrize(
    ("behavior", "reason"),
    [
        pytest.param(
            {"config_error": True}, "CreateContainerConfigError", id="container config error"
        ),
        pytest.param(
            {"waiting_reason": "InvalidImageName"}, "InvalidImageName", id="any waiting reason"
        ),
        pytest.param({"run_secs": 1}, "CreateContainerConfigError", id="a typo in the annotation"),
    ],
)
async def test_waiting_reasons_keep_the_pod_pending(behavior: dict[str, Any], reason: str) -> None:
    async with running_sim(KUBELET_ONLY) as sim:
        sim.create(POD, pod("stuck", annotations={"kubesim.xmc/behavior": behavior}))
        await sim.wait_for(
            lambda: (
                container_state(sim, "stuck", "main").get("waiting", {}).get("reason") == reason
            ),
            reason,
        )
        assert phase(sim, "stuck") == "Pending"


async def test_failing_init_container_fails_the_pod_before_the_main_container() -> None:
    async with running_sim(KUBELET_ONLY) as sim:
        annotations = {"kubesim.xmc/behavior.setup": {"run_seconds": 1, "exit_code": 2}}
        sim.create(POD, pod("init", init_containers=("setup",), annotations=annotations))
        await sim.wait_for(lambda: phase(sim, "init") == "Failed", "the pod to fail")
        assert container_state(sim, "init", "setup", init=True)["terminated"]["exitCode"] == 2
        assert container_state(sim, "init", "main")["waiting"]["reason"] == "PodInitializing"


async def test_default_init_containers_complete_at_once() -> None:
    async with running_sim(KUBELET_ONLY) as sim:
        sim.create(POD, pod("init-ok", init_containers=("setup",)))
        await sim.wait_for(lambda: phase(sim, "init-ok") == "Succeeded", "the pod to succeed")
        assert (
            container_state(sim, "init-ok", "setup", init=True)["terminated"]["reason"]
            == "Completed"
        )


async def test_deleting_a_pod_cancels_its_timer() -> None:
    clock = SimClock(100)
    store = ObjectStore(clock=clock)
    kubelet = Kubelet(store, clock, pod_start_seconds=1, pod_run_seconds=1000)
    store.create(POD, pod("short-lived"))
    kubelet.reconcile(("default", "short-lived"))
    run = kubelet._runs[("default", "short-lived")]
    assert not run.task.done()

    store.delete(POD, "default", "short-lived")
    kubelet.reconcile(("default", "short-lived"))

    with pytest.raises(asyncio.CancelledError):
        await run.task
    assert kubelet._runs == {}
    await kubelet.close()
