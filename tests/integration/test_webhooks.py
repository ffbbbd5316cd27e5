"""Notifications end to end (docs/notifications.md): a real ESS over gRPC, state changes
through its API, and a real HTTP receiver on a local port. Deliveries are signed, come
again until answered 2xx (the same delivery id each time), are cut off when the receiver
never answers without holding up another webhook, and leave a log of every attempt.

Real time with short backoffs (the worker's settings are injected): the ESS runs on the
wall clock so retries fall due; every wait is ``eventually`` on what the receiver got."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.ess_harness import Ess, EssFactory, metadata
from tests.integration.support import WallClock, fetch_all
from tests.integration.test_cli import xmc, xmc_json
from tests.integration.test_ess_api import expect_error
from tests.integration.test_ess_internal import experiment_with_work_units, observation
from tests.integration.test_retries import experiment, failed, send, unit
from tests.integration.ui_support import running_ui
from tests.integration.webhook_receiver import Receiver
from tests.waiting import eventually, holds_for
from xmc.model.states import WorkUnitState
from xmc.model.webhooks import WebhookSettings, verify
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.internal.v1 import executions_pb2
from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_api.xmc.v1 import notifications_pb2_grpc

#: Real time: each test so marked waits out retries and a receiver's timeouts (about a
#: second); the configuration checks wait for nothing.
slow = pytest.mark.slow

S = WorkUnitState
ALICE, BOB, SERVICE = metadata("alice"), metadata("bob"), metadata("reconciler")
SECRET = "a-webhook-secret-of-some-length"
FAST = WebhookSettings(
    poll_seconds=0.05,
    timeout_seconds=0.5,
    concurrency=4,
    base_seconds=0.05,
    cap_seconds=0.2,
    max_attempts=6,
)


async def start(ess_factory: EssFactory, **overrides: Any) -> tuple[Ess, Any]:
    ess: Ess = await ess_factory(
        clock=WallClock(), webhooks=overrides.pop("webhooks", FAST),
        dashboard_url="https://xmc.example/", **overrides,
    )  # fmt: skip
    return ess, notifications_pb2_grpc.NotificationServiceStub(ess.channel)


async def add_webhook(
    hooks: Any, parent: str, url: str, *, who: Any = ALICE, **fields: Any
) -> pb.Webhook:
    webhook: pb.Webhook = await hooks.CreateWebhook(
        pb.CreateWebhookRequest(parent=parent, webhook=pb.Webhook(url=url, **fields)),
        metadata=who,
    )
    return webhook


async def observe(ess: Ess, parent: str, wid: int, *states: WorkUnitState) -> None:
    for i, state in enumerate(states, start=1):
        await ess.executions.UpdateWorkUnitExecutions(
            executions_pb2.UpdateWorkUnitExecutionsRequest(
                updates=[observation(f"{parent}/workUnits/{wid}", 1, state, ess, seconds=i)]
            ),
            metadata=SERVICE,
        )


async def complete_launch(ess: Ess, parent: str) -> None:
    await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=parent, launch_state=ExperimentStatus.COMPLETED
        ),
        metadata=ALICE,
    )


async def deliveries(hooks: Any, parent: str) -> list[pb.Delivery]:
    answer = await hooks.ListDeliveries(pb.ListDeliveriesRequest(parent=parent), metadata=ALICE)
    return list(answer.deliveries)


@slow
async def test_a_finished_experiment_and_a_failed_unit_are_delivered_signed(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 2)
    webhook = await add_webhook(hooks, parent, receiver.url("/ok"), secret=SECRET)
    assert webhook.secret == SECRET
    assert webhook.url == receiver.url("/ok")
    await complete_launch(ess, parent)
    await observe(ess, parent, 1, S.RUNNING, S.COMPLETED)
    await observe(ess, parent, 2, S.RUNNING, S.FAILED)

    got = await eventually(lambda: receiver.at("/ok"), lambda r: len(r) == 2, what="2 posts")
    by_event = {r.headers["X-XMC-Event"]: r for r in got}
    assert set(by_event) == {"work_unit.failed", "experiment.finished"}
    for request in got:
        assert verify(
            SECRET,
            request.headers["X-XMC-Timestamp"],
            request.body,
            request.headers["X-XMC-Signature"],
        )
        assert not verify("another-secret-entirely", request.headers["X-XMC-Timestamp"],
                          request.body, request.headers["X-XMC-Signature"])  # fmt: skip
        assert request.json()["delivery_id"] == request.headers["X-XMC-Delivery"]
    xid = parent.split("/")[1]
    finished = by_event["experiment.finished"].json()
    assert finished["text"] == (
        f"Experiment {xid} finished: 1 completed, 1 failed (2 work units). "
        f"https://xmc.example/experiments/{xid}"
    )
    assert finished["counts"] == {"COMPLETED": 1, "FAILED": 1}
    failed = by_event["work_unit.failed"].json()
    assert failed["work_unit"]["name"] == f"{parent}/workUnits/2"
    assert failed["url"] == f"https://xmc.example/experiments/{xid}/workUnits/2"

    log = await eventually(
        lambda: deliveries(hooks, parent),
        lambda ds: len(ds) == 2 and all(d.status == "delivered" for d in ds),
        what="both delivered in the log",
    )
    first = await hooks.ListDeliveries(
        pb.ListDeliveriesRequest(parent=parent, page_size=1), metadata=BOB
    )
    rest = await hooks.ListDeliveries(
        pb.ListDeliveriesRequest(parent=parent, page_size=1, page_token=first.next_page_token),
        metadata=BOB,
    )
    assert [d.delivery_id for d in (*first.deliveries, *rest.deliveries)] == [
        d.delivery_id for d in log
    ]
    assert not rest.next_page_token
    await expect_error(
        hooks.ListDeliveries(pb.ListDeliveriesRequest(parent=parent, page_token="x"),
                             metadata=ALICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    )  # fmt: skip
    for delivery in log:
        assert delivery.webhook == webhook.name
        assert delivery.attempts == 1
        (attempt,) = delivery.log
        assert (attempt.attempt, attempt.http_status, attempt.response) == (1, 200, "ok")


@slow
async def test_a_receiver_that_fails_then_recovers_gets_it_once_more(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 1)
    await add_webhook(hooks, parent, receiver.url("/flaky/2"), events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)

    got = await eventually(lambda: receiver.at("/flaky/2"), lambda r: len(r) == 3, what="3 posts")
    assert len({r.headers["X-XMC-Delivery"] for r in got}) == 1, "one delivery, retried"
    assert len({r.body for r in got}) == 1, "the same body every attempt"
    (delivery,) = await eventually(
        lambda: deliveries(hooks, parent), lambda ds: ds[0].status == "delivered"
    )
    assert [(a.attempt, a.http_status, a.response) for a in delivery.log] == [
        (1, 500, "down for maintenance"),
        (2, 500, "down for maintenance"),
        (3, 200, "ok"),
    ]
    # Delivered: never sent again.
    await holds_for(lambda: len(receiver.at("/flaky/2")), 3, during=0.5)


@slow
async def test_a_receiver_that_never_answers_is_cut_off_and_holds_up_no_other(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 1)
    hang = await add_webhook(hooks, parent, receiver.url("/hang"), events=["work_unit.failed"])
    await add_webhook(hooks, parent, receiver.url("/ok"), events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)

    await eventually(lambda: receiver.at("/ok"), what="the answering webhook's post")
    await eventually(lambda: receiver.at("/hang"), lambda r: len(r) >= 2, what="a retry")
    log = {d.webhook: d for d in await deliveries(hooks, parent)}
    assert log[hang.name].status == "pending"
    first = log[hang.name].log[0]
    assert (first.http_status, first.error) == (0, "timeout after 0.5s")
    assert 450 <= first.latency_ms < 2000
    assert log[hang.name].HasField("next_attempt_time")


@slow
async def test_a_delivery_is_given_up_after_its_attempts(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory, webhooks=dataclasses.replace(FAST, max_attempts=3))
    parent = await experiment_with_work_units(ess, 1)
    await add_webhook(hooks, parent, receiver.url("/flaky/99"), events=["work_unit.failed"])
    await add_webhook(hooks, parent, receiver.url("/gone"), events=["work_unit.failed"])
    # Nothing listens on port 1: every attempt is refused.
    refused = await add_webhook(hooks, parent, "http://127.0.0.1:1/x", events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)

    log = await eventually(
        lambda: deliveries(hooks, parent),
        lambda ds: len(ds) == 3 and all(d.status == "failed" for d in ds),
        what="all given up",
    )
    attempts = sorted(len(d.log) for d in log)
    assert attempts == [1, 3, 3], "410 ends at once; 500s and refusals after max_attempts"
    (never,) = [d for d in log if d.webhook == refused.name]
    assert {(a.http_status, a.error) for a in never.log} == {
        (0, "cannot connect: connection refused")
    }
    await holds_for(lambda: len(receiver.requests), 4, during=0.4)


@slow
async def test_user_webhooks_apply_to_their_experiments_only(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    mine = await add_webhook(hooks, "users/me", receiver.url("/alice"), events=["work_unit.failed"])
    assert mine.parent == "users/alice@example.com"
    await add_webhook(hooks, "users/me", receiver.url("/bob"), who=BOB)
    parent = await experiment_with_work_units(ess, 1)  # alice's
    await observe(ess, parent, 1, S.FAILED)

    await eventually(lambda: receiver.at("/alice"), what="alice's webhook")
    await holds_for(lambda: receiver.at("/bob"), [], during=0.3)
    listed = await hooks.ListWebhooks(pb.ListWebhooksRequest(parent="users/me"), metadata=BOB)
    assert [w.url for w in listed.webhooks] == [f"http://127.0.0.1:{receiver.port}/bob"]
    assert [w.secret for w in listed.webhooks] == [""]


@slow
async def test_failures_over_a_threshold_fire_once_per_crossing(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 4)
    await add_webhook(
        hooks, parent, receiver.url("/threshold"),
        events=["experiment.failures_over_threshold"], failed_count=2, failed_fraction=0.5,
    )  # fmt: skip
    for wid in (1, 2, 3):
        await observe(ess, parent, wid, S.FAILED)
    (got,) = await eventually(lambda: receiver.at("/threshold"), what="the crossing")
    body = got.json()
    assert (body["failed"], body["total"]) == (2, 4)
    assert "2 of 4 work units failed (50%)" in body["text"]
    await holds_for(lambda: len(receiver.at("/threshold")), 1, during=0.3)


async def test_webhook_configuration_is_checked(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 1)
    for fields, fragment in (
        ({"url": "ftp://example.com/x"}, "webhook.url: must be http:// or https://"),
        ({"url": ""}, "webhook.url: required"),
        ({"url": "https://" + "a" * 2100}, "webhook.url: at most 2048 characters"),
        ({"url": "https://h/x", "secret": "short"}, "webhook.secret: 16 to 256"),
        # A NUL anywhere is refused by the ESS's request screen, naming the field.
        ({"url": "https://h/\x00"}, "webhook.url: contains a NUL"),
        ({"url": "https://h/x", "secret": "x" * 16 + "\x00"}, "webhook.secret: contains a NUL"),
        ({"url": "https://h/x", "events": ["\x00"]}, "webhook.events[0]: contains a NUL"),
        ({"url": "https://h/x\x01"}, "webhook.url: no spaces or control characters"),
        ({"url": "https://h/x", "secret": "x" * 16 + "\x07"}, "webhook.secret: no control"),
        ({"url": "https://h/x", "failed_fraction": float("inf")}, "webhook.failed_fraction"),
        ({"url": "https://h/x", "failed_count": -1}, "webhook.failed_count"),
        ({"url": "https://h/x", "events": ["nope"]}, "webhook.events[0]: 'nope' is not one"),
        ({"url": "https://h/x", "failed_fraction": 1.5}, "webhook.failed_fraction"),
        (
            {"url": "https://h/x", "events": ["experiment.failures_over_threshold"]},
            "needs failed_count or failed_fraction",
        ),
    ):
        await expect_error(
            hooks.CreateWebhook(
                pb.CreateWebhookRequest(parent=parent, webhook=pb.Webhook(**fields)),
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            fragment,
        )
    await expect_error(
        add_webhook(hooks, parent, "https://h/x", who=BOB),
        grpc.StatusCode.PERMISSION_DENIED,
        "may not change this experiment",
    )
    await expect_error(
        hooks.ListWebhooks(pb.ListWebhooksRequest(parent="users/alice@example.com"), metadata=BOB),
        grpc.StatusCode.PERMISSION_DENIED,
        "only their own",
    )
    await expect_error(
        add_webhook(hooks, "experiments/999", "https://h/x"), grpc.StatusCode.NOT_FOUND, ""
    )
    slack = await add_webhook(hooks, parent, "https://hooks.slack.com/services/T0/B0/XYZ")
    for i in range(20):
        await add_webhook(hooks, "users/me", f"https://h/{i}")
    await expect_error(
        add_webhook(hooks, "users/me", "https://h/20"),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "has 20 webhooks, the most it may have",
    )
    assert slack.secret, "a secret is made when none is given"
    listed = await hooks.ListWebhooks(pb.ListWebhooksRequest(parent=parent), metadata=BOB)
    assert [w.url for w in listed.webhooks] == ["https://hooks.slack.com/services/…"]
    assert [w.secret for w in listed.webhooks] == [""]
    await expect_error(
        hooks.DeleteWebhook(pb.DeleteWebhookRequest(name=slack.name), metadata=BOB),
        grpc.StatusCode.PERMISSION_DENIED,
        "",
    )
    await hooks.DeleteWebhook(pb.DeleteWebhookRequest(name=slack.name), metadata=ALICE)
    assert not (
        await hooks.ListWebhooks(pb.ListWebhooksRequest(parent=parent), metadata=ALICE)
    ).webhooks
    await expect_error(
        hooks.DeleteWebhook(pb.DeleteWebhookRequest(name="webhooks/x"), metadata=ALICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "name: 'webhooks/x'",
    )


@slow
async def test_queued_deliveries_outlive_the_ess(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    """Queued in the transaction of the state change: an ESS that stops before sending
    leaves the row for the next one (which sends it)."""
    stopped = WebhookSettings(poll_seconds=3600, concurrency=1)
    ess, hooks = await start(ess_factory, webhooks=stopped)
    assert ess.server.webhooks is not None
    ess.server.webhooks.claim = _claim_nothing  # type: ignore[method-assign]
    parent = await experiment_with_work_units(ess, 1)
    await add_webhook(hooks, parent, receiver.url("/ok"), events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)
    rows = await fetch_all(ess.database_url, "SELECT status FROM webhook_deliveries")
    assert [r["status"] for r in rows] == ["pending"]
    await ess.server.stop(grace=1)

    await start(ess_factory)
    await eventually(lambda: receiver.at("/ok"), what="the next ESS's delivery")


async def _claim_nothing() -> list[Any]:
    return []


@slow
async def test_the_cli_adds_lists_shows_deliveries_and_removes(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, _hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 1)
    xid = parent.split("/")[1]
    added = await xmc(ess, "webhooks", "add", receiver.url("/ok"), "-x", xid,
                      "--event", "work_unit.failed")  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "secret: " in added.stdout
    name = next(line for line in added.stdout.splitlines() if line.startswith("webhooks/"))
    listed = await xmc_json(ess, "webhooks", "list", "-x", xid)
    assert [(w["name"], w["events"]) for w in listed] == [(name, ["work_unit.failed"])]
    assert "secret" not in listed[0]
    both = await xmc(ess, "webhooks", "list", "-x", xid, "--mine")
    assert both.exit_code != 0
    assert "exactly one of --experiment XID and --mine" in both.output

    await observe(ess, parent, 1, S.FAILED)
    await eventually(lambda: receiver.at("/ok"), what="the post")
    table = await eventually(
        lambda: xmc(ess, "webhooks", "deliveries", xid),
        lambda r: "delivered" in r.stdout,
        what="the delivery log",
    )
    assert "work_unit.failed" in table.stdout
    assert "200 ok" in table.stdout
    removed = await xmc(ess, "webhooks", "rm", name.split("/")[1])
    assert removed.exit_code == 0, removed.output
    assert await xmc_json(ess, "webhooks", "list", "-x", xid) == []


@slow
async def test_the_dashboard_shows_adds_and_removes_webhooks_and_the_log(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    parent = await experiment_with_work_units(ess, 1)
    xid = parent.split("/")[1]
    async with running_ui(ess.channel) as ui, aiohttp.ClientSession() as http:
        page = f"{ui}/experiments/{xid}"
        async with http.get(page) as response:
            assert response.status == 200
            assert "No webhook on this experiment" in await response.text()
        async with http.post(
            f"{page}/webhooks", data={"url": "ftp://x/y"}, allow_redirects=False
        ) as response:
            assert response.status == 400
            assert "webhook.url: must be http:// or https://" in await response.text()
        form = {"url": receiver.url("/ok/T0/secret-path"), "event": "work_unit.failed",
                "failed_count": "", "secret": ""}  # fmt: skip
        async with http.post(f"{page}/webhooks", data=form, allow_redirects=False) as response:
            assert response.status == 303, await response.text()
            assert "added" in response.headers["Location"]
        (webhook,) = (
            await hooks.ListWebhooks(pb.ListWebhooksRequest(parent=parent), metadata=ALICE)
        ).webhooks
        assert webhook.events == ["work_unit.failed"]

        await observe(ess, parent, 1, S.FAILED)
        await eventually(lambda: receiver.at("/ok/T0/secret-path"), what="the post")

        async def shown() -> str:
            async with http.get(page) as response:
                return await response.text()

        text = await eventually(shown, lambda t: "200 ok" in t, what="the delivery on the page")
        assert f"http://127.0.0.1:{receiver.port}/ok/…" in text
        assert "secret-path" not in text
        assert "work_unit.failed" in text
        # The REST face of the same service (docs/rest.md), with alice's token.
        alice = {"Authorization": "Bearer token-alice"}
        async with http.get(f"{ui}/v1/{parent}/webhookDeliveries", headers=alice) as response:
            assert response.status == 200
            (delivery,) = (await response.json())["deliveries"]
            assert delivery["status"] == "delivered"
            assert delivery["log"][0]["httpStatus"] == 200
        async with http.post(
            f"{ui}/v1/users/me/webhooks", json={"url": "gopher://x"}, headers=alice
        ) as response:
            assert response.status == 400
            assert "webhook.url" in (await response.json())["error"]["message"]
        hook_id = webhook.name.split("/")[1]
        async with http.post(
            f"{page}/webhooks/{hook_id}/delete", allow_redirects=False
        ) as response:
            assert response.status == 303
        assert "No webhook on this experiment" in await shown()

        # Another site's form cannot add a webhook (and so read the notifications).
        for path in (f"/experiments/{xid}/webhooks", "/webhooks"):
            async with http.post(
                f"{ui}{path}",
                data={"url": "https://evil.example/x"},
                headers={"Origin": "https://evil.example"},
                allow_redirects=False,
            ) as response:
                assert response.status == 403

        # The caller's own webhooks: /webhooks (the page's token is alice's).
        async with http.get(f"{ui}/webhooks") as response:
            assert response.status == 200
            assert "No webhook of yours." in await response.text()
        form = {"url": "https://hooks.slack.com/services/T0/B0/XYZ",
                "event": "experiment.finished"}  # fmt: skip
        async with http.post(f"{ui}/webhooks", data=form, allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"].startswith("/webhooks?notice=webhooks")
        (mine,) = (
            await hooks.ListWebhooks(pb.ListWebhooksRequest(parent="users/me"), metadata=ALICE)
        ).webhooks
        async with http.get(f"{ui}/webhooks") as response:
            text = await response.text()
        assert "https://hooks.slack.com/services/…" in text
        assert "XYZ" not in text
        async with http.post(f"{ui}/{mine.name}/delete", allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"].startswith("/webhooks?notice=")
        assert not (
            await hooks.ListWebhooks(pb.ListWebhooksRequest(parent="users/me"), metadata=ALICE)
        ).webhooks


@slow
async def test_a_worker_that_dies_mid_attempt_leaves_it_to_the_next(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    """The claim is a lease: the first ESS stops while its POST hangs, nothing is recorded
    of that attempt, and the next ESS sends the same delivery once the lease runs out."""
    leased = dataclasses.replace(FAST, timeout_seconds=30, lease_seconds=31)
    ess, hooks = await start(ess_factory, webhooks=leased)
    parent = await experiment_with_work_units(ess, 1)
    await add_webhook(hooks, parent, receiver.url("/hang-once"), events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)
    await eventually(lambda: receiver.at("/hang-once"), what="the first, hanging, attempt")
    await ess.server.stop(grace=0.1)  # its in-flight attempt dies with it

    rows = await fetch_all(ess.database_url, "SELECT status, attempts FROM webhook_deliveries")
    assert [(r["status"], r["attempts"]) for r in rows] == [("pending", 1)]
    await fetch_all(ess.database_url, "UPDATE webhook_deliveries SET next_attempt = now()")
    _next, hooks = await start(ess_factory)  # the lease is over (moved to now, not waited out)
    got = await eventually(lambda: receiver.at("/hang-once"), lambda r: len(r) == 2)
    assert got[0].headers["X-XMC-Delivery"] == got[1].headers["X-XMC-Delivery"]
    assert got[0].body == got[1].body
    (delivery,) = await eventually(
        lambda: deliveries(hooks, parent), lambda ds: ds[0].status == "delivered"
    )
    assert [(a.attempt, a.http_status) for a in delivery.log] == [(2, 200)]


@slow
async def test_a_failed_claim_is_retried_and_the_worker_goes_on(
    ess_factory: EssFactory, receiver: Receiver
) -> None:
    ess, hooks = await start(ess_factory)
    worker = ess.server.webhooks
    assert worker is not None
    real_claim, failed = worker.claim, list[bool]()

    async def claim_failing_once() -> list[Any]:
        if not failed:
            failed.append(True)
            raise OSError("postgres went away")
        return await real_claim()

    worker.claim = claim_failing_once  # type: ignore[method-assign]
    parent = await experiment_with_work_units(ess, 1)
    await add_webhook(hooks, parent, receiver.url("/ok"), events=["work_unit.failed"])
    await observe(ess, parent, 1, S.FAILED)
    await eventually(lambda: receiver.at("/ok"), what="the delivery after a failed claim")
    assert failed == [True]


async def queued_events(ess: Ess) -> list[str]:
    rows = await fetch_all(ess.database_url, "SELECT event FROM webhook_deliveries ORDER BY id")
    return [r["event"] for r in rows]


async def test_a_retried_failure_is_not_final_and_the_last_one_is(
    ess_factory: EssFactory,
) -> None:
    """The retry is decided in the FAILED write's transaction (decision 42), and the
    notifications are queued on that transaction's net effect: a failure its policy
    retried announces nothing (not "failed", not "experiment finished", not a threshold
    crossed); the failure of the last attempt announces all three."""
    ess, hooks = await start(ess_factory)
    parent = await experiment(ess, unit({"max_attempts": 2, "on_exit_codes": [137]}))
    await add_webhook(
        hooks, parent, "https://hooks.example/x", failed_count=1,
        events=["work_unit.failed", "experiment.finished", "experiment.failures_over_threshold"],
    )  # fmt: skip
    await complete_launch(ess, parent)
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=137))
    assert await queued_events(ess) == []
    await send(ess, failed(ess, name, 2, code=137))
    assert sorted(await queued_events(ess)) == [
        "experiment.failures_over_threshold",
        "experiment.finished",
        "work_unit.failed",
    ]
