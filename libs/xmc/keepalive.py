"""A connection whose peer went silent is dropped within ``XMC_DEAD_PEER_SECONDS``, not
waited on until TCP gives up (about 15 minutes) or the network heals.

Across a network cut a TCP connection neither fails nor works: a query, a blocking
XREADGROUP or an RPC waits on an answer the peer cannot send, and the kernel, which has
nothing unacknowledged to resend on the waiting side, says nothing. After the heal each
side's retransmissions resume only at their backed-off times (up to two minutes apart),
so a 60 s cut of the ESS's path to Postgres cost 72 s more after the heal to converge
(docs/operations.md, "High availability: network faults"). Each client here therefore
probes its idle connections (TCP keepalive: probes after a quarter of the bound, three
of them) and bounds unacknowledged data (``TCP_USER_TIMEOUT``): a dead path closes the
connection, the caller sees a connection error — UNAVAILABLE to a client, a retry in a
loop — and the next attempt opens a new connection, which works as soon as the path does.

A new connection is bounded too (:func:`connect_timeout`). gRPC does the same with its
own HTTP/2 pings (:func:`grpc_client_options`); the server
must accept pings that often (:func:`grpc_server_options`) or it answers them with
GOAWAY ``too_many_pings``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

#: Probes sent before a silent peer is declared dead.
PROBES = 3


def tcp_options(dead_peer_seconds: float) -> dict[int, int]:
    """``IPPROTO_TCP`` option → value that drop a connection silent for about
    ``dead_peer_seconds`` (pure): the first probe after a quarter of it idle, then
    :data:`PROBES` probes a quarter apart; data unacknowledged for all of it."""
    quarter = max(1, round(dead_peer_seconds / (PROBES + 1)))
    return {
        socket.TCP_KEEPIDLE: quarter,
        socket.TCP_KEEPINTVL: quarter,
        socket.TCP_KEEPCNT: PROBES,
        socket.TCP_USER_TIMEOUT: round(dead_peer_seconds * 1000),
    }


def postgres_server_settings(dead_peer_seconds: float) -> dict[str, str]:
    """The same bound on Postgres's end of each connection (pure; session settings any
    user may set). Without it a backend whose client vanished mid-transaction — dropped
    by the client's keepalive during a cut — sits idle in transaction, holding its row
    locks, until TCP gives up or its last reply's resend meets the client host after the
    heal: every new transaction on those rows waits that long (46 s after a 60 s cut)."""
    options = tcp_options(dead_peer_seconds)
    return {
        "tcp_keepalives_idle": str(options[socket.TCP_KEEPIDLE]),
        "tcp_keepalives_interval": str(options[socket.TCP_KEEPINTVL]),
        "tcp_keepalives_count": str(options[socket.TCP_KEEPCNT]),
        "tcp_user_timeout": str(options[socket.TCP_USER_TIMEOUT]),
    }


def connect_timeout(dead_peer_seconds: float) -> float:
    """Seconds a new connection may take to open (pure): a quarter of the bound, at least
    2. A connect started during a cut resends its SYN at 1, 3, 7, 15, 31, 63 s; waited on
    for asyncpg's default minute, the one in flight at the heal is answered only at its
    next resend, up to half a minute later, and the pool hands out nothing meanwhile."""
    return max(2.0, dead_peer_seconds / (PROBES + 1))


def apply_tcp_options(sock: Any, dead_peer_seconds: float) -> None:
    """Turn keepalive on for ``sock`` with :func:`tcp_options`; a Unix socket has no
    peer to lose and is left alone."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in tcp_options(dead_peer_seconds).items():
        sock.setsockopt(socket.IPPROTO_TCP, option, value)


def keepalive_socket(dead_peer_seconds: float) -> Callable[[tuple[Any, ...]], socket.socket]:
    """A socket factory for aiohttp's ``TCPConnector(socket_factory=...)`` (the
    Kubernetes client): its sockets get :func:`apply_tcp_options`, so a watch whose API
    server went silent ends within the bound, not at its ``timeoutSeconds``."""

    def make(addr_info: tuple[Any, ...]) -> socket.socket:
        family, kind, proto, _, _ = addr_info
        sock = socket.socket(family, kind, proto)
        apply_tcp_options(sock, dead_peer_seconds)
        return sock

    return make


def grpc_client_options(dead_peer_seconds: float) -> list[tuple[str, int]]:
    """Channel options (pure): a ping after half the bound without traffic, the
    connection closed when it is not answered within the other half."""
    half = max(1000, round(dead_peer_seconds * 500))
    return [
        ("grpc.keepalive_time_ms", half),
        ("grpc.keepalive_timeout_ms", half),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def grpc_server_options(dead_peer_seconds: float) -> list[tuple[str, int]]:
    """Server options (pure) that accept :func:`grpc_client_options`' pings."""
    half = max(1000, round(dead_peer_seconds * 500))
    return [
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", half),
        ("grpc.http2.max_ping_strikes", 0),
    ]
