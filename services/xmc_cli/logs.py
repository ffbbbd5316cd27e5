"""``xmc logs XID WID``: a work unit's container logs from the ESS's LogService
(docs/logs.md): what XMC kept of ended containers, then, for a live execution, what the
cluster has; ``-f`` follows a running unit until it ends.

Logs go to stdout with their control characters shown as visible symbols (an escape
sequence in a log is text, never an instruction to the terminal) unless ``--raw`` asks
for the bytes exactly as kept. A header names each container run when the output moves
to it (like ``tail`` with several files); notes about the stream itself (evicted text, a
cluster out of reach) go to stderr.
"""

from __future__ import annotations

import sys

import click

from xmc.log_text import LogPrinter
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

from .client import Client, pass_client


@click.command("logs")
@click.argument("xid", type=click.IntRange(min=1))
@click.argument("wid", type=click.IntRange(min=1))
@click.option(
    "--execution",
    "execution",
    type=click.IntRange(min=1),
    default=None,
    help="Execution id (default: the current one).",
)
@click.option("--container", default="", help="One container's log (default: every one).")
@click.option("-f", "--follow", is_flag=True, help="Follow a running unit until it ends.")
@click.option("--raw", is_flag=True, help="The bytes as kept, control characters included.")
@click.option("-q", "--quiet", is_flag=True, help="No headers naming each container run.")
@pass_client
def logs(client: Client, xid: int, wid: int, execution: int | None, container: str,
         follow: bool, raw: bool, quiet: bool) -> None:  # fmt: skip
    """Print the logs of work unit WID of experiment XID."""
    stub = logs_pb2_grpc.LogServiceStub(client.channel())
    request = logs_pb2.ReadWorkUnitLogsRequest(
        name=f"experiments/{xid}/workUnits/{wid}",
        execution_id=execution or 0,
        container=container,
        follow=follow,
    )
    printer = LogPrinter(raw=raw, headers=not quiet)
    out = sys.stdout.buffer
    for chunk in client.stream(stub.ReadWorkUnitLogs, request, None if follow else 60.0):
        data, note = printer.render(chunk)
        if data:
            out.write(data)
            out.flush()
        if note:
            click.echo(note, err=True, nl=False)
