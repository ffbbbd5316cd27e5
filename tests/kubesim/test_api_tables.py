"""Table tests of the pure printing decisions (kubesim.tables) and the OpenAPI documents."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubesim import openapi
from kubesim.printers import human_duration, job_cells, pod_cells
from kubesim.resources import RESOURCES
from kubesim.tables import json_path, wants_table

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
CREATED = "2026-01-01T11:59:00Z"
Obj = dict[str, Any]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (47 * 3600, "47h"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (3 * 365 * 86400, "3y"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


def _pod(status: Obj, *, deleted: bool = False, containers: int = 1, **spec: Any) -> Obj:
    meta: Obj = {"name": "p", "creationTimestamp": CREATED}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    names = [{"name": f"c{i}"} for i in range(containers)]
    return {"metadata": meta, "spec": {"containers": names, **spec}, "status": status}


def _running(ready: bool = True, restarts: int = 0, **extra: Any) -> Obj:
    return {"ready": ready, "restartCount": restarts, "state": {"running": {}}, **extra}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(_pod({}), ["p", "0/1", "", "0", "60s"], id="no status yet"),
        pytest.param(
            _pod(
                {
                    "phase": "Pending",
                    "containerStatuses": [
                        {
                            "ready": False,
                            "restartCount": 0,
                            "state": {"waiting": {"reason": "ContainerCreating"}},
                        }
                    ],
                }
            ),
            ["p", "0/1", "ContainerCreating", "0", "60s"],
            id="waiting reason",
        ),
        pytest.param(
            _pod({"phase": "Running", "containerStatuses": [_running()]}),
            ["p", "1/1", "Running", "0", "60s"],
            id="running and ready",
        ),
        pytest.param(
            _pod(
                {"phase": "Running", "containerStatuses": [_running()]},
                deleted=True,
            ),
            ["p", "1/1", "Terminating", "0", "60s"],
            id="deleted and not finished: Terminating",
        ),
        pytest.param(
            _pod(
                {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                        }
                    ],
                },
                deleted=True,
            ),
            ["p", "0/1", "Completed", "0", "60s"],
            id="deleted after finishing keeps its reason",
        ),
        pytest.param(
            _pod(
                {
                    "phase": "Failed",
                    "containerStatuses": [
                        {
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 3}},
                        }
                    ],
                }
            ),
            ["p", "0/1", "ExitCode:3", "0", "60s"],
            id="terminated without a reason",
        ),
        pytest.param(
            _pod({"phase": "Failed", "reason": "Evicted"}),
            ["p", "0/1", "Evicted", "0", "60s"],
            id="the pod's reason wins over its phase",
        ),
        pytest.param(
            _pod(
                {
                    "phase": "Running",
                    "containerStatuses": [
                        _running(
                            restarts=2,
                            lastState={"terminated": {"finishedAt": "2026-01-01T11:59:30Z"}},
                        )
                    ],
                }
            ),
            ["p", "1/1", "Running", "2 (30s ago)", "60s"],
            id="restarts with the last one's age",
        ),
        pytest.param(
            _pod(
                {
                    "phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "init", "restartCount": 0, "state": {"running": {}}}
                    ],
                },
                initContainers=[{"name": "init"}],
            ),
            ["p", "0/1", "Init:0/1", "0", "60s"],
            id="an init container still running",
        ),
    ],
)
def test_pod_cells(pod: Obj, expected: list[Any]) -> None:
    assert pod_cells(pod, NOW)[:5] == expected


def _job(status: Obj, *, deleted: bool = False, **spec: Any) -> Obj:
    meta: Obj = {"name": "j", "creationTimestamp": CREATED}
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return {"metadata": meta, "spec": spec, "status": status}


def _condition(kind: str, status: str = "True") -> list[Obj]:
    return [{"type": kind, "status": status}]


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param(_job({}, completions=3), ["j", "Running", "0/3", "", "60s"], id="new"),
        pytest.param(
            _job({"succeeded": 1, "startTime": "2026-01-01T11:59:30Z"}, parallelism=4),
            ["j", "Running", "1/1 of 4", "30s", "60s"],
            id="no completions, parallel",
        ),
        pytest.param(
            _job(
                {
                    "conditions": _condition("Complete"),
                    "succeeded": 2,
                    "startTime": "2026-01-01T11:00:00Z",
                    "completionTime": "2026-01-01T11:05:00Z",
                },
                completions=2,
            ),
            ["j", "Complete", "2/2", "5m", "60s"],
            id="complete: duration to completionTime",
        ),
        pytest.param(
            _job({"conditions": _condition("Failed")}, deleted=True),
            ["j", "Failed", "0/1", "", "60s"],
            id="failed wins over terminating",
        ),
        pytest.param(
            _job({"conditions": _condition("Suspended")}, deleted=True),
            ["j", "Terminating", "0/1", "", "60s"],
            id="terminating wins over suspended",
        ),
        pytest.param(
            _job({"conditions": _condition("Suspended")}),
            ["j", "Suspended", "0/1", "", "60s"],
            id="suspended",
        ),
        pytest.param(
            _job({"conditions": _condition("Suspended", "False")}),
            ["j", "Running", "0/1", "", "60s"],
            id="a false condition does not count",
        ),
    ],
)
def test_job_cells(job: Obj, expected: list[Any]) -> None:
    assert job_cells(job, NOW)[:5] == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.suspend", False),
        (".status.restarts", 0),
        (".status.missing", None),
        ('.status.conditions[?(@.type=="Completed")].status', "True"),
        (".status.conditions[?(@.type=='Finished')].status", None),
        (".spec.suspend.deeper", None),
    ],
)
def test_json_path(path: str, expected: Any) -> None:
    obj = {
        "spec": {"suspend": False},
        "status": {"restarts": 0, "conditions": [{"type": "Completed", "status": "True"}]},
    }
    assert json_path(obj, path) == expected


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, False),
        ("application/json", False),
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True),
        ("application/json;as=Table;g=meta.k8s.io;v=v1beta1", True),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", False),
        ("application/json, application/json;as=Table;v=v1;g=meta.k8s.io", False),
        (
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            True,
        ),
        ("application/yaml", False),
    ],
)
def test_wants_table(accept: str | None, expected: bool) -> None:
    assert wants_table(accept) is expected


def test_every_served_kind_has_a_patch_operation_with_field_validation() -> None:
    """What kubectl's query-param verifier looks for, for every kind kubesim serves."""
    for resource in RESOURCES:
        for version in resource.versions:
            document = openapi.v3_document(resource.group, version)
            assert document is not None
            patches = [
                item["patch"]
                for item in document["paths"].values()
                if "patch" in item
                and item["patch"]["x-kubernetes-group-version-kind"]["kind"] == resource.kind
            ]
            assert patches, resource.key
            assert all(
                "fieldValidation" in {p["name"] for p in patch["parameters"]} for patch in patches
            )
