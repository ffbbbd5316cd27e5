"""``xmc webhooks``' pure pieces: which parent the flags name, webhook names, the last
answer of a delivery."""

from __future__ import annotations

import pytest

from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_cli.client import CliError
from xmc_cli.webhooks import last_answer, parent_of, webhook_name


def test_parent_of() -> None:
    assert parent_of("12", mine=False) == "experiments/12"
    assert parent_of("experiments/12", mine=False) == "experiments/12"
    assert parent_of(None, mine=True) == "users/me"
    for experiment, mine in ((None, False), ("12", True)):
        with pytest.raises(CliError, match="exactly one of --experiment XID and --mine"):
            parent_of(experiment, mine)


def test_webhook_name() -> None:
    assert webhook_name("7") == "webhooks/7"
    assert webhook_name("webhooks/7") == "webhooks/7"


@pytest.mark.parametrize(
    ("log", "shown"),
    [
        ([], ""),
        ([pb.DeliveryAttempt(http_status=500, response="x"), pb.DeliveryAttempt(http_status=200,
                                                                                 response="ok")],
         "200 ok"),
        ([pb.DeliveryAttempt(error="timeout after 10s")], "timeout after 10s"),
        ([pb.DeliveryAttempt(http_status=503, response="a\n" + "b" * 80)], "503 a " + "b" * 38),
    ],
)  # fmt: skip
def test_last_answer(log: list[pb.DeliveryAttempt], shown: str) -> None:
    assert last_answer(pb.Delivery(log=log)) == shown
