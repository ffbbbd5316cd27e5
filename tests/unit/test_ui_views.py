"""The dashboard's view models (pure): state bar, worst severity, rows, filters, redirects,
settings."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from ui import views
from ui.actions import back_to, came_from
from ui.gateway import call_metadata
from ui.main import UiRun
from ui.transcode import HTTP_STATUS
from xmc.errors import InvalidArgumentError
from xmc.model.states import Severity, WorkUnitState
from xmc.settings import load_settings
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        ([], []),
        ([(S.RUNNING, 0)], []),
        ([(S.RUNNING, 1)], [("RUNNING", 1, 100.0, "running")]),
        (
            [(S.COMPLETED, 3), (S.RUNNING, 1)],  # running first: the bar's order, not input's
            [("RUNNING", 1, 25.0, "running"), ("COMPLETED", 3, 75.0, "done")],
        ),
        (
            [(S.FAILED, 1), (S.STOPPED, 1), (S.SCHEDULING, 1)],
            [
                ("SCHEDULING", 1, 33.33, "pending"),
                ("FAILED", 1, 33.33, "failed"),
                ("STOPPED", 1, 33.33, "stopped"),
            ],
        ),
        ([(99, 2), (0, 2)], [("WORK_UNIT_STATE_UNSPECIFIED", 4, 100.0, "idle")]),  # unknown
    ],
)
def test_state_bar(counts: list[tuple[int, int]], want: list[tuple[str, int, float, str]]) -> None:
    got = views.state_bar(counts)
    assert [(s["state"], s["count"], s["percent"], s["tone"]) for s in got] == want


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        ([], ""),
        ([(Severity.ERROR, 0)], ""),
        ([(Severity.INFO, 5)], "INFO"),
        ([(Severity.INFO, 5), (Severity.FATAL, 1), (Severity.WARNING, 2)], "FATAL"),
        ([(Severity.ERROR, 1), (Severity.FATAL, 0)], "ERROR"),
        ([(Severity.SEVERITY_UNSPECIFIED, 3)], ""),
        ([(45, 1)], "45"),  # a severity this build does not know still counts
    ],
)
def test_worst_severity(counts: list[tuple[int, int]], want: str) -> None:
    assert views.worst_severity(counts) == want


def test_every_state_has_a_tone_and_a_place_in_the_bar() -> None:
    assert set(views.STATE_TONE) == set(S)
    assert sorted(views.BAR_ORDER) == sorted(S)


def _unit(state: S, *, user: str = "", system: str = "", severity: int = 0) -> WorkUnit:
    unit = WorkUnit(name="experiments/7/workUnits/3", tags=["lr=0.1"])
    execution = unit.current_work_unit_execution
    execution.name = "experiments/7/workUnits/3/executions/2"
    execution.status.state = int(state)  # type: ignore[assignment]
    execution.status.state_update_time.FromSeconds(1_767_225_600)
    if user:
        execution.status.user_message.user_facing_text = user
        execution.status.user_message.severity = severity  # type: ignore[assignment]
    if system:
        execution.status.system_message.user_facing_text = system
        execution.status.system_message.severity = severity  # type: ignore[assignment]
    return unit


@pytest.mark.parametrize(
    ("unit", "want"),
    [
        (_unit(S.RUNNING), {"state": "RUNNING", "can_stop": True, "message": ""}),
        (_unit(S.STOPPING), {"state": "STOPPING", "can_stop": False}),
        (_unit(S.COMPLETED), {"state": "COMPLETED", "can_stop": False, "tone": "done"}),
        (_unit(S.FAILED, system="oom", severity=40), {"message": "oom", "severity": "ERROR"}),
        (
            _unit(S.RUNNING, user="epoch 3", system="queued", severity=20),
            {"message": "epoch 3", "severity": "INFO"},  # the user's own message wins
        ),
    ],
)
def test_work_unit_row(unit: WorkUnit, want: dict[str, Any]) -> None:
    row = views.work_unit_row(unit)
    assert row["wid"] == "3"
    assert row["execution"] == "2"
    assert row["tags"] == ["lr=0.1"]
    assert row["changed"] == "2026-01-01 00:00:00Z"
    assert {k: row[k] for k in want} == want


def test_experiment_row() -> None:
    experiment = Experiment(name="experiments/7", title="", creator="a@example.com")
    experiment.status.active_state = 1  # type: ignore[assignment]
    experiment.status.launch_state = 2  # type: ignore[assignment]
    experiment.status.child_state_counts.add(state=int(S.RUNNING), count=2)
    experiment.status.message_severity_counts.add(severity=int(Severity.WARNING), count=1)
    row = views.experiment_row(experiment)
    assert row["xid"] == "7"
    assert row["title"] == "(untitled)"
    assert row["created"] == ""
    assert (row["active"], row["launch"], row["worst"], row["total"]) == (
        "ACTIVE", "COMPLETED", "WARNING", 2,
    )  # fmt: skip


def test_execution_message_jobset_and_scheduling() -> None:
    execution = WorkUnitExecution(name="experiments/7/workUnits/3/executions/1")
    execution.state = WorkUnitExecution.INACTIVE
    execution.status.state = int(S.SCHEDULING)  # type: ignore[assignment]
    info = execution.status.scheduling_information
    info.user_facing_text = "waiting for quota"
    info.auxiliary_info.queue_info.position_in_queue = 4
    info.auxiliary_info.queue_info.total_workloads_in_queue = 9
    execution.metadata.resource_flavor = "default-flavor"
    execution.metadata.executing_cluster.cluster_name = "c1"
    jobset = execution.status.detailed_status.jobset_status
    jobset.conditions.add(type="Suspended", status="True", reason="Queued")
    jobset.replicated_jobs_status.add(name="workers", active=2)

    row = views.execution_row(execution)
    assert (row["eid"], row["activity"], row["state"], row["tone"]) == (
        "1", "INACTIVE", "SCHEDULING", "pending",
    )  # fmt: skip
    scheduling = views.scheduling_info(execution)
    assert (scheduling["position"], scheduling["queued"]) == (4, 9)
    assert (scheduling["cluster"], scheduling["flavor"]) == ("c1", "default-flavor")
    detail = views.jobset_detail(execution.status)
    assert detail["conditions"][0]["reason"] == "Queued"
    assert detail["replicated_jobs"] == [
        {"name": "workers", "ready": 0, "active": 2, "succeeded": 0, "failed": 0}
    ]
    assert views.scheduling_info(WorkUnitExecution())["position"] is None

    message = StatusMessage(execution_id=1)
    message.content.severity = int(Severity.ERROR)  # type: ignore[assignment]
    message.content.source = 4  # type: ignore[assignment]
    message.content.user_facing_text = "exited with code 3"
    assert views.message_row(message) == {
        "eid": 1, "time": "", "severity": "ERROR", "source": "KUBERNETES",
        "text": "exited with code 3", "url": "",
    }  # fmt: skip
    message.content.user_facing_url.url = "javascript:alert(1)"
    assert views.message_row(message)["url"] == "", "only http(s) becomes a link"
    message.content.user_facing_url.url = "https://example.com/run/3"
    assert views.message_row(message)["url"] == "https://example.com/run/3"


@pytest.mark.parametrize(
    ("state", "want"),
    [("", ""), ("RUNNING", "state = RUNNING"), ("SCHEDULING_PAUSED", "state = SCHEDULING_PAUSED")],
)
def test_state_filter(state: str, want: str) -> None:
    assert views.state_filter(state) == want


@pytest.mark.parametrize("state", ["running", "WORK_UNIT_STATE_UNSPECIFIED", "x OR wid > 0"])
def test_state_filter_refuses_anything_else(state: str) -> None:
    with pytest.raises(ValueError, match="unknown state"):
        views.state_filter(state)


@pytest.mark.parametrize(
    ("target", "want"),
    [
        ("/experiments/7?state=RUNNING", "/experiments/7?state=RUNNING&notice=done"),
        ("/experiments/7?notice=old", "/experiments/7?notice=done"),
        ("https://evil.example/x", "/fallback?notice=done"),
        ("//evil.example/x", "/fallback?notice=done"),
        ("", "/fallback?notice=done"),
        ("relative", "/fallback?notice=done"),
    ],
)
def test_back_to_stays_on_this_site(target: str, want: str) -> None:
    assert back_to(target, "done", "/fallback") == want


@pytest.mark.parametrize(
    ("referer", "want"),
    [
        ("http://ui:8080/experiments/7?state=RUNNING", "/experiments/7?state=RUNNING"),
        ("http://ui:8080/experiments/7#top", "/experiments/7"),
        ("http://elsewhere:8080/experiments/7", ""),
        ("", ""),
    ],
)
def test_came_from_only_this_host(referer: str, want: str) -> None:
    assert came_from(referer, "ui:8080") == want


@pytest.mark.parametrize(
    ("header", "default", "want"),
    [
        ("Bearer abc", "dev", (("authorization", "Bearer abc"), ("x-request-id", "r1"))),
        (None, "dev", (("authorization", "Bearer dev"), ("x-request-id", "r1"))),
        ("", "", (("x-request-id", "r1"),)),
    ],
)
def test_call_metadata(header: str | None, default: str, want: tuple[tuple[str, str], ...]) -> None:
    assert call_metadata(header, default, "r1") == want


def test_every_grpc_code_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    assert HTTP_STATUS[grpc.StatusCode.NOT_FOUND] == 404


def test_settings() -> None:
    settings = UiRun.from_settings(
        load_settings(
            {"XMC_UI_LISTEN": "0.0.0.0:9000", "XMC_ESS_TARGET": "ess:50051", "XMC_UI_TOKEN": "t"}
        )
    )
    assert (settings.listen, settings.ess_target, settings.options.default_token) == (
        "0.0.0.0:9000", "ess:50051", "t",
    )  # fmt: skip
    assert UiRun.from_settings(load_settings({})).listen == "127.0.0.1:8080"
    for bad in ("0", "soon", "inf"):
        with pytest.raises(InvalidArgumentError, match="XMC_UI_POLL_SECONDS"):
            load_settings({"XMC_UI_POLL_SECONDS": bad})
