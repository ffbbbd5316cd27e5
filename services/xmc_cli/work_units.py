"""``xmc wu``: create, list, inspect, stop and restart work units."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import grpc
from google.longrunning import operations_proto_pb2
from rich.table import Table

from xmc.model.args import work_unit_args
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1 import retry_pb2

from .audit import attribution_lines, attributions_dict, fetch_attributions
from .client import (
    Client,
    experiment_name,
    fail,
    fmt_time,
    list_all,
    list_work_units,
    pass_client,
    print_table,
    short_id,
    state_name,
    to_dict,
    work_unit_name,
)
from .retries import fetch_retries, print_retries
from .specs import (
    DEFAULT_JOB_NAME,
    DEFAULT_QUEUE,
    SpecError,
    UnitOptions,
    build_work_unit,
    read_document,
)
from .sweeps import (
    DEFAULT_ARG_COLUMNS,
    arg_columns,
    exit_codes,
    group_dicts,
    group_rows,
    groups_of,
    parse_arg_list,
)

F = TypeVar("F", bound=Callable[..., Any])


def unit_options(command: F) -> F:
    """The flags of one single-container work unit, shared by ``wu create`` and
    ``launch``; the command receives them as one :class:`UnitOptions` (``unit``)."""
    options = [
        click.option("--image", help="Container image (single-container work unit)."),
        click.option("--command", help='Command line, e.g. "python train.py".'),
        click.option("--cpu", type=int, help="CPU millicores."),
        click.option("--memory-bytes", type=int),
        click.option("--env", multiple=True, help="KEY=VALUE, repeatable."),
        click.option(
            "--annotation",
            "annotations",
            multiple=True,
            help="Pod annotation KEY=VALUE, repeatable; on kubesim "
            'kubesim.xmc/behavior={"run_seconds": 20} scripts the run (docs/kubesim.md).',
        ),
        click.option("--job-name", help=f"[default: {DEFAULT_JOB_NAME}]"),
        click.option("--replicas", type=click.IntRange(min=1), help="[default: 1]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def unit_from_kwargs(kwargs: dict[str, Any]) -> UnitOptions:
    """Pop the :func:`unit_options` flags out of a command's keyword arguments."""
    return UnitOptions(
        image=kwargs.pop("image"),
        command=kwargs.pop("command"),
        cpu=kwargs.pop("cpu"),
        memory_bytes=kwargs.pop("memory_bytes"),
        env=kwargs.pop("env"),
        annotations=kwargs.pop("annotations"),
        job_name=kwargs.pop("job_name"),
        replicas=kwargs.pop("replicas"),
    )


@click.group()
def wu() -> None:
    """Create, inspect, stop and restart work units."""


@wu.command("create")
@click.argument("experiment")
@click.option("--file", "-f", "file", type=click.Path(path_type=Path), help="YAML/JSON spec.")
@unit_options
@click.option("--queue", help=f"Scheduling queue name (default {DEFAULT_QUEUE}).")
@click.option("--tag", "tags", multiple=True)
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True)
@pass_client
def wu_create(
    client: Client,
    /,  # pass_client hands it over positionally; the flags come by name
    experiment: str,
    file: Path | None,
    queue: str | None,
    tags: tuple[str, ...],
    count: int,
    **unit: Any,
) -> None:
    """Create COUNT work units in EXPERIMENT; prints their names and operations.

    The experiment stays LAUNCHING (and so ACTIVE) until `xmc experiments close` marks
    its launch done; `xmc launch` does all three steps in one go."""
    try:
        document = None if file is None else read_document(file, "--file")
        work_unit = build_work_unit(document, unit_from_kwargs(unit), queue=queue, where="--file")
    except SpecError as exc:
        fail(str(exc))
    work_unit.tags.extend(tags)
    parent = experiment_name(experiment)
    created = [create_work_unit(client, parent, work_unit) for _ in range(count)]
    client.show(created, lambda: print_created(created))


def create_work_unit(client: Client, parent: str, work_unit: WorkUnit) -> dict[str, str]:
    """CreateWorkUnit; the new work unit's name and its operation's."""
    op: operations_proto_pb2.Operation = client.call(
        client.api.CreateWorkUnit,
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit),
    )
    meta = OperationMetadata()
    op.metadata.Unpack(meta)
    return {"work_unit": meta.target, "operation": op.name}


def print_created(created: list[dict[str, str]]) -> None:
    print_table(
        None, ["work unit", "operation"], [[c["work_unit"], c["operation"]] for c in created]
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


def work_units_table(title: str, units: list[WorkUnit]) -> Table:
    table = Table(title=title)
    for column in WU_COLUMNS:
        table.add_column(column)
    for w in units:
        table.add_row(*work_unit_row(w))
    return table


@wu.command("list")
@click.argument("experiment")
@click.option("--filter", "filter_", default="", help='AIP-160 filter, e.g. "args.lr > 0.01".')
@click.option("--order-by", default="", help='AIP-132 order, e.g. "args.lr desc, wid".')
@click.option(
    "--args",
    "arg_keys",
    help="Arg columns to show, e.g. lr,batch_size [default: the args that vary, up to "
    f"{DEFAULT_ARG_COLUMNS}, most distinct values first].",
)
@click.option("--group-by", help="Count the units per value of this arg, by state.")
@pass_client
def wu_list(
    client: Client,
    experiment: str,
    filter_: str,
    order_by: str,
    arg_keys: str | None,
    group_by: str | None,
) -> None:
    """List the work units of EXPERIMENT, with the args that tell them apart."""
    units = list_work_units(client, experiment_name(experiment), filter_, order_by)
    if group_by is not None:
        groups = groups_of(units, group_by)
        client.show(
            group_dicts(group_by, groups),
            lambda: print_table(None, [group_by, "units", "states"], group_rows(groups)),
        )
        return
    units_args = [work_unit_args(w) for w in units]
    keys = arg_columns(units_args, parse_arg_list(arg_keys))

    def table() -> None:
        codes = exit_codes(client, experiment_name(experiment), units)
        rows = [
            [*work_unit_row(w), code, *(args.get(k, "") for k in keys)]
            for w, args, code in zip(units, units_args, codes, strict=True)
        ]
        print_table(None, [*WU_COLUMNS, "exit code", *keys], rows)

    client.show([to_dict(w) for w in units], table)


@wu.command("get")
@click.argument("work_unit")
@pass_client
def wu_get(client: Client, work_unit: str) -> None:
    """Show one work unit (``experiments/7/workUnits/3`` or ``7/3``)."""
    w: WorkUnit = client.call(
        client.api.GetWorkUnit, api_pb2.GetWorkUnitRequest(name=work_unit_name(work_unit))
    )
    retries = fetch_retries(client, w.name)
    timeline = fetch_attributions(client, w.name)
    client.show(
        {**to_dict(w), "retries": to_dict(retries), **attributions_dict(timeline)},
        lambda: _print_work_unit(w, retries, attribution_lines(timeline)),
    )


def _print_work_unit(
    w: WorkUnit, retries: retry_pb2.WorkUnitRetries, attributions: list[str]
) -> None:
    print_table(w.name, WU_COLUMNS, [work_unit_row(w)])
    for line in attributions:
        click.echo(line)
    status = w.current_work_unit_execution.status
    for label, message in (("system", status.system_message), ("user", status.user_message)):
        if message.user_facing_text:
            click.echo(f"{label}: {message.user_facing_text}")
    print_retries(retries)


def print_operation(client: Client, op: operations_proto_pb2.Operation) -> None:
    client.show(to_dict(op), lambda: _print_operation_table(op))


def _print_operation_table(op: operations_proto_pb2.Operation) -> None:
    meta = OperationMetadata()
    if op.HasField("metadata"):
        op.metadata.Unpack(meta)
    rows = [
        ["name", op.name],
        ["done", str(op.done).lower()],
        ["target", meta.target],
        ["requested by", meta.original_requester],
    ]
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
    client.show([to_dict(e) for e in executions], lambda: _print_history(executions))


def _print_history(executions: list[WorkUnitExecution]) -> None:
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
    client.show([to_dict(m) for m in found], lambda: _print_messages(found))


def _print_messages(found: list[StatusMessage]) -> None:
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
