"""Restricted reads (decision 0048), the pure parts: every RPC the ESS serves has a read
rule whose field exists; the names the gate reads; the principals of an ACL and of a
caller; the settings; the dashboard's refusal of a default token."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FieldDescriptor

from ess.auth import Identity, groups_claim
from ess.read_gate import READ_RULES, Guard, ReadRule, experiments_readable_by, named_experiment
from ess.servicers import SERVICE_NAMES
from ui.main import UiRun
from xmc.errors import InvalidArgumentError
from xmc.model.read_access import (
    READS_EVERYTHING,
    ReadScope,
    caller_principals,
    experiment_readers,
)
from xmc.settings import load_settings
from xmc.store.transactions import readable_experiments_sql
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

Role = XidAcls.Role


def served_methods() -> list[tuple[str, Any]]:
    """Every method of every service the ESS registers: (full name, its input type)."""
    pool = descriptor_pool.Default()
    return [
        (f"/{name}/{method.name}", method.input_type)
        for name in SERVICE_NAMES
        for method in pool.FindServiceByName(name).methods
    ]


@pytest.mark.parametrize(
    ("method", "input_type"), served_methods(), ids=lambda v: v if isinstance(v, str) else v.name
)
def test_every_served_method_declares_a_read_rule(method: str, input_type: Any) -> None:
    rule = READ_RULES.get(method)
    assert rule is not None, f"{method}: add a ReadRule to ess.read_gate.READ_RULES"
    checked = rule.guard in (Guard.EXPERIMENT, Guard.ARTIFACT, Guard.WEBHOOK)
    assert bool(rule.field) == checked, f"{method}: a checked rule names its field, no other"
    descriptor = input_type
    for part in rule.field.split(".") if rule.field else ():
        field = descriptor.fields_by_name.get(part)
        assert field is not None, f"{method}: {input_type.name} has no field {rule.field!r}"
        descriptor = field.message_type or field
    if rule.field:
        assert descriptor.type == FieldDescriptor.TYPE_STRING, f"{method}: {rule.field}"


def test_no_rule_names_a_method_that_is_not_served() -> None:
    assert set(READ_RULES) - {method for method, _ in served_methods()} == set()


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        pytest.param(ReadRule(Guard.EXPERIMENT, "name"), "experiments/7", 7, id="experiment"),
        pytest.param(
            ReadRule(Guard.EXPERIMENT, "name"), "experiments/7/workUnits/3", 7, id="work unit"
        ),
        pytest.param(
            ReadRule(Guard.EXPERIMENT, "name"),
            "experiments/7/workUnits/3/operations/abc",
            7,
            id="operation",
        ),
        pytest.param(ReadRule(Guard.EXPERIMENT, "name"), "", None, id="empty: servicer refuses"),
        pytest.param(
            ReadRule(Guard.EXPERIMENT, "parent", users_allowed=True),
            "users/me",
            None,
            id="a user's parent",
        ),
    ],
)
def test_the_experiment_a_name_names(rule: ReadRule, value: str, expected: int | None) -> None:
    assert named_experiment(rule, value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("users/me", id="a user where only experiments are named"),
        pytest.param("experiments/07", id="leading zero"),
        pytest.param("experiments/x", id="not a number"),
        pytest.param("projects/1/experiments/2", id="not at the start"),
        pytest.param(f"experiments/{2**63}", id="past bigint"),
    ],
)
def test_a_name_that_names_no_experiment_is_refused_not_passed(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^name: "):
        named_experiment(ReadRule(Guard.EXPERIMENT, "name"), value)


@pytest.mark.parametrize(
    ("creator", "roles", "expected"),
    [
        pytest.param("Alice@Example.com", {}, ["alice@example.com"], id="creator alone"),
        pytest.param(
            "a@x.io",
            {
                "owners": [Role(user="Owner@x.io")],
                "writers": [Role(service_account="ci@robots.x.io")],
                "readers": [Role(group="ML-Team"), Role(domain="@x.io")],
            },
            ["a@x.io", "ci@robots.x.io", "domain:x.io", "group:ml-team", "owner@x.io"],
            id="every kind of principal, lowercased",
        ),
        pytest.param(
            "a@x.io",
            {"readers": [Role(all_authenticated_users=True)]},
            ["a@x.io", "allAuthenticatedUsers"],
            id="all authenticated users",
        ),
        pytest.param(
            "a@x.io",
            {
                "readers": [
                    Role(all_authenticated_users=False),
                    Role(inherit_from_parent=True),
                    Role(user="group:ml-team"),
                    Role(group=" "),
                    Role(),
                ]
            },
            ["a@x.io"],
            id="entries that grant nothing (a user that is no email cannot pose as a group)",
        ),
        pytest.param(
            "a@x.io",
            {"owners": [Role(user="a@x.io")], "readers": [Role(user="A@x.io")]},
            ["a@x.io"],
            id="no repeats",
        ),
    ],
)
def test_experiment_readers(creator: str, roles: dict[str, Any], expected: list[str]) -> None:
    assert experiment_readers(creator, XidAcls(**roles)) == expected


def test_caller_principals() -> None:
    assert caller_principals("Bob@Example.com", ["ML-Team", " ", "infra"]) == {
        "bob@example.com",
        "domain:example.com",
        "group:ml-team",
        "group:infra",
        "allAuthenticatedUsers",
    }


@pytest.mark.parametrize(
    ("identity", "readers", "readable"),
    [
        pytest.param(Identity("bob@x.io"), ["a@x.io"], True, id="reads not restricted"),
        pytest.param(
            Identity("bob@x.io", restricted_reads=True), ["a@x.io"], False, id="someone else's"
        ),
        pytest.param(Identity("a@x.io", restricted_reads=True), ["a@x.io"], True, id="own"),
        pytest.param(
            Identity("bob@x.io", restricted_reads=True, groups=frozenset({"ML"})),
            ["a@x.io", "group:ml"],
            True,
            id="through a group",
        ),
        pytest.param(
            Identity("bob@x.io", restricted_reads=True),
            ["a@x.io", "domain:x.io"],
            True,
            id="through the domain",
        ),
        pytest.param(
            Identity("bob@x.io", restricted_reads=True),
            ["allAuthenticatedUsers"],
            True,
            id="all authenticated users",
        ),
        pytest.param(
            Identity("root@x.io", is_admin=True, restricted_reads=True),
            ["a@x.io"],
            True,
            id="admin",
        ),
        pytest.param(
            Identity("rec@x.io", is_service=True, restricted_reads=True), None, True, id="service"
        ),
        pytest.param(
            Identity("a@x.io", restricted_reads=True), None, False, id="readers not filled yet"
        ),
    ],
)
def test_who_reads_what(identity: Identity, readers: list[str] | None, readable: bool) -> None:
    assert identity.reads.can_read(readers) is readable


def test_the_sql_hook() -> None:
    alice = Identity("a@x.io", restricted_reads=True)
    assert experiments_readable_by(Identity("a@x.io"), xid_column="w.xid") == ("TRUE", [])
    sql, params = experiments_readable_by(alice, xid_column="w.xid", first_param=3)
    assert sql == "w.xid IN (SELECT xid FROM experiments WHERE readers && $3::text[])"
    assert params == [["a@x.io", "allAuthenticatedUsers", "domain:x.io"]]
    assert readable_experiments_sql(alice.reads, readers_column="e.readers") == (
        "e.readers && $1::text[]",
        params,
    )


def test_page_tokens_are_bound_to_the_principals_only_when_restricted() -> None:
    assert READS_EVERYTHING.binding() == ""
    alice, bob = ReadScope(frozenset({"a@x.io"})), ReadScope(frozenset({"b@x.io"}))
    assert alice.binding() != bob.binding()


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param({"groups": ["a", "b", 3, ""]}, {"a", "b"}, id="a list (non-strings dropped)"),
        pytest.param({"groups": "a"}, {"a"}, id="one string"),
        pytest.param({"groups": {"a": 1}}, set(), id="anything else"),
        pytest.param({}, set(), id="absent"),
    ],
)
def test_the_groups_claim(claims: dict[str, Any], expected: set[str]) -> None:
    assert groups_claim(claims, "groups") == expected


def test_the_settings() -> None:
    assert load_settings({}).auth.restricted_reads is False
    auth = load_settings(
        {
            "XMC_READ_AUTHORIZATION": "Restricted",
            "XMC_AUTH_GROUPS_CLAIM": "roles",
            "XMC_AUTH_STATIC_GROUPS": "Bob@x.io=ml, bob@x.io=infra, carol@x.io=ml",
        }
    ).auth
    assert (auth.restricted_reads, auth.groups_claim) == (True, "roles")
    assert auth.static_groups == {"bob@x.io": {"ml", "infra"}, "carol@x.io": {"ml"}}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"XMC_READ_AUTHORIZATION": "on"},
            "XMC_READ_AUTHORIZATION: expected off or restricted",
            id="mode",
        ),
        pytest.param(
            {"XMC_AUTH_STATIC_GROUPS": "bob=ml"},
            "XMC_AUTH_STATIC_GROUPS: entry 1 must be email=group",
            id="not an email",
        ),
        pytest.param(
            {"XMC_READ_AUTHORIZATION": "restricted", "XMC_UI_TOKEN": "t"},
            "XMC_UI_TOKEN: must be empty with XMC_READ_AUTHORIZATION=restricted",
            id="the dashboard's default token",
        ),
    ],
)
def test_bad_settings_name_their_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        UiRun.from_settings(load_settings(env))
