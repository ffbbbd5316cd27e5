"""What no request may carry (``services/ess/request_checks.py``) and the client's id
space (``xmc.names``, ``validate_work_unit_id``): one named case per rule, the whole
message compared, so the path a user sees is part of the contract."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.longrunning.operations_proto_pb2 import WaitOperationRequest
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message

from ess.request_checks import (
    NUL_PROBLEM,
    check_request,
    duration_problem,
    first_problem,
    timestamp_problem,
)
from ess.validation import validate_work_unit_id
from xmc.errors import InvalidArgumentError
from xmc.names import (
    MAX_CLIENT_WORK_UNIT_ID,
    MAX_ID,
    parse_artifact_name,
    parse_experiment_name,
    parse_work_unit_name,
)
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import executions_pb2

JOBS = "work_unit.executable.jobset.jobs"


def create(edit: Callable[[WorkUnit], object]) -> Message:
    """A CreateWorkUnitRequest for a valid two-job work unit, edited."""
    work_unit = WorkUnit()
    work_unit.executable.scheduling_constraints.queue_name = "q"
    for name in ("main", "second"):
        work_unit.executable.jobset.jobs.add(name=name, replicas=1).spec.docker_image = "img"
    edit(work_unit)
    return api_pb2.CreateWorkUnitRequest(parent="experiments/1", work_unit=work_unit)


def observation(text: str = "ok", severity: int = 40, seconds: int = 1_700_000_000) -> Message:
    update = executions_pb2.WorkUnitExecutionUpdate(work_unit="experiments/1/workUnits/1")
    status = update.execution.status
    status.state_update_time.seconds = seconds
    status.system_message.user_facing_text = text
    status.system_message.severity = severity  # type: ignore[assignment]
    return executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[update, update])


def waiting(seconds: int, nanos: int = 0) -> Message:
    request: Message = WaitOperationRequest(name="experiments/1/operations/x")
    request.timeout.seconds, request.timeout.nanos = seconds, nanos  # type: ignore[attr-defined]
    return request


CASES = [
    pytest.param(create(lambda w: None), None, id="a valid request passes"),
    pytest.param(
        create(lambda w: w.executable.jobset.jobs[0].spec.command.append("é🙂\u202e")),
        None,
        id="unicode is fine",
    ),
    pytest.param(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="a\x00b")),
        f"experiment.title: {NUL_PROBLEM}",
        id="NUL in a top-level text",
    ),
    pytest.param(
        create(lambda w: setattr(w.executable.jobset.jobs[1], "name", "x\x00")),
        f"{JOBS}[1].name: {NUL_PROBLEM}",
        id="NUL deep in a repeated message",
    ),
    pytest.param(
        create(lambda w: w.executable.jobset.jobs[1].spec.args_list.extend(["a", "\x00"])),
        f"{JOBS}[1].spec.args_list[1]: {NUL_PROBLEM}",
        id="NUL in a repeated string",
    ),
    pytest.param(
        create(lambda w: w.executable.jobset.jobs[0].spec.env_vars.update({"A": "\x00"})),
        f"{JOBS}[0].spec.env_vars['A']: {NUL_PROBLEM}",
        id="NUL in a map value",
    ),
    pytest.param(
        create(lambda w: w.executable.jobset.annotations.update({"k\x00": "v"})),
        f"work_unit.executable.jobset.annotations['k\\x00']: the key {NUL_PROBLEM}",
        id="NUL in a map key",
    ),
    pytest.param(
        create(lambda w: w.executable.jobset.jobs[0].spec.env.add(name="E", value="\x00")),
        f"{JOBS}[0].spec.env[0].value: {NUL_PROBLEM}",
        id="NUL in a oneof member",
    ),
    pytest.param(
        api_pb2.UpdateWorkUnitRequest(update_mask=FieldMask(paths=["notes", "\x00"])),
        f"update_mask.paths[1]: {NUL_PROBLEM}",
        id="NUL in a field mask",
    ),
    pytest.param(
        api_pb2.ListWorkUnitsRequest(parent="experiments/1", page_token="a\x00"),
        f"page_token: {NUL_PROBLEM}",
        id="NUL in a page token",
    ),
    pytest.param(
        observation(text="pod\x00"),
        f"updates[0].execution.status.system_message.user_facing_text: {NUL_PROBLEM}",
        id="NUL in an observed status message",
    ),
    pytest.param(
        api_pb2.CreateArtifactRequest(artifact=Artifact(data_type=70000)),  # type: ignore[arg-type]
        "artifact.data_type: 70000 is not a valid value of cloud.xmanager.v1.Artifact.DataType",
        id="unknown enum number (long enums are not listed)",
    ),
    pytest.param(
        create(lambda w: w.executable.jobset.jobs[1].spec.ports.add(protocol=-1)),
        f"{JOBS}[1].spec.ports[0].protocol: -1 is not a valid value of "
        "cloud.xmanager.v1.ContainerPort.Protocol; expected one of PROTOCOL_UNSPECIFIED, "
        "TCP, UDP, SCTP",
        id="unknown enum number deep",
    ),
    pytest.param(
        observation(severity=41),
        "updates[0].execution.status.system_message.severity: 41 is not a valid value of "
        "cloud.xmanager.v1.StructuredMessage.Severity; expected one of SEVERITY_UNSPECIFIED, "
        "DEBUG, INFO, WARNING, ERROR, FATAL",
        id="unknown severity",
    ),
    pytest.param(
        observation(seconds=2**62),
        f"updates[0].execution.status.state_update_time: {2**62} seconds is outside "
        "0001-01-01T00:00:00Z .. 9999-12-30T00:00:00Z",
        id="timestamp past year 9999",
    ),
    pytest.param(
        waiting(10**12),
        "timeout: 1000000000000 seconds is outside ±315576000000 (10,000 years)",
        id="duration past 10,000 years",
    ),
]


@pytest.mark.parametrize(("request_", "want"), CASES)
def test_first_problem(request_: Message, want: str | None) -> None:
    assert first_problem(request_) == want


@pytest.mark.parametrize(("request_", "want"), CASES)
def test_a_request_without_zero_bytes_skips_only_strings(
    request_: Message, want: str | None
) -> None:
    """The interceptor passes ``nul_free`` only when the bytes hold no 0x00; a NUL in a
    string always is one, and every other problem is still found without strings."""
    if want is not None and NUL_PROBLEM in want:
        assert b"\x00" in request_.SerializeToString()
    else:
        assert first_problem(request_, nul_free=True) == want


def test_check_request_raises_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^experiment\.notes: contains a NUL"):
        check_request(api_pb2.CreateExperimentRequest(experiment=Experiment(notes="\x00")))


@pytest.mark.parametrize(
    ("seconds", "nanos", "ok"),
    [
        pytest.param(-62_135_596_800, 0, True, id="0001-01-01 is the first"),
        pytest.param(-62_135_596_801, 0, False, id="before year 1"),
        pytest.param(253_402_127_999, 999_999_999, True, id="the last instant accepted"),
        pytest.param(253_402_128_000, 0, False, id="9999-12-30: room left for +1 µs stamps"),
        pytest.param(0, 0, True, id="epoch 0 (the guard drops it, not the check)"),
        pytest.param(1, -1, False, id="negative nanos"),
        pytest.param(1, 1_000_000_000, False, id="nanos of a whole second"),
    ],
)
def test_timestamp_range(seconds: int, nanos: int, ok: bool) -> None:
    assert (timestamp_problem(seconds, nanos) is None) == ok


@pytest.mark.parametrize(
    ("seconds", "nanos", "ok"),
    [
        pytest.param(315_576_000_000, 999_999_999, True, id="10,000 years"),
        pytest.param(315_576_000_001, 0, False, id="past 10,000 years"),
        pytest.param(-1, -5, True, id="negative, signs agree"),
        pytest.param(1, -5, False, id="signs disagree"),
        pytest.param(0, -999_999_999, True, id="under a second, negative"),
        pytest.param(0, 1_000_000_000, False, id="nanos of a whole second"),
    ],
)
def test_duration_range(seconds: int, nanos: int, ok: bool) -> None:
    assert (duration_problem(seconds, nanos) is None) == ok


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("experiments/1", 1, id="smallest"),
        pytest.param(f"experiments/{MAX_ID}", MAX_ID, id="largest bigint"),
        pytest.param(f"experiments/{MAX_ID + 1}", "out of range", id="one past bigint"),
        pytest.param("experiments/99999999999999999999", "out of range", id="20 digits"),
        pytest.param("experiments/" + "9" * 41, "not of the form", id="absurdly long"),
        pytest.param("experiments/0", "not of the form", id="zero"),
        pytest.param("experiments/01", "not of the form", id="leading zero"),
        pytest.param("experiments/1\n", "not of the form", id="trailing newline"),
        pytest.param("experiments/١", "not of the form", id="non-ASCII digit"),
        pytest.param("experiments/1/", "not of the form", id="trailing slash"),
    ],
)
def test_parse_experiment_name(name: str, want: int | str) -> None:
    if isinstance(want, int):
        assert parse_experiment_name(name) == want
    else:
        with pytest.raises(InvalidArgumentError, match=f"^name: .*{want}"):
            parse_experiment_name(name)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        pytest.param(f"experiments/1/workUnits/{MAX_ID + 1}", f"has id {MAX_ID + 1}, out of range"),
        pytest.param(f"experiments/{2**64}/workUnits/1", f"has id {2**64}, out of range"),
        pytest.param("experiments/1/workUnits/²", "is not of the form"),
    ],
)
def test_work_unit_names_out_of_the_id_space(name: str, fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"^parent: .*{fragment}"):
        parse_work_unit_name(name, field="parent")


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("artifacts/7", 7, id="plain"),
        pytest.param("artifacts/²", None, id="superscript digit once made int() raise"),
        pytest.param(f"artifacts/{MAX_ID + 1}", None, id="past bigint"),
        pytest.param("artifacts/7/x", None, id="extra segment"),
    ],
)
def test_parse_artifact_name(name: str, want: int | None) -> None:
    if want is not None:
        assert parse_artifact_name(name) == want
    else:
        with pytest.raises(InvalidArgumentError, match=r"^name: "):
            parse_artifact_name(name)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param(0, None, id="0: the server assigns one"),
        pytest.param(1, 1, id="smallest"),
        pytest.param(MAX_CLIENT_WORK_UNIT_ID, MAX_CLIENT_WORK_UNIT_ID, id="largest: 2^31 - 1"),
        pytest.param(MAX_CLIENT_WORK_UNIT_ID + 1, "must be 1..2147483647", id="2^31"),
        pytest.param(2**63 - 2, "must be 1..2147483647", id="2^63 - 2 once broke max + 1"),
        pytest.param(-1, "must be 1..2147483647", id="negative"),
    ],
)
def test_validate_work_unit_id(value: int, want: int | str | None) -> None:
    if isinstance(want, str):
        with pytest.raises(InvalidArgumentError, match=f"^work_unit_id: {want}"):
            validate_work_unit_id(value)
    else:
        assert validate_work_unit_id(value) == want
