"""Which queue names a work unit may carry (``xmc.labels.queue_name_problem``): the ESS
refuses the rest at CreateWorkUnit with the field named, before the Actuator would have to
dead-letter the JobSet Kueue's webhook (or the API server) refuses."""

from __future__ import annotations

import pytest

from ess.validation import validate_new_work_unit
from xmc.errors import InvalidArgumentError
from xmc.labels import queue_name_problem
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

FIELD = "work_unit.executable.scheduling_constraints.queue_name"


@pytest.mark.parametrize(
    ("queue", "valid"),
    [
        ("team-a", True),
        ("q", True),
        ("0", True),
        ("team.a-1", True),  # a DNS-1123 subdomain may have dots
        ("a" * 63, True),
        ("a" * 64, False),  # a label value is at most 63 characters
        ("Team-A", False),  # a label value, but Kueue wants a DNS-1123 subdomain
        ("team_a", False),
        ("team a", False),
        ("-team", False),
        ("team-", False),
        ("team..a", False),
        (".team", False),
        ("tëam", False),
        ("team/a", False),
        ("", False),
    ],
)
def test_queue_name_rule(queue: str, valid: bool) -> None:
    assert (queue_name_problem(queue) is None) is valid


def work_unit(queue: str) -> WorkUnit:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = queue
    unit.executable.jobset.jobs.add(name="main", replicas=1).spec.docker_image = "img"
    return unit


def test_create_names_the_field_and_the_value() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_new_work_unit(work_unit("Team A"))
    assert str(caught.value).startswith(f"{FIELD}: 'Team A' is not a Kueue queue name")


def test_create_requires_a_queue() -> None:
    with pytest.raises(InvalidArgumentError, match=f"^{FIELD}: required$"):
        validate_new_work_unit(work_unit(""))


def test_a_very_long_name_is_quoted_shortened() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        validate_new_work_unit(work_unit("x" * 10_000))
    assert len(str(caught.value)) < 400
