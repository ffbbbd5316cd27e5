"""The experiment page's Notifications block as data (pure)."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from ui.notifications_view import answer_text, delivery_row, threshold_text, webhook_row
from xmc_api.xmc.v1 import notifications_pb2 as pb

T = Timestamp(seconds=1_800_000_000)


def test_threshold_text() -> None:
    assert threshold_text(pb.Webhook()) == "—"
    assert threshold_text(pb.Webhook(failed_count=3)) == "≥ 3 failed"
    assert threshold_text(pb.Webhook(failed_count=3, failed_fraction=0.1)) == (
        "≥ 3 failed and ≥ 10% failed"
    )


def test_answers() -> None:
    assert answer_text(pb.DeliveryAttempt(http_status=200, response="ok\n")) == "200 ok"
    assert answer_text(pb.DeliveryAttempt(http_status=500, response="a\n  b")) == "500 a b"
    assert answer_text(pb.DeliveryAttempt(error="timeout after 10s")) == "timeout after 10s"
    assert answer_text(pb.DeliveryAttempt()) == "no answer"


def test_rows() -> None:
    hook = webhook_row(pb.Webhook(name="webhooks/4", url="https://h/…", events=["a"]))
    assert (hook["id"], hook["url"], hook["events"]) == ("4", "https://h/…", ["a"])
    pending = pb.Delivery(
        delivery_id="d", webhook="webhooks/4", event="work_unit.failed", status="pending",
        attempts=1, next_attempt_time=T, finish_time=Timestamp(seconds=1),
        log=[pb.DeliveryAttempt(attempt=1, http_status=503, latency_ms=12)],
    )  # fmt: skip
    row = delivery_row(pending)
    assert (row["webhook"], row["tone"], row["when"]) == ("4", "pending", "2027-01-15 08:00:00Z")
    assert row["log"] == [{"attempt": 1, "start": "", "answer": "503", "latency_ms": 12}]
    done = delivery_row(pb.Delivery(status="delivered", finish_time=T, next_attempt_time=T))
    assert (done["tone"], done["when"]) == ("done", "2027-01-15 08:00:00Z")
