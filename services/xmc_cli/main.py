"""The ``xmc`` command line: experiments, work units, launches, watching, scheduling and
operations over gRPC.

This module holds the root group (connection flags) and the small admin groups; each
larger command family has its own module, added to the group at the bottom.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import click
from google.longrunning import operations_proto_pb2
from google.protobuf import json_format
from google.protobuf.duration_pb2 import Duration

from xmc.settings import load_cli_settings
from xmc_api.internal.v1 import scheduling_pb2

from .client import DEFAULT_ENDPOINT, Client, fmt_time, parse_endpoint, pass_client, print_table
from .experiments import experiments
from .launch import launch
from .logs import logs
from .retries import retry_policy
from .timelines import wu_timeline
from .usage import usage
from .watching import watch
from .webhooks import webhooks
from .work_units import print_operation, wu

OUTPUTS = ("table", "json")


@click.group()
@click.option(
    "--endpoint",
    envvar="XMANAGER_ENDPOINT",
    default=DEFAULT_ENDPOINT,
    show_default=True,
    help="ESS host:port, or http:// (plaintext) / https:// (TLS) + host:port "
    "(env XMANAGER_ENDPOINT).",
)
@click.option(
    "--token", envvar="XMC_AUTH_TOKEN", default=None, help="Bearer token (env XMC_AUTH_TOKEN)."
)
@click.option(
    "--tls/--no-tls",
    default=None,
    help="Use TLS (default plaintext; XMANAGER_INSECURE_GRPC=false means TLS).",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(OUTPUTS),
    default="table",
    help="table or json; also accepted after the subcommand (xmc experiments list -o json).",
)
@click.option(
    "--user-email",
    envvar="XMC_USER_EMAIL",
    default=None,
    help="Sent as x-goog-user-email, as the published client does (env XMC_USER_EMAIL): the "
    "creator when the ESS runs without auth; checked against the token otherwise.",
)
@click.option("--rpc-timeout", type=float, default=30.0, show_default=True, help="Seconds per RPC.")
@click.pass_context
def cli(
    ctx: click.Context,
    endpoint: str,
    token: str | None,
    tls: bool | None,
    output: str,
    user_email: str | None,
    rpc_timeout: float,
) -> None:
    """Control XMC experiments and work units."""
    target, scheme_tls = parse_endpoint(endpoint)
    if tls is None:
        tls = scheme_tls
    if tls is None:
        tls = load_cli_settings().tls
    client = Client(target, token or None, tls, output, rpc_timeout, user_email or None)
    ctx.obj = client
    ctx.call_on_close(client.close)


# ----------------------------------------------------------------------------- scheduling


@cli.group()
def scheduling() -> None:
    """Global scheduling pause and resume (service accounts and admins)."""


def print_scheduling(client: Client, state: scheduling_pb2.SchedulingState) -> None:
    data = json_format.MessageToDict(
        state, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    client.show(data, lambda: _print_scheduling_table(state))


def _print_scheduling_table(state: scheduling_pb2.SchedulingState) -> None:
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


wu.add_command(wu_timeline)
for command in (experiments, wu, launch, watch, logs, retry_policy, webhooks, usage):
    cli.add_command(command)


def _set_output(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(Client).output = value  # type: ignore[union-attr]


def accept_output_after_subcommands(group: click.Group) -> None:
    """Give every leaf command its own ``--output/-o``: click reads a group's options only
    before the subcommand, and ``xmc experiments list -o json`` is what people type. The
    subcommand's value wins; it is parsed after the group made the Client."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            accept_output_after_subcommands(command)
        elif not any(p.name == "output" for p in command.params):
            command.params.append(
                click.Option(
                    ["--output", "-o"],
                    type=click.Choice(OUTPUTS),
                    default=None,
                    expose_value=False,
                    callback=_set_output,
                    help="table or json (the same as xmc -o before the subcommand).",
                )
            )


accept_output_after_subcommands(cli)


def main() -> None:
    """Console entry point."""
    cli(prog_name="xmc")
