"""``make run``'s port plan and its messages (pure parts of ``xmc.devrun_checks``)."""

from __future__ import annotations

import socket

import pytest

from xmc.devrun_checks import (
    Endpoint,
    clashes,
    local_endpoints,
    port_free,
    port_problems,
    split_listen,
    taken_message,
    waiting_message,
)
from xmc.local_run_settings import LocalRunSettings
from xmc.settings import Settings, UiSettings


@pytest.mark.parametrize(
    ("listen", "want"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:50051", ("127.0.0.1", 50051)),
        (":9000", ("127.0.0.1", 9000)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:8080", ("127.0.0.1", 8080)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_split_listen(listen: str, want: tuple[str, int]) -> None:
    assert split_listen(listen) == want


def test_the_default_run_binds_seven_distinct_ports_each_with_its_variable() -> None:
    endpoints = local_endpoints(Settings(), LocalRunSettings(), UiSettings())
    assert [(e.port, e.variable) for e in endpoints] == [
        (8081, "XMC_KUBESIM_PORT"),
        (50051, "XMC_ESS_LISTEN"),
        (9464, "XMC_METRICS_BASE_PORT"),
        (9465, "XMC_METRICS_BASE_PORT"),
        (9466, "XMC_METRICS_BASE_PORT"),
        (9467, "XMC_METRICS_BASE_PORT"),
        (8080, "XMC_UI_LISTEN"),
    ]
    assert clashes(endpoints) == []


def test_two_parts_on_one_port_are_named_with_both_variables() -> None:
    endpoints = local_endpoints(
        Settings(), LocalRunSettings(metrics_base=8078), UiSettings(listen="127.0.0.1:0")
    )
    # 8078..8081: the dashboard's metrics port (base + 3) meets kubesim's.
    assert clashes(endpoints) == [
        "port 8081 is configured twice: kubesim (Kubernetes API) (XMC_KUBESIM_PORT=8081) and "
        "dashboard metrics and health (XMC_METRICS_BASE_PORT=8078 (+3)); move one of them"
    ]


def test_port_zero_never_clashes() -> None:
    zero = Endpoint("a", "127.0.0.1", 0, "A", "0")
    assert clashes([zero, Endpoint("b", "127.0.0.1", 0, "B", "0")]) == []


def test_a_taken_port_is_named_with_what_moves_it() -> None:
    endpoints = local_endpoints(Settings(), LocalRunSettings(), UiSettings())
    problems = port_problems(endpoints, free=lambda host, port: port != 8080)
    assert problems == [
        "port 8080 (dashboard) is already in use on 127.0.0.1: stop what listens there, or "
        "move it with XMC_UI_LISTEN (now 127.0.0.1:8080)"
    ]
    assert taken_message(endpoints[1]).endswith("move it with XMC_ESS_LISTEN (now 127.0.0.1:50051)")


def test_port_free_sees_a_listening_socket() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_free("127.0.0.1", port)
    assert port_free("127.0.0.1", port)


def test_waiting_message_names_each_service_and_what_it_said() -> None:
    assert waiting_message({"reconciler": "503 watches not synced", "ui": "not answering"}) == (
        "waiting for reconciler: 503 watches not synced; ui: not answering"
    )
