"""How a simulated container behaves, read from pod annotations (pure).

Tests and demos script failures without real images: the pod template carries
``kubesim.xmc/behavior`` (every regular container) and/or
``kubesim.xmc/behavior.<container>`` (one container, regular or init; its keys override
the pod-wide ones). Both hold a JSON object::

    {"start_seconds": 5, "run_seconds": 30, "exit_code": 1}
    {"crash": true}                 # exits at once (exit code 1 unless given)
    {"oom_killed": true}            # after run_seconds (at once if null): OOMKilled, exit 137
    {"image_pull_error": true}      # ErrImagePull, then ImagePullBackOff; never runs
    {"config_error": true}          # CreateContainerConfigError; never runs
    {"waiting_reason": "InvalidImageName", "message": "..."}   # any waiting reason
    {"run_seconds": null}           # runs until the pod is deleted
    {"logs": ["epoch 1", "epoch 2"], "log_every_seconds": 5}   # what it prints

Times are simulated seconds. Without annotations a regular container starts after the
kubelet's ``pod_start_seconds`` and exits 0 after ``pod_run_seconds``; an init container
completes at once. A malformed annotation is not an exception: the container reports
``CreateContainerConfigError`` naming the problem, the way a broken pod spec shows up
on a real cluster, so a typo in a test is visible in the pod instead of in a log.

``logs`` are the lines the container prints, one every ``log_every_seconds`` (default 1)
from the start of each run; ``container_logs.py`` turns them into the log the
``pods/{name}/log`` subresource serves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubesim.container_logs import LogScript

BEHAVIOR_ANNOTATION = "kubesim.xmc/behavior"
CONTAINER_BEHAVIOR_PREFIX = "kubesim.xmc/behavior."

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"

_KEYS = frozenset(
    {
        "start_seconds",
        "run_seconds",
        "exit_code",
        "crash",
        "oom_killed",
        "image_pull_error",
        "config_error",
        "waiting_reason",
        "message",
        "logs",
        "log_every_seconds",
    }
)


@dataclass(frozen=True)
class ContainerBehavior:
    start_seconds: float
    """Simulated seconds from the container's turn to start until it runs."""
    run_seconds: float | None
    """Simulated seconds it runs before exiting; None runs until the pod is deleted."""
    exit_code: int = 0
    waiting_reason: str | None = None
    """When set the container never starts and waits with this reason."""
    message: str | None = None
    """Message for the waiting or terminated state (a default is made when None)."""
    terminated_reason: str | None = None
    """``state.terminated.reason`` when it exits; None: ``Completed`` or ``Error`` by the
    exit code, as a container runtime reports a plain exit."""
    logs: tuple[str, ...] = ()
    """Lines the container prints, one every ``log_every_seconds`` from its start."""
    log_every_seconds: float = 1.0

    @property
    def log_script(self) -> LogScript:
        """What the container prints, for the log model (``kubesim.container_logs``)."""
        return LogScript(self.logs, self.log_every_seconds, self.run_seconds)


def _number(spec: Mapping[str, Any], key: str, default: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{key} must be a non-negative number")
    return float(value)


def _logs(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], float]:
    lines = spec.get("logs", [])
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise ValueError("logs must be a list of strings")
    every = _number(spec, "log_every_seconds", 1.0)
    if every == 0:
        raise ValueError("log_every_seconds must be a positive number")
    return tuple(lines), every


def behavior_from_spec(
    spec: Mapping[str, Any], *, start_seconds: float, run_seconds: float
) -> ContainerBehavior:
    """One container's behaviour from its merged JSON spec; ValueError when invalid."""
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ValueError(f"unknown keys {unknown}")
    start = _number(spec, "start_seconds", start_seconds)
    run: float | None = None
    if "run_seconds" not in spec or spec["run_seconds"] is not None:
        run = _number(spec, "run_seconds", run_seconds)
    exit_code = spec.get("exit_code", 0)
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise ValueError("exit_code must be an integer")
    message = spec.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError("message must be a string")
    waiting = spec.get("waiting_reason")
    if waiting is not None and not isinstance(waiting, str):
        raise ValueError("waiting_reason must be a string")
    if spec.get("image_pull_error"):
        waiting = ERR_IMAGE_PULL
    if spec.get("config_error"):
        waiting = CREATE_CONTAINER_CONFIG_ERROR
    if spec.get("crash"):
        run, exit_code = 0.0, exit_code or 1
    terminated_reason = None
    if spec.get("oom_killed"):
        # The kernel's OOM killer sends SIGKILL: 128 + 9, and the kubelet says why.
        terminated_reason, exit_code = "OOMKilled", exit_code or 137
        run = 0.0 if run is None else run
    logs, every = _logs(spec)
    return ContainerBehavior(
        start, run, exit_code, waiting, message, terminated_reason, logs, every
    )


def _load(annotations: Mapping[str, str], key: str) -> dict[str, Any]:
    raw = annotations.get(key)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def _invalid(key: str, error: ValueError) -> ContainerBehavior:
    return ContainerBehavior(
        0.0,
        None,
        waiting_reason=CREATE_CONTAINER_CONFIG_ERROR,
        message=f"kubesim: invalid annotation {key}: {error}",
    )


def parse_behaviors(
    annotations: Mapping[str, str] | None,
    containers: Sequence[str],
    init_containers: Sequence[str] = (),
    *,
    start_seconds: float,
    run_seconds: float,
) -> dict[str, ContainerBehavior]:
    """Every container's behaviour by name; ``start_seconds``/``run_seconds`` are the
    kubelet's defaults for regular containers (init containers default to 0)."""
    annotations = annotations or {}
    try:
        pod_wide = _load(annotations, BEHAVIOR_ANNOTATION)
        pod_error = None
    except ValueError as error:
        pod_wide, pod_error = {}, error
    result: dict[str, ContainerBehavior] = {}
    for name, is_init in [(c, True) for c in init_containers] + [(c, False) for c in containers]:
        key = CONTAINER_BEHAVIOR_PREFIX + name
        if pod_error is not None and not is_init:
            result[name] = _invalid(BEHAVIOR_ANNOTATION, pod_error)
            continue
        try:
            own = _load(annotations, key)
            merged = own if is_init else {**pod_wide, **own}
            result[name] = behavior_from_spec(
                merged,
                start_seconds=0.0 if is_init else start_seconds,
                run_seconds=0.0 if is_init else run_seconds,
            )
        except ValueError as error:
            result[name] = _invalid(key if key in annotations else BEHAVIOR_ANNOTATION, error)
    return result
