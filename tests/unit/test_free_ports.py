"""Private servers' ports lie below the kernel's ephemeral range, where no outgoing
connection of another test can be given one between the pick and the server's bind."""

from __future__ import annotations

import socket

from tests.stack import LOWEST_PORT, ephemeral_low, free_ports, is_free


def test_ports_are_picked_below_the_ephemeral_range() -> None:
    ports = free_ports(50)
    assert len(set(ports)) == 50
    assert all(LOWEST_PORT <= port < ephemeral_low() for port in ports), ports


def test_a_bound_port_is_not_free() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        assert not is_free(port)
    assert is_free(port)
