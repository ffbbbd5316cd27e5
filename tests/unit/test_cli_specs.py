"""The ``xmc`` CLI's pure parts: launch plans from flags and spec files, and the watch
transcript (what changed between two polls)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_cli.client import CliError, parse_endpoint
from xmc_cli.specs import (
    LaunchFlags,
    LaunchPlan,
    SpecError,
    UnitOptions,
    build_work_unit,
    plan_launch,
)
from xmc_cli.watching import Snapshot, as_created, changes, summary

BEHAVIOR = 'kubesim.xmc/behavior={"run_seconds": 20}'
IMAGE = UnitOptions(image="python:3.11", command="python train.py")
JOBSET = {"jobs": [{"name": "main", "spec": {"docker_image": "busybox"}}]}


def unit_view(w: WorkUnit) -> tuple[Any, ...]:
    job = w.executable.jobset.jobs[0]
    return (
        w.executable.scheduling_constraints.queue_name,
        job.spec.docker_image,
        list(job.spec.command),
        dict(job.spec.args),
        dict(job.annotations),
    )


def view(plan: LaunchPlan) -> dict[str, Any]:
    e = plan.experiment
    return {
        "experiment": (e.title, list(e.tags), e.notes, int(e.priority)),
        "units": [unit_view(w) for w in plan.work_units],
    }


@pytest.mark.parametrize(
    ("spec", "flags", "options", "expected"),
    [
        pytest.param(
            None,
            LaunchFlags(title="t", count=3),
            IMAGE,
            {
                "experiment": ("t", [], "", 0),
                "units": [("cpu-queue", "python:3.11", ["python", "train.py"], {}, {})] * 3,
            },
            id="flags only: count identical units on the default queue",
        ),
        pytest.param(
            None,
            LaunchFlags(title="t", queue="q", tags=("a",), notes="n"),
            UnitOptions(image="i", annotations=(BEHAVIOR,)),
            {
                "experiment": ("t", ["a"], "n", 0),
                "units": [("q", "i", [], {}, {"kubesim.xmc/behavior": '{"run_seconds": 20}'})],
            },
            id="one unit by default; an annotation value may hold '='",
        ),
        pytest.param(
            {"title": "s", "tags": ["x"], "notes": "sn", "priority": "high", "work_unit": JOBSET,
             "sweep": [{"lr": 0.1, "warm": True}, {"lr": "1e-3", "warm": False}]},
            LaunchFlags(title="flag title", tags=("y",)),
            UnitOptions(),
            {
                "experiment": ("flag title", ["x", "y"], "sn", 3),
                "units": [
                    ("cpu-queue", "busybox", [], {"lr": "0.1", "warm": "true"}, {}),
                    ("cpu-queue", "busybox", [], {"lr": "1e-3", "warm": "false"}, {}),
                ],
            },
            id="sweep over a spec template; flags win, tags add up, values become strings",
        ),
        pytest.param(
            {"title": "s", "sweep": [{"seed": 1}, {"seed": 2}]},
            LaunchFlags(),
            IMAGE,
            {
                "experiment": ("s", [], "", 0),
                "units": [
                    ("cpu-queue", "python:3.11", ["python", "train.py"], {"seed": "1"}, {}),
                    ("cpu-queue", "python:3.11", ["python", "train.py"], {"seed": "2"}, {}),
                ],
            },
            id="sweep over the flags' template",
        ),
        pytest.param(
            {"title": "l", "work_units": [
                {"executable": {"scheduling_constraints": {"queue_name": "own"},
                                "jobset": JOBSET}},
                JOBSET,
            ]},
            LaunchFlags(),
            UnitOptions(),
            {
                "experiment": ("l", [], "", 0),
                "units": [("own", "busybox", [], {}, {}), ("cpu-queue", "busybox", [], {}, {})],
            },
            id="a list of units, in WorkUnit or JobSetExecutable form",
        ),
        pytest.param(
            {"title": "l", "work_units": [{"executable": {
                "scheduling_constraints": {"queue_name": "own"}, "jobset": JOBSET}}]},
            LaunchFlags(queue="flag"),
            UnitOptions(),
            {"experiment": ("l", [], "", 0), "units": [("flag", "busybox", [], {}, {})]},
            id="--queue overrides the spec's queue",
        ),
    ],
)  # fmt: skip
def test_plan_launch(
    spec: Any, flags: LaunchFlags, options: UnitOptions, expected: dict[str, Any]
) -> None:
    assert view(plan_launch(spec, flags=flags, options=options, where="--spec s.yaml")) == expected


@pytest.mark.parametrize(
    ("spec", "flags", "options", "message"),
    [
        pytest.param(None, LaunchFlags(), IMAGE, "--title (or title in --spec) is required",
                     id="no title"),
        pytest.param(None, LaunchFlags(title="t"), UnitOptions(),
                     "--image (or --spec with work_unit) is required", id="nothing to run"),
        pytest.param([1], LaunchFlags(title="t"), IMAGE,
                     "--spec s.yaml: must hold a mapping, got list", id="spec not a mapping"),
        pytest.param({"titel": "t"}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: unknown field 'titel' (known: title,", id="unknown field"),
        pytest.param({"title": 3}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: title: must be a string, got int", id="title not a string"),
        pytest.param({"title": "t", "tags": "a"}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: tags: must be a non-empty list", id="tags not a list"),
        pytest.param({"title": "t", "tags": ["a", 2]}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: tags[1]: must be a string, got int", id="tag not a string"),
        pytest.param({"title": "t", "priority": "urgent"}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: priority: must be one of LOW, NORMAL, HIGH",
                     id="unknown priority"),
        pytest.param({"title": "t", "work_units": [JOBSET], "sweep": [{"a": 1}]}, LaunchFlags(),
                     UnitOptions(),
                     "--spec s.yaml: work_units cannot be combined with work_unit or sweep",
                     id="a list and a sweep"),
        pytest.param({"title": "t", "work_units": []}, LaunchFlags(), UnitOptions(),
                     "--spec s.yaml: work_units: must be a non-empty list", id="empty list"),
        pytest.param({"title": "t", "sweep": [{"a": 1}]}, LaunchFlags(count=2), IMAGE,
                     "--count cannot be combined with sweep", id="count with a sweep"),
        pytest.param({"title": "t", "work_unit": JOBSET}, LaunchFlags(), IMAGE,
                     "--image, --command cannot be combined with work_unit in --spec s.yaml",
                     id="flags and a spec template"),
        pytest.param({"title": "t", "work_units": [JOBSET, "x"]}, LaunchFlags(), UnitOptions(),
                     "--spec s.yaml: work_units[1]: must be a mapping, got str",
                     id="a unit not a mapping"),
        pytest.param({"title": "t", "work_unit": {"jobs": [{"nme": "main"}]}}, LaunchFlags(),
                     UnitOptions(), '--spec s.yaml: work_unit: Failed to parse jobs field: Message '
                     'type "cloud.xmanager.v1.KubernetesJob" has no field named "nme" at '
                     '"JobSetExecutable.jobs[0]".',
                     id="a typo inside the work unit"),
        pytest.param({"title": "t", "sweep": [{"lr": [1]}]}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: sweep[0].lr: must be a string, number or boolean, got list",
                     id="a sweep value that is not a scalar"),
        pytest.param({"title": "t", "sweep": [{"a": 1}, 5]}, LaunchFlags(), IMAGE,
                     "--spec s.yaml: sweep[1]: must be a non-empty mapping",
                     id="a sweep point that is not a mapping"),
        pytest.param(None, LaunchFlags(title="t"), UnitOptions(image="i", env=("A",)),
                     "--env: expected KEY=VALUE, got 'A'", id="env without '='"),
        pytest.param(None, LaunchFlags(title="t"), UnitOptions(image="i", command="echo 'a"),
                     "--command: No closing quotation", id="unbalanced quote in --command"),
    ],
)  # fmt: skip
def test_plan_launch_errors_name_the_field(
    spec: Any, flags: LaunchFlags, options: UnitOptions, message: str
) -> None:
    with pytest.raises(SpecError) as raised:
        plan_launch(spec, flags=flags, options=options, where="--spec s.yaml")
    assert str(raised.value).startswith(message), str(raised.value)


def test_wu_create_refuses_flags_a_file_would_override() -> None:
    with pytest.raises(SpecError, match=r"^--file cannot be combined with --cpu, --replicas$"):
        build_work_unit(JOBSET, UnitOptions(cpu=1, replicas=2), queue=None, where="--file")


def snap(active: str, launch: str, *units: tuple[str, str]) -> Snapshot:
    return Snapshot(active, launch, units, inactive=active == "INACTIVE")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(
            None,
            snap("ACTIVE", "COMPLETED", ("1", "INITIALIZING"), ("2", "SCHEDULING")),
            ["experiment  ACTIVE, launch COMPLETED", "wu 1  INITIALIZING", "wu 2  SCHEDULING"],
            id="first poll: everything, the experiment first",
        ),
        pytest.param(
            snap("ACTIVE", "COMPLETED", ("1", "RUNNING"), ("2", "SCHEDULING")),
            snap("ACTIVE", "COMPLETED", ("1", "RUNNING"), ("2", "SCHEDULING")),
            [],
            id="nothing moved",
        ),
        pytest.param(
            snap("ACTIVE", "LAUNCHING", ("1", "STARTING")),
            snap("ACTIVE", "LAUNCHING", ("1", "RUNNING"), ("2", "INITIALIZING")),
            ["wu 1  STARTING → RUNNING", "wu 2  INITIALIZING"],
            id="a move and a new unit",
        ),
        pytest.param(
            snap("ACTIVE", "COMPLETED", ("1", "COMPLETED"), ("2", "RUNNING")),
            snap("INACTIVE", "COMPLETED", ("1", "COMPLETED"), ("2", "COMPLETED")),
            ["wu 2  RUNNING → COMPLETED", "experiment  INACTIVE, launch COMPLETED"],
            id="the experiment's move follows the unit's that caused it",
        ),
    ],
)
def test_watch_changes(before: Snapshot | None, after: Snapshot, expected: list[str]) -> None:
    assert changes(before, after) == expected


def test_a_launch_watch_starts_from_what_it_created() -> None:
    """``xmc launch --watch``'s transcript opens with every created unit INITIALIZING, so
    a first read that already sees STARTING prints the move, not a unit born STARTING."""
    closed = Experiment(
        name="experiments/3",
        status=ExperimentStatus(
            active_state=ExperimentStatus.ActiveState.ACTIVE,
            launch_state=ExperimentStatus.LaunchState.COMPLETED,
        ),
    )
    start = as_created(closed, ["experiments/3/workUnits/1", "experiments/3/workUnits/2"])
    assert start == snap("ACTIVE", "COMPLETED", ("1", "INITIALIZING"), ("2", "INITIALIZING"))
    first_read = snap("ACTIVE", "COMPLETED", ("1", "STARTING"), ("2", "INITIALIZING"))
    assert changes(start, first_read) == ["wu 1  INITIALIZING → STARTING"]


def test_watch_summary() -> None:
    last = snap("INACTIVE", "FAILED", ("1", "COMPLETED"), ("2", "FAILED"), ("3", "COMPLETED"))
    assert summary("experiments/4", last) == (
        "experiments/4 is INACTIVE (launch FAILED): 2 COMPLETED, 1 FAILED"
    )
    assert summary("experiments/5", snap("INACTIVE", "FAILED")).endswith(": no work units")


def test_the_examples_readme_spec_plans() -> None:
    """The launch spec shown in examples/README.md stays valid."""
    readme = Path(__file__).resolve().parents[2] / "examples" / "README.md"
    (block,) = re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.S)
    plan = plan_launch(yaml.safe_load(block), flags=LaunchFlags(), options=UnitOptions(), where="")
    assert [dict(w.executable.jobset.jobs[0].spec.args) for w in plan.work_units] == [
        {"lr": "0.1", "batch_size": "32"},
        {"lr": "0.01", "batch_size": "32"},
        {"lr": "0.001", "batch_size": "64"},
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("127.0.0.1:50051", ("127.0.0.1:50051", None), id="bare: TLS from env"),
        pytest.param("http://127.0.0.1:50051", ("127.0.0.1:50051", False), id="http: plaintext"),
        pytest.param("HTTPS://ess.example:443/", ("ess.example:443", True), id="https: TLS"),
    ],
)
def test_parse_endpoint(value: str, expected: tuple[str, bool | None]) -> None:
    assert parse_endpoint(value) == expected


def test_parse_endpoint_refuses_other_schemes() -> None:
    with pytest.raises(CliError, match="--endpoint: expected host:port"):
        parse_endpoint("grpc://x:1")
