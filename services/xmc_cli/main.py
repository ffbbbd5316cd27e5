"""The ``xmc`` command line: experiments, work units, scheduling and operations over gRPC."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import click
import grpc
import yaml
from google.longrunning import operations_grpc_pb2, operations_proto_pb2
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console
from rich.live import Live
from rich.table import Table

from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import JobSetExecutable, WorkUnit
from xmc_api.internal.v1 import scheduling_pb2, scheduling_pb2_grpc

DEFAULT_ENDPOINT = "127.0.0.1:50051"
_WU_SHORT = re.compile(r"^(\d+)/(\d+)$")

#: The published client's default Kueue LocalQueue.
DEFAULT_QUEUE = "cpu-queue"


class CliError(click.ClickException):
    """A failure reported as ``error: <message>`` on stderr with exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def fail(message: str) -> NoReturn:
    raise CliError(message)


def experiment_name(value: str) -> str:
    """``7`` → ``experiments/7``; anything else goes to the server as is."""
    return f"experiments/{value}" if value.isdigit() else value


def work_unit_name(value: str) -> str:
    """``7/3`` → ``experiments/7/workUnits/3``; anything else goes to the server as is."""
    match = _WU_SHORT.match(value)
    return f"experiments/{match[1]}/workUnits/{match[2]}" if match else value


def fmt_time(ts: Timestamp) -> str:
    if not ts.seconds and not ts.nanos:
        return ""
    return ts.ToDatetime().replace(microsecond=0).isoformat() + "Z"


def state_name(value: int) -> str:
    try:
        return WorkUnitState(value).name
    except ValueError:
        return str(value)


def short_id(name: str) -> str:
    """The trailing id of a resource name."""
    return name.rsplit("/", 1)[-1]


@dataclass
class Client:
    """Connection settings and lazily built stubs; every call goes through :meth:`call`."""

    endpoint: str
    token: str | None
    tls: bool
    output: str
    rpc_timeout: float
    _channel: Any = field(default=None, init=False)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def channel(self) -> Any:
        if self._channel is None:
            if self.tls:
                self._channel = grpc.secure_channel(self.endpoint, grpc.ssl_channel_credentials())
            else:
                self._channel = grpc.insecure_channel(self.endpoint)
        return self._channel

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    @property
    def api(self) -> api_pb2_grpc.ExperimentStateServiceStub:
        return api_pb2_grpc.ExperimentStateServiceStub(self.channel())

    @property
    def operations(self) -> operations_grpc_pb2.OperationsStub:
        return operations_grpc_pb2.OperationsStub(self.channel())

    @property
    def scheduling(self) -> scheduling_pb2_grpc.SchedulingServiceStub:
        return scheduling_pb2_grpc.SchedulingServiceStub(self.channel())

    def call(
        self, method: Callable[..., Any], request: Message, timeout: float | None = None
    ) -> Any:
        """Invoke a unary RPC; gRPC errors become ``error: CODE: details``."""
        metadata = (("authorization", f"Bearer {self.token}"),) if self.token else ()
        try:
            return method(request, metadata=metadata, timeout=timeout or self.rpc_timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            hint = (
                f" (is the ESS up at {self.endpoint}?)"
                if code == grpc.StatusCode.UNAVAILABLE
                else ""
            )
            fail(f"{code.name if code else 'UNKNOWN'}: {details}{hint}")

    def emit(self, data: Any) -> None:
        """Print JSON (``--output json``)."""
        click.echo(json.dumps(data, indent=2, sort_keys=True))


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)


pass_client = click.make_pass_decorator(Client)


@click.group()
@click.option(
    "--endpoint",
    envvar="XMANAGER_ENDPOINT",
    default=DEFAULT_ENDPOINT,
    show_default=True,
    help="ESS host:port (env XMANAGER_ENDPOINT).",
)
@click.option(
    "--token", envvar="XMC_AUTH_TOKEN", default=None, help="Bearer token (env XMC_AUTH_TOKEN)."
)
@click.option(
    "--tls/--no-tls",
    default=None,
    help="Use TLS (default plaintext; XMANAGER_INSECURE_GRPC=false means TLS).",
)
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table")
@click.option("--rpc-timeout", type=float, default=30.0, show_default=True, help="Seconds per RPC.")
@click.pass_context
def cli(
    ctx: click.Context,
    endpoint: str,
    token: str | None,
    tls: bool | None,
    output: str,
    rpc_timeout: float,
) -> None:
    """Control XMC experiments and work units."""
    if tls is None:
        tls = os.environ.get("XMANAGER_INSECURE_GRPC", "true").strip().lower() in (
            "false",
            "0",
            "no",
        )
    client = Client(endpoint, token or None, tls, output, rpc_timeout)
    ctx.obj = client
    ctx.call_on_close(client.close)


# ---------------------------------------------------------------------------- experiments


@cli.group()
def experiments() -> None:
    """Create, list and inspect experiments."""


def experiment_row(e: Experiment) -> list[str]:
    status = e.status
    return [
        short_id(e.name),
        e.title,
        e.creator,
        ExperimentStatus.ActiveState.Name(status.active_state),
        ExperimentStatus.LaunchState.Name(status.launch_state),
        ",".join(e.tags),
        fmt_time(e.create_time),
    ]


EXPERIMENT_COLUMNS = ["xid", "title", "creator", "active", "launch", "tags", "created"]


@experiments.command("create")
@click.option("--title", required=True)
@click.option("--tag", "tags", multiple=True, help="Repeatable.")
@click.option("--notes", default="")
@pass_client
def experiments_create(client: Client, title: str, tags: tuple[str, ...], notes: str) -> None:
    """Create an experiment."""
    experiment = Experiment(title=title, tags=list(tags), notes=notes)
    created: Experiment = client.call(
        client.api.CreateExperiment, api_pb2.CreateExperimentRequest(experiment=experiment)
    )
    if client.json:
        client.emit(to_dict(created))
    else:
        click.echo(created.name)


@experiments.command("list")
@click.option("--filter", "filter_", default="", help="AIP-160 filter.")
@pass_client
def experiments_list(client: Client, filter_: str) -> None:
    """List experiments."""
    found: list[Experiment] = list_all(
        client,
        client.api.ListExperiments,
        api_pb2.ListExperimentsRequest(filter=filter_),
        "experiments",
    )
    if client.json:
        client.emit([to_dict(e) for e in found])
    else:
        print_table(None, EXPERIMENT_COLUMNS, [experiment_row(e) for e in found])


@experiments.command("get")
@click.argument("name")
@pass_client
def experiments_get(client: Client, name: str) -> None:
    """Show one experiment (``experiments/7`` or ``7``)."""
    e: Experiment = client.call(
        client.api.GetExperiment, api_pb2.GetExperimentRequest(name=experiment_name(name))
    )
    if client.json:
        client.emit(to_dict(e))
        return
    print_table(e.name, EXPERIMENT_COLUMNS, [experiment_row(e)])
    counts = [[state_name(c.state), str(c.count)] for c in e.status.child_state_counts if c.count]
    if counts:
        print_table("work units", ["state", "count"], counts)


# ----------------------------------------------------------------------------- work units


@cli.group()
def wu() -> None:
    """Create, inspect, stop and restart work units."""


def load_spec(path: Path) -> WorkUnit:
    """A WorkUnit, or a JobSetExecutable, in protobuf JSON form (YAML or JSON file)."""
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        fail(f"--file: cannot read {path}: {exc}")
    if not isinstance(data, dict):
        fail(f"--file: {path} must hold a mapping")
    work_unit = WorkUnit()
    try:
        if "executable" in data or "work_unit_type" in data or "workUnitType" in data:
            json_format.ParseDict(data, work_unit)
        else:
            json_format.ParseDict(data, work_unit.executable.jobset)
    except json_format.ParseError as exc:
        fail(f"--file: {path}: {exc}")
    return work_unit


def build_work_unit(
    file: Path | None,
    image: str | None,
    command: str | None,
    queue: str | None,
    cpu: int | None,
    memory_bytes: int | None,
    env: tuple[str, ...],
    job_name: str,
    replicas: int,
    tags: tuple[str, ...],
) -> WorkUnit:
    if file is not None:
        work_unit = load_spec(file)
        if image or command:
            fail("--file cannot be combined with --image/--command")
    else:
        if not image:
            fail("--image (or --file) is required")
        work_unit = WorkUnit()
        jobset: JobSetExecutable = work_unit.executable.jobset
        job = jobset.jobs.add(name=job_name, replicas=replicas)
        job.spec.docker_image = image
        if command:
            job.spec.command.extend(shlex.split(command))
        if cpu is not None:
            job.spec.resources.cpu_resources.cpu_millicores = cpu
        if memory_bytes is not None:
            job.spec.resources.cpu_resources.memory_bytes = memory_bytes
        for item in env:
            key, sep, value = item.partition("=")
            if not sep:
                fail(f"--env: expected KEY=VALUE, got {item!r}")
            job.spec.env_vars[key] = value
    constraints = work_unit.executable.scheduling_constraints
    # The published client's default queue, unless the flag or the file names one.
    constraints.queue_name = queue or constraints.queue_name or DEFAULT_QUEUE
    work_unit.tags.extend(tags)
    return work_unit


@wu.command("create")
@click.argument("experiment")
@click.option("--file", "-f", "file", type=click.Path(path_type=Path), help="YAML/JSON spec.")
@click.option("--image", help="Container image (single-container work unit).")
@click.option("--command", help='Command line, e.g. "python train.py".')
@click.option("--queue", help=f"Scheduling queue name (default {DEFAULT_QUEUE}).")
@click.option("--cpu", type=int, help="CPU millicores.")
@click.option("--memory-bytes", type=int)
@click.option("--env", multiple=True, help="KEY=VALUE, repeatable.")
@click.option("--job-name", default="main", show_default=True)
@click.option("--replicas", type=int, default=1, show_default=True)
@click.option("--tag", "tags", multiple=True)
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True)
@pass_client
def wu_create(
    client: Client,
    experiment: str,
    file: Path | None,
    image: str | None,
    command: str | None,
    queue: str | None,
    cpu: int | None,
    memory_bytes: int | None,
    env: tuple[str, ...],
    job_name: str,
    replicas: int,
    tags: tuple[str, ...],
    count: int,
) -> None:
    """Create COUNT work units in EXPERIMENT; prints their names and operations."""
    work_unit = build_work_unit(
        file, image, command, queue, cpu, memory_bytes, env, job_name, replicas, tags
    )
    parent = experiment_name(experiment)
    created = []
    for _ in range(count):
        op: operations_proto_pb2.Operation = client.call(
            client.api.CreateWorkUnit,
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit),
        )
        meta = OperationMetadata()
        op.metadata.Unpack(meta)
        created.append({"work_unit": meta.target, "operation": op.name})
    if client.json:
        client.emit(created)
    else:
        print_table(
            None, ["work unit", "operation"], [[c["work_unit"], c["operation"]] for c in created]
        )


def list_all(client: Client, method: Any, request: Any, field: str) -> list[Any]:
    """Every item of a paginated List call: ``request`` is sent again with each page's
    token until the server says there is no next page."""
    found: list[Any] = []
    request.page_size = 1000
    while True:
        response = client.call(method, request)
        found.extend(getattr(response, field))
        request.page_token = response.next_page_token
        if not request.page_token:
            return found


def list_work_units(client: Client, parent: str, filter_: str = "") -> list[WorkUnit]:
    return list_all(
        client,
        client.api.ListWorkUnits,
        api_pb2.ListWorkUnitsRequest(parent=parent, filter=filter_),
        "work_units",
    )


WU_COLUMNS = ["wid", "state", "execution", "image", "tags", "state since"]


def work_unit_row(w: WorkUnit) -> list[str]:
    execution = w.current_work_unit_execution
    jobs = w.executable.jobset.jobs
    return [
        short_id(w.name),
        state_name(execution.status.state),
        short_id(execution.name),
        jobs[0].spec.docker_image if jobs else "",
        ",".join(w.tags),
        fmt_time(execution.status.state_update_time),
    ]


def work_units_table(parent: str, units: list[WorkUnit]) -> Table:
    table = Table(title=f"{parent} — {len(units)} work units")
    for column in WU_COLUMNS:
        table.add_column(column)
    for w in units:
        table.add_row(*work_unit_row(w))
    return table


@wu.command("list")
@click.argument("experiment")
@click.option("--filter", "filter_", default="", help="AIP-160 filter.")
@pass_client
def wu_list(client: Client, experiment: str, filter_: str) -> None:
    """List the work units of EXPERIMENT."""
    units = list_work_units(client, experiment_name(experiment), filter_)
    if client.json:
        client.emit([to_dict(w) for w in units])
    else:
        print_table(None, WU_COLUMNS, [work_unit_row(w) for w in units])


@wu.command("get")
@click.argument("work_unit")
@pass_client
def wu_get(client: Client, work_unit: str) -> None:
    """Show one work unit (``experiments/7/workUnits/3`` or ``7/3``)."""
    w: WorkUnit = client.call(
        client.api.GetWorkUnit, api_pb2.GetWorkUnitRequest(name=work_unit_name(work_unit))
    )
    if client.json:
        client.emit(to_dict(w))
        return
    print_table(w.name, WU_COLUMNS, [work_unit_row(w)])
    status = w.current_work_unit_execution.status
    for label, message in (("system", status.system_message), ("user", status.user_message)):
        if message.user_facing_text:
            click.echo(f"{label}: {message.user_facing_text}")


def print_operation(client: Client, op: operations_proto_pb2.Operation) -> None:
    if client.json:
        client.emit(to_dict(op))
        return
    meta = OperationMetadata()
    if op.HasField("metadata"):
        op.metadata.Unpack(meta)
    rows = [["name", op.name], ["done", str(op.done).lower()], ["target", meta.target]]
    if op.HasField("error"):
        rows.append(["error", f"{_code_name(op.error.code)}: {op.error.message}"])
    print_table(None, ["field", "value"], rows)


def _code_name(code: int) -> str:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return str(status.name)
    return str(code)


@wu.command("stop")
@click.argument("work_unit")
@pass_client
def wu_stop(client: Client, work_unit: str) -> None:
    """Stop a work unit; prints the operation."""
    op = client.call(
        client.api.StopWorkUnit, api_pb2.StopWorkUnitRequest(name=work_unit_name(work_unit))
    )
    print_operation(client, op)


@wu.command("restart")
@click.argument("work_unit")
@pass_client
def wu_restart(client: Client, work_unit: str) -> None:
    """Restart a work unit (a new execution); prints the operation."""
    op = client.call(
        client.api.RestartWorkUnit,
        api_pb2.RestartWorkUnitRequest(name=work_unit_name(work_unit)),
    )
    print_operation(client, op)


@wu.command("history")
@click.argument("work_unit")
@pass_client
def wu_history(client: Client, work_unit: str) -> None:
    """List a work unit's executions, the current (ACTIVE) one included."""
    response = client.call(
        client.api.ListWorkUnitExecutions,
        api_pb2.ListWorkUnitExecutionsRequest(parent=work_unit_name(work_unit)),
    )
    executions: list[WorkUnitExecution] = list(response.work_unit_executions)
    if client.json:
        client.emit([to_dict(e) for e in executions])
        return
    rows = [
        [
            short_id(e.name),
            WorkUnitExecution.WorkUnitExecutionState.Name(e.state),
            state_name(e.status.state),
            fmt_time(e.create_time),
            fmt_time(e.complete_time),
        ]
        for e in executions
    ]
    print_table(None, ["eid", "execution", "state", "created", "completed"], rows)


@wu.command("messages")
@click.argument("work_unit")
@click.option("--filter", "filter_", default="", help="AIP-160 filter.")
@pass_client
def wu_messages(client: Client, work_unit: str, filter_: str) -> None:
    """List a work unit's status messages."""
    found: list[StatusMessage] = list_all(
        client,
        client.api.ListStatusMessages,
        api_pb2.ListStatusMessagesRequest(parent=work_unit_name(work_unit), filter=filter_),
        "status_messages",
    )
    if client.json:
        client.emit([to_dict(m) for m in found])
        return
    rows = [
        [
            str(m.execution_id),
            StructuredMessage.Severity.Name(m.content.severity),
            StructuredMessage.Source.Name(m.content.source),
            fmt_time(m.content.create_time),
            m.content.user_facing_text,
        ]
        for m in found
    ]
    print_table(None, ["eid", "severity", "source", "time", "text"], rows)


# ---------------------------------------------------------------------------------- watch


@cli.command("watch")
@click.argument("experiment")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds.")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@pass_client
def watch(client: Client, experiment: str, interval: float, once: bool) -> None:
    """Live table of EXPERIMENT's work-unit states (Ctrl-C to quit)."""
    parent = experiment_name(experiment)
    if once:
        units = list_work_units(client, parent)
        if client.json:
            client.emit([to_dict(w) for w in units])
        else:
            Console(width=160).print(work_units_table(parent, units))
        return

    def tables() -> Iterator[Table]:
        while True:
            yield work_units_table(parent, list_work_units(client, parent))
            time.sleep(interval)

    frames = tables()
    try:
        with Live(next(frames), refresh_per_second=4) as live:
            for table in frames:
                live.update(table)
    except KeyboardInterrupt:
        pass


# ----------------------------------------------------------------------------- scheduling


@cli.group()
def scheduling() -> None:
    """Global scheduling pause and resume (service accounts and admins)."""


def print_scheduling(client: Client, state: scheduling_pb2.SchedulingState) -> None:
    if client.json:
        client.emit(
            json_format.MessageToDict(
                state, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
        )
        return
    rows = [
        ["paused", str(state.paused).lower()],
        ["reason", state.reason],
        ["updated_by", state.updated_by],
        ["update_time", fmt_time(state.update_time)],
        ["paused_task_count", str(state.paused_task_count)],
    ]
    print_table(None, ["field", "value"], rows)


@scheduling.command("pause")
@click.option("--reason", default="")
@pass_client
def scheduling_pause(client: Client, reason: str) -> None:
    """Pause scheduling: new tasks are parked until resume."""
    state = client.call(
        client.scheduling.PauseScheduling, scheduling_pb2.PauseSchedulingRequest(reason=reason)
    )
    print_scheduling(client, state)


@scheduling.command("resume")
@pass_client
def scheduling_resume(client: Client) -> None:
    """Resume scheduling and release parked tasks."""
    state = client.call(
        client.scheduling.ResumeScheduling, scheduling_pb2.ResumeSchedulingRequest()
    )
    print_scheduling(client, state)


@scheduling.command("status")
@pass_client
def scheduling_status(client: Client) -> None:
    """Show the scheduling flag."""
    state = client.call(
        client.scheduling.GetSchedulingState, scheduling_pb2.GetSchedulingStateRequest()
    )
    print_scheduling(client, state)


# ----------------------------------------------------------------------------- operations


@cli.group()
def operations() -> None:
    """Inspect long-running operations."""


@operations.command("get")
@click.argument("name")
@pass_client
def operations_get(client: Client, name: str) -> None:
    """Show an operation."""
    op = client.call(
        client.operations.GetOperation, operations_proto_pb2.GetOperationRequest(name=name)
    )
    print_operation(client, op)


@operations.command("wait")
@click.argument("name")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds.")
@pass_client
def operations_wait(client: Client, name: str, timeout: float) -> None:
    """Wait for an operation; exit 0 done, 1 done with an error, 2 still running."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = max(deadline - time.monotonic(), 0.0)
        step = min(remaining, 60.0)
        duration = Duration()
        duration.FromTimedelta(timedelta(seconds=step))
        op: operations_proto_pb2.Operation = client.call(
            client.operations.WaitOperation,
            operations_proto_pb2.WaitOperationRequest(name=name, timeout=duration),
            timeout=step + client.rpc_timeout,
        )
        if op.done or time.monotonic() >= deadline:
            break
    print_operation(client, op)
    if not op.done:
        sys.exit(2)
    if op.HasField("error"):
        sys.exit(1)


def main() -> None:
    """Console entry point."""
    cli(prog_name="xmc")
