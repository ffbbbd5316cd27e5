"""Helpers shared by the examples: arguments, the gRPC stubs, work-unit building, a
polling wait with a deadline, and printing.

Every example talks to a running XMC (``make run``) through the generated gRPC client only.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.priority_pb2 import Priority
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus, WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import scheduling_pb2_grpc

T = TypeVar("T")

DEFAULT_ENDPOINT = "127.0.0.1:50051"
BEHAVIOR_ANNOTATION = "kubesim.xmc/behavior"
State = WorkUnitStatus.WorkUnitState
TERMINAL = frozenset({State.COMPLETED, State.FAILED, State.STOPPED})


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every example takes."""
    args = argparse.ArgumentParser(description=description)
    args.add_argument(
        "--endpoint",
        default=DEFAULT_ENDPOINT,
        help=f"ESS gRPC address (default {DEFAULT_ENDPOINT}, the `make run` ESS)",
    )
    args.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    return args


@dataclass
class Client:
    """The two services the examples use, over one plaintext channel (the local run has
    auth disabled, so no token is sent)."""

    channel: Any
    api: Any  # api_pb2_grpc.ExperimentStateServiceStub
    scheduling: Any  # scheduling_pb2_grpc.SchedulingServiceStub

    def close(self) -> None:
        self.channel.close()


def connect(endpoint: str) -> Client:
    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
    except grpc.FutureTimeoutError:
        raise SystemExit(f"no ESS at {endpoint}: is `make run` running?") from None
    return Client(
        channel=channel,
        api=api_pb2_grpc.ExperimentStateServiceStub(channel),
        scheduling=scheduling_pb2_grpc.SchedulingServiceStub(channel),
    )


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def state_name(state: int) -> str:
    return str(State.Name(state))  # type: ignore[arg-type]


def severity_name(severity: int) -> str:
    return str(StructuredMessage.Severity.Name(severity))  # type: ignore[arg-type]


def create_experiment(
    client: Client, title: str, priority: Priority.ValueType = Priority.PRIORITY_UNSPECIFIED
) -> str:
    """Create an experiment; its resource name (``experiments/<id>``)."""
    experiment = client.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title=title, priority=priority))
    )
    say(f"created {experiment.name} ({title!r})")
    return str(experiment.name)


def work_unit(
    *,
    behavior: dict[str, Any] | None = None,
    image: str = "python:3.11",
    cpu_millicores: int = 1000,
    priority: Priority.ValueType = Priority.PRIORITY_UNSPECIFIED,
    queue: str = "cpu-queue",
    args: dict[str, str] | None = None,
) -> WorkUnit:
    """One job, one container; ``behavior`` scripts the simulated pod (docs/kubesim.md)."""
    unit = WorkUnit(priority=priority)
    unit.executable.scheduling_constraints.queue_name = queue
    job = unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = image
    job.spec.command.extend(["python", "train.py"])
    job.spec.resources.cpu_resources.cpu_millicores = cpu_millicores
    for key, value in (args or {}).items():
        job.spec.args[key] = value
    if behavior is not None:
        job.annotations[BEHAVIOR_ANNOTATION] = json.dumps(behavior)
    return unit


def create_work_unit(client: Client, experiment: str, unit: WorkUnit) -> str:
    """CreateWorkUnit; the work unit's resource name (taken from the operation's name)."""
    operation = client.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment, work_unit=unit)
    )
    return str(operation.name).split("/operations/")[0]


def work_unit_state(client: Client, name: str) -> int:
    unit = client.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
    return int(unit.current_work_unit_execution.status.state)


def states(client: Client, names: Iterable[str]) -> dict[str, int]:
    return {name: work_unit_state(client, name) for name in names}


def stop_work_unit(client: Client, name: str) -> None:
    client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))
    say(f"StopWorkUnit {name}")


def wait_for(
    probe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    within: float,
    what: str,
    show: Callable[[T], str] = str,
    every: float = 0.5,
) -> T:
    """Poll ``probe`` until ``done`` holds, printing each change; SystemExit after
    ``within`` seconds (a deadline, never an open-ended sleep)."""
    deadline = time.monotonic() + within
    last: str | None = None
    while True:
        value = probe()
        shown = show(value)
        if shown != last:
            say(shown)
            last = shown
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {within:.0f}s waiting for {what}; last: {shown}")
        time.sleep(every)


def summary(found: dict[str, int]) -> str:
    """``RUNNING=3 SCHEDULING=1`` for a set of work units."""
    counts: dict[str, int] = {}
    for state in found.values():
        counts[state_name(state)] = counts.get(state_name(state), 0) + 1
    return " ".join(f"{name}={count}" for name, count in sorted(counts.items()))


def print_experiment(client: Client, experiment: str) -> None:
    """The experiment's status and rollups (child state counts, message severity counts)."""
    status = client.api.GetExperimentStatus(api_pb2.GetExperimentStatusRequest(name=experiment))
    launch = ExperimentStatus.LaunchState.Name(status.launch_state)
    active = ExperimentStatus.ActiveState.Name(status.active_state)
    print(f"{experiment}: launch_state={launch} active_state={active}")
    for count in status.child_state_counts:
        print(f"  work units {state_name(count.state):<18} {count.count}")
    for count in status.message_severity_counts:
        print(f"  messages   {severity_name(count.severity):<18} {count.count}")


def print_status_messages(client: Client, parent: str) -> None:
    """Every status message of a work unit (or experiment), oldest first."""
    found = client.api.ListStatusMessages(api_pb2.ListStatusMessagesRequest(parent=parent))
    for message in found.status_messages:
        content = message.content
        print(
            f"  [{severity_name(content.severity)}] "
            f"{StructuredMessage.Source.Name(content.source)}: {content.user_facing_text}"
        )
