"""How long a silent peer is waited on (xmc.keepalive, XMC_DEAD_PEER_SECONDS): the
socket and gRPC options each client gets, and the setting that bounds them."""

from __future__ import annotations

import socket

import pytest

from xmc.errors import InvalidArgumentError
from xmc.keepalive import (
    apply_tcp_options,
    connect_timeout,
    grpc_client_options,
    grpc_server_options,
    keepalive_socket,
    tcp_options,
)
from xmc.settings import load_settings


@pytest.mark.parametrize(
    ("seconds", "idle", "user_timeout_ms"),
    [
        pytest.param(20.0, 5, 20_000, id="the default: probes every 5 s, dead after 20 s"),
        pytest.param(60.0, 15, 60_000, id="a minute"),
        pytest.param(2.0, 1, 2_000, id="the shortest: probes never under a second"),
    ],
)
def test_tcp_options_drop_a_silent_peer_within_the_bound(
    seconds: float, idle: int, user_timeout_ms: int
) -> None:
    assert tcp_options(seconds) == {
        socket.TCP_KEEPIDLE: idle,
        socket.TCP_KEEPINTVL: idle,
        socket.TCP_KEEPCNT: 3,
        socket.TCP_USER_TIMEOUT: user_timeout_ms,
    }


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        pytest.param(20.0, 5.0, id="a quarter of the bound"),
        pytest.param(4.0, 2.0, id="never under 2 s: a connect may need a few round trips"),
    ],
)
def test_a_new_connection_gives_up_well_before_the_next_syn_resend(
    seconds: float, expected: float
) -> None:
    assert connect_timeout(seconds) == expected


def test_the_options_reach_a_tcp_socket() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        apply_tcp_options(sock, 20.0)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 20_000


def test_the_kubernetes_clients_sockets_get_them_too() -> None:
    make = keepalive_socket(20.0)
    addr_info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.1", 443))
    with make(addr_info) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 20_000


def test_a_unix_socket_is_left_alone() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        apply_tcp_options(sock, 20.0)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0


def test_the_ess_accepts_the_pings_the_reconciler_sends() -> None:
    client = dict(grpc_client_options(20.0))
    server = dict(grpc_server_options(20.0))
    assert client["grpc.keepalive_time_ms"] + client["grpc.keepalive_timeout_ms"] == 20_000
    # A ping more often than the server's minimum is a strike: GOAWAY too_many_pings.
    assert (
        server["grpc.http2.min_recv_ping_interval_without_data_ms"]
        <= client["grpc.keepalive_time_ms"]
    )
    assert client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.keepalive_permit_without_calls"] == 1


def test_the_bound_is_read_from_the_environment() -> None:
    assert load_settings({}).core.dead_peer_seconds == 20.0
    assert load_settings({"XMC_DEAD_PEER_SECONDS": "45"}).core.dead_peer_seconds == 45.0


@pytest.mark.parametrize("value", ["1", "3601", "soon"])
def test_a_bound_out_of_range_names_the_setting(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="XMC_DEAD_PEER_SECONDS"):
        load_settings({"XMC_DEAD_PEER_SECONDS": value})
