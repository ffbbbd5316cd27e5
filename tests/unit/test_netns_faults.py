"""The network-fault harness's pure parts: scenario names, addresses and the exact
iptables rules each fault puts in each namespace (tests/ha/netns.py)."""

from __future__ import annotations

import pytest

from tests.ha.netns import PATHS, Fault, addresses, rules, scenarios

PEER = "10.213.7.1"


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param("net-cut:ess-postgres", Fault("cut", "ess", "postgres"), id="cut"),
        pytest.param("net-loss:actuator-redis", Fault("loss", "actuator", "redis"), id="loss"),
        pytest.param(
            "net-delay:reconciler-kubesim", Fault("delay", "reconciler", "kubesim"), id="delay"
        ),
    ],
)
def test_a_scenario_names_its_fault_and_path(scenario: str, expected: Fault) -> None:
    assert Fault.parse(scenario) == expected
    assert expected.name == scenario


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param("net-cut:postgres-ess", id="server end first"),
        pytest.param("net-cut:ess-kubesim", id="a path the issue does not name"),
        pytest.param("net-flap:ess-redis", id="unknown kind"),
        pytest.param("kill-ess", id="not a network scenario"),
    ],
)
def test_anything_else_is_refused(scenario: str) -> None:
    with pytest.raises(ValueError, match="not a network fault scenario"):
        Fault.parse(scenario)


def test_every_kind_on_every_path_cuts_first() -> None:
    names = scenarios()
    assert len(names) == 3 * len(PATHS) == 18
    assert names[0] == "net-cut:ess-postgres"
    assert [n.split(":")[0] for n in names[:6]] == ["net-cut"] * 6
    assert all(Fault.parse(n).name == n for n in names)


INPUT_FROM_PEER = ["INPUT", "-i", "eth0", "-s", PEER]


@pytest.mark.parametrize(
    ("fault", "at", "expected"),
    [
        pytest.param(
            Fault("cut", "ess", "postgres"), "ess", [[*INPUT_FROM_PEER, "-j", "DROP"]],
            id="a cut drops everything from the peer",
        ),
        pytest.param(
            Fault("cut", "ess", "postgres"), "postgres", [[*INPUT_FROM_PEER, "-j", "DROP"]],
            id="at both ends",
        ),
        pytest.param(
            Fault("loss", "ess", "redis"), "redis",
            [[*INPUT_FROM_PEER, "-m", "statistic", "--mode", "random", "--probability", "0.2",
              "-j", "DROP"]],
            id="loss drops a random fifth",
        ),
        pytest.param(
            Fault("delay", "actuator", "kubesim"), "actuator",
            [[*INPUT_FROM_PEER, "-j", "NFQUEUE", "--queue-num", "1"]],
            id="a delay queues what the client receives",
        ),
        pytest.param(
            Fault("delay", "actuator", "kubesim"), "kubesim", [],
            id="and only there: one direction, as netem on one interface",
        ),
    ],
)  # fmt: skip
def test_the_rules_a_fault_puts_in_a_namespace(
    fault: Fault, at: str, expected: list[list[str]]
) -> None:
    assert rules(fault, at=at, peer=PEER) == expected


def test_every_node_and_the_host_get_an_address_on_the_runs_subnet() -> None:
    assigned = addresses(7)
    assert assigned["kubesim"] == "10.213.7.1"
    assert assigned["host"] == "10.213.7.254"
    assert len(set(assigned.values())) == len(assigned) == 7
    assert all(a.startswith("10.213.7.") for a in assigned.values())
