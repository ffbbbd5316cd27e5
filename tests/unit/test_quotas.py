"""The quota decisions (``xmc.model.quotas``), tables of cases with an injected clock:
the token bucket, live counts, which limits bind whom, names and settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from google.rpc import error_details_pb2, status_pb2

from ess.auth import Identity, groups_claim
from ess.quotas import QuotaGate
from ess.status_codes import refusal_trailers
from xmc.errors import InvalidArgumentError, QuotaExceededError
from xmc.model.quotas import (
    Admission,
    Limits,
    Usage,
    applicable_limits,
    limits_source,
    parse_principal,
    parse_quota_name,
    principals_of,
    quota_name,
    refill,
)
from xmc.model.work_unit_ids import IdRequest, plan_work_unit_ids
from xmc.quota_settings import QuotaSettings, parse_limits
from xmc.settings import load_settings
from xmc.store.transactions import Store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = "user:alice@x.com"
ML = "group:ml"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("tokens", "since", "limits", "now", "expected"),
    [
        (None, None, Limits(creates_per_second=2), at(0), 2.0),  # never used: full (burst 2)
        (None, None, Limits(creates_per_second=0.5), at(0), 1.0),  # burst at least 1
        (0.0, at(0), Limits(creates_per_second=2, creates_burst=10), at(1), 2.0),
        (0.0, at(0), Limits(creates_per_second=2, creates_burst=10), at(100), 10.0),  # capped
        (3.0, at(5), Limits(creates_per_second=2, creates_burst=10), at(4), 3.0),  # clock behind
        (-0.5, at(0), Limits(creates_per_second=1, creates_burst=1), at(0.25), -0.25),
    ],
)
def test_refill(
    tokens: float | None, since: datetime | None, limits: Limits, now: datetime, expected: float
) -> None:
    assert refill(tokens, since, limits, now) == pytest.approx(expected)


def admission(
    limits: dict[str, Limits], now: datetime = T0, alice: Usage | None = None
) -> Admission:
    """An admission over ``limits``, alice's counters as given, everyone else's empty."""
    usage = {p: Usage() for p in limits}
    if alice is not None:
        usage[ALICE] = alice
    return Admission(limits, usage, now)


def test_the_bucket_admits_its_burst_then_refuses_with_the_wait() -> None:
    gate = admission({ALICE: Limits(creates_per_second=2, creates_burst=3)})
    outcomes = [gate.admit((ALICE,), "work_unit") for _ in range(4)]
    assert outcomes[:3] == [None, None, None]
    refusal = outcomes[3]
    assert isinstance(refusal, QuotaExceededError)
    assert (refusal.principal, refusal.limit, refusal.value) == (ALICE, "creates_per_second", 2)
    assert refusal.retry_after == pytest.approx(0.5)  # one token at 2/s
    assert "user:alice@x.com may create at most 2" in str(refusal)
    assert "retry in 0.50 s" in str(refusal)
    assert gate.usage[ALICE].live_work_units == 3


def test_time_refills_the_bucket() -> None:
    limits = {ALICE: Limits(creates_per_second=1, creates_burst=1)}

    def spent() -> Usage:
        return Usage(tokens=0.0, tokens_time=at(0))

    assert admission(limits, at(0.5), alice=spent()).admit((ALICE,), "work_unit") is not None
    assert admission(limits, at(1.0), alice=spent()).admit((ALICE,), "work_unit") is None


@pytest.mark.parametrize(
    ("live", "most", "admitted"),
    [(0, 3, 3), (2, 3, 1), (3, 3, 0), (5, 3, 0), (0, 0, 0)],
)
def test_live_work_units_admit_up_to_the_limit(live: int, most: int, admitted: int) -> None:
    gate = admission({ALICE: Limits(live_work_units=most)}, alice=Usage(live_work_units=live))
    outcomes = [gate.admit((ALICE,), "work_unit") for _ in range(5)]
    assert outcomes.count(None) == admitted
    refusals = [o for o in outcomes if o is not None]
    assert all(r.limit == "live_work_units" and r.value == most for r in refusals)
    if refusals:
        assert f"at most {most} live work units" in str(refusals[0])


def test_experiments_and_work_units_count_separately_but_share_the_bucket() -> None:
    limits = {ALICE: Limits(creates_per_second=1, creates_burst=2, live_experiments=1)}
    gate = admission(limits)
    assert gate.admit((ALICE,), "experiment") is None
    refusal = gate.admit((ALICE,), "experiment")
    assert refusal is not None
    assert refusal.limit == "live_experiments"
    assert gate.admit((ALICE,), "work_unit") is None  # the second token
    refusal = gate.admit((ALICE,), "work_unit")
    assert refusal is not None
    assert refusal.limit == "creates_per_second"


def test_a_create_is_admitted_only_if_every_principal_admits_it_and_a_refusal_spends_nothing() -> (
    None
):
    limits = {ALICE: Limits(creates_per_second=1, creates_burst=5), ML: Limits(live_work_units=1)}
    gate = admission(limits)
    assert gate.admit((ALICE, ML), "work_unit") is None
    refusal = gate.admit((ALICE, ML), "work_unit")
    assert refusal is not None
    assert refusal.principal == ML
    # The refused create took no token of alice's bucket: 4 left.
    assert gate.usage[ALICE].tokens == pytest.approx(4)
    assert gate.admit((ALICE,), "work_unit") is None  # alone (not in ml), alice still may


@pytest.mark.parametrize(
    ("principal", "table", "default", "expected"),
    [
        (ALICE, {}, Limits(), (Limits(), "none")),
        (ALICE, {}, Limits(live_work_units=5), (Limits(live_work_units=5), "server")),
        (
            ALICE,
            {"default": Limits(live_work_units=7)},
            Limits(live_work_units=5),
            (Limits(live_work_units=7), "default"),
        ),
        (
            ALICE,
            {ALICE: Limits(live_work_units=9), "default": Limits(live_work_units=7)},
            Limits(),
            (Limits(live_work_units=9), "quota"),
        ),
        (ML, {"default": Limits(live_work_units=7)}, Limits(live_work_units=5), (Limits(), "none")),
        (ML, {ML: Limits(live_experiments=2)}, Limits(), (Limits(live_experiments=2), "quota")),
    ],
)
def test_where_a_principals_limits_come_from(
    principal: str, table: dict[str, Limits], default: Limits, expected: tuple[Limits, str]
) -> None:
    assert limits_source(principal, table, default) == expected


def test_only_binding_limits_are_applied() -> None:
    principals = principals_of("Alice@X.com", ["ml", "web"])
    assert principals == (ALICE, ML, "group:web")
    table = {ML: Limits(live_work_units=3)}
    assert applicable_limits(principals, table, Limits()) == {ML: Limits(live_work_units=3)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("user:Alice@X.com", ALICE),
        (" group:ml ", ML),
        ("default", "default"),
        ("user:alice", None),
        ("team:ml", None),
        ("group:", None),
        ("", None),
    ],
)
def test_principals(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(InvalidArgumentError, match="principal"):
            parse_principal(text)
    else:
        assert parse_principal(text) == expected


@pytest.mark.parametrize(
    ("name", "principal"),
    [
        ("quotas/users/alice@x.com", ALICE),
        ("quotas/groups/ml", ML),
        ("quotas/default", "default"),
    ],
)
def test_quota_names_round_trip(name: str, principal: str) -> None:
    assert parse_quota_name(name) == principal
    assert quota_name(principal) == name


@pytest.mark.parametrize("name", ["quotas/teams/ml", "quotas/users/", "quota/default", "x"])
def test_bad_quota_names_name_the_field(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^name: "):
        parse_quota_name(name)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", Limits()),
        (
            "creates_per_second=2.5,creates_burst=10,live_work_units=100,live_experiments=3",
            Limits(2.5, 10, 100, 3),
        ),
        ("live_work_units=0", Limits(live_work_units=0)),
    ],
)
def test_the_default_setting(text: str, expected: Limits) -> None:
    assert parse_limits(text, name="XMC_QUOTA_DEFAULT") == expected


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("speed=3", "unknown key 'speed'"),
        ("live_work_units=many", "live_work_units must be a number"),
        ("creates_per_second=0", "creates_per_second: must be > 0"),
        ("creates_burst=3", "creates_burst: needs creates_per_second"),
        ("live_experiments=-1", "live_experiments: must be between"),
    ],
)
def test_a_bad_default_setting_names_the_variable_and_key(text: str, complaint: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^XMC_QUOTA_DEFAULT: .*{complaint}"):
        parse_limits(text, name="XMC_QUOTA_DEFAULT")


def test_only_new_units_are_offered_to_the_quota() -> None:
    """A repeat of an earlier create (a retry with the same work_unit_id) is answered
    without asking the quota; a refused item takes no id."""
    asked: list[int] = []

    def admit(i: int) -> QuotaExceededError | None:
        asked.append(i)
        if i == 2:
            return QuotaExceededError(
                "over", principal=ALICE, limit="live_work_units", value=1, retry_after=10
            )
        return None

    plan = plan_work_unit_ids(
        [IdRequest(1, 5), IdRequest(1, None), IdRequest(1, None), IdRequest(1, 5)],
        next_wid={1: 6},
        created_before=set(),
        admit=admit,
    )
    assert asked == [0, 1, 2]  # item 3 repeats item 0 in the group
    assert plan.planned == {(1, 5): 0, (1, 6): 1}
    assert isinstance(plan.refused[2], QuotaExceededError)
    assert plan.next_wid == {1: 7}
    before = plan_work_unit_ids(
        [IdRequest(1, 5)], next_wid={1: 6}, created_before={(1, 5)}, admit=admit
    )
    assert before.created_before == {0: (1, 5)}
    assert asked == [0, 1, 2]


def test_a_quota_refusal_carries_retry_after_and_the_rich_status() -> None:
    refusal = QuotaExceededError(
        "quota: over", principal=ALICE, limit="creates_per_second", value=2, retry_after=0.25
    )
    trailers = dict(refusal_trailers(refusal, "quota: over"))
    assert trailers["retry-after"] == "1"
    blob = trailers["grpc-status-details-bin"]
    assert isinstance(blob, bytes)
    status = status_pb2.Status.FromString(blob)
    assert (status.code, status.message) == (8, "quota: over")
    retry, failure = error_details_pb2.RetryInfo(), error_details_pb2.QuotaFailure()
    assert status.details[0].Unpack(retry)
    assert status.details[1].Unpack(failure)
    assert retry.retry_delay.ToTimedelta() == timedelta(seconds=0.25)
    assert failure.violations[0].subject == ALICE
    assert refusal_trailers(ValueError("no"), "no") == ()


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({"groups": ["ml", " web ", ""]}, {"ml", "web"}),
        ({"groups": "ml"}, {"ml"}),
        ({"groups": [1, "ml"]}, {"ml"}),
        ({"groups": {"ml": True}}, set()),
        ({}, set()),
    ],
)
def test_groups_from_the_token(claims: dict[str, object], expected: set[str]) -> None:
    assert groups_claim(claims, "groups") == expected


def test_the_quota_settings_are_read_with_the_others() -> None:
    env = {
        "XMC_QUOTA_DEFAULT": "creates_per_second=20,live_work_units=5000",
        "XMC_QUOTA_REFRESH_SECONDS": "2",
        "XMC_AUTH_GROUPS_CLAIM": "roles",
    }
    settings = load_settings(env)
    assert settings.quotas.default == Limits(creates_per_second=20, live_work_units=5000)
    assert settings.quotas.refresh_seconds == 2
    assert settings.auth.groups_claim == "roles"
    assert load_settings({}).quotas.default.unlimited
    with pytest.raises(InvalidArgumentError, match=r"^XMC_QUOTA_REFRESH_SECONDS: between"):
        load_settings({"XMC_QUOTA_REFRESH_SECONDS": "0"})


def test_a_refused_principal_is_refused_from_memory_until_its_wait_or_a_second() -> None:
    clock = [T0]
    gate = QuotaGate(
        cast(Store, None),
        QuotaSettings(default=Limits(creates_per_second=0.1)),
        clock=lambda: clock[0],
    )
    bound = gate.bound(Identity("alice@x.com"))
    assert bound.limits == {ALICE: Limits(creates_per_second=0.1)}
    gate.refuse_early(bound)  # nothing remembered yet
    gate.remember(
        QuotaExceededError(
            "quota: over", principal=ALICE, limit="creates_per_second", value=0.1, retry_after=10
        )
    )
    clock[0] = at(0.5)
    with pytest.raises(QuotaExceededError) as refused:
        gate.refuse_early(bound)
    assert refused.value.retry_after == pytest.approx(9.5)
    clock[0] = at(1.0)  # remembered for a second at most: Postgres decides again
    gate.refuse_early(bound)
    unbound = gate.bound(Identity("bob@x.com", groups=frozenset({"ml"})))
    assert unbound.principals == ("user:bob@x.com", ML)
