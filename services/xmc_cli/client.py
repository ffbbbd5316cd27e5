"""What every ``xmc`` command shares: the gRPC client (one place where RPC errors become
``error: CODE: details``), resource-name shorthands, and table/JSON printing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click
import grpc
from google.longrunning import operations_grpc_pb2
from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from rich.console import Console
from rich.table import Table

from xmc.ess_retry import channel_options
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import scheduling_pb2_grpc
from xmc_api.xmc.v1 import watch_pb2_grpc

DEFAULT_ENDPOINT = "127.0.0.1:50051"
_WU_SHORT = re.compile(r"^(\d+)/(\d+)$")

#: Tables are printed this wide whatever the terminal says, so piped output stays whole.
TABLE_WIDTH = 160


class CliError(click.ClickException):
    """A failure reported as ``error: <message>`` on stderr with exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def fail(message: str) -> NoReturn:
    raise CliError(message)


def parse_endpoint(value: str) -> tuple[str, bool | None]:
    """``host:port`` and whether the scheme asks for TLS (None: no scheme). The published
    client reads the same ``XMANAGER_ENDPOINT`` and takes ``http://`` to mean plaintext,
    so one exported value serves both."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value, None
    if scheme.lower() not in ("http", "https"):
        fail(
            f"--endpoint: expected host:port, http://host:port or https://host:port, got {value!r}"
        )
    return rest.rstrip("/"), scheme.lower() == "https"


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
    #: Sent as ``x-goog-user-email`` (XMC_USER_EMAIL), as the published client sends it.
    user_email: str | None = None
    _channel: Any = field(default=None, init=False)

    @property
    def json(self) -> bool:
        return self.output == "json"

    def channel(self) -> Any:
        if self._channel is None:
            # XMC's client rule (xmc.ess_retry): what a restarting ESS dropped is resent.
            if self.tls:
                self._channel = grpc.secure_channel(
                    self.endpoint, grpc.ssl_channel_credentials(), channel_options()
                )
            else:
                self._channel = grpc.insecure_channel(self.endpoint, channel_options())
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

    @property
    def watches(self) -> watch_pb2_grpc.WatchServiceStub:
        return watch_pb2_grpc.WatchServiceStub(self.channel())

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The caller's credentials, for a call made outside :meth:`call` (a stream read on
        a thread of its own: ``xmc watch``)."""
        return self._metadata()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        metadata: tuple[tuple[str, str], ...] = ()
        if self.token:
            metadata += (("authorization", f"Bearer {self.token}"),)
        if self.user_email:
            metadata += (("x-goog-user-email", self.user_email),)
        return metadata

    def _failed(self, exc: grpc.RpcError) -> NoReturn:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        hint = (
            f" (is the ESS up at {self.endpoint}?)" if code == grpc.StatusCode.UNAVAILABLE else ""
        )
        fail(f"{code.name if code else 'UNKNOWN'}: {details}{hint}")

    def call(
        self, method: Callable[..., Any], request: Message, timeout: float | None = None
    ) -> Any:
        """Invoke a unary RPC; gRPC errors become ``error: CODE: details``."""
        try:
            return method(request, metadata=self._metadata(), timeout=timeout or self.rpc_timeout)
        except grpc.RpcError as exc:
            self._failed(exc)

    def stream(
        self, method: Callable[..., Any], request: Message, timeout: float | None
    ) -> Iterator[Any]:
        """Each message of a server-streaming RPC (``timeout`` None: as long as it runs);
        gRPC errors, at the start or midway, become ``error: CODE: details``."""
        try:
            yield from method(request, metadata=self._metadata(), timeout=timeout)
        except grpc.RpcError as exc:
            self._failed(exc)

    def show(self, data: Any, render: Callable[[], None]) -> None:
        """The one output branch of every command: ``data`` as JSON with ``--output
        json``, else ``render()`` (tables, names, a transcript)."""
        if self.json:
            click.echo(json.dumps(data, indent=2, sort_keys=True))
        else:
            render()


def to_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=TABLE_WIDTH).print(table)


pass_client = click.make_pass_decorator(Client)


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


def list_work_units(
    client: Client, parent: str, filter_: str = "", order_by: str = ""
) -> list[WorkUnit]:
    return list_all(
        client,
        client.api.ListWorkUnits,
        api_pb2.ListWorkUnitsRequest(parent=parent, filter=filter_, order_by=order_by),
        "work_units",
    )
