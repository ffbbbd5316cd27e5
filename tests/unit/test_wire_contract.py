"""Our generated ``cloud.xmanager.v1`` descriptors match the published wire contract.

The contract (``shared/contract/cloud_xmanager_v1.txt`` next to the repository, or the file
named by ``XMC_CONTRACT_FILE``) lists every message, enum and RPC of the published client's
protos. This module parses that text and compares it, item by item, with the descriptors our
generated modules register in the default descriptor pool: field names, numbers, types,
labels (repeated / proto3 ``optional`` / map), real oneof groups, enum values and the
service's methods. Anything that would change the wire format fails a test named after the
message, enum or RPC.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    FileDescriptor,
    ServiceDescriptor,
)

PACKAGE = "cloud.xmanager.v1"
SERVICE = f"{PACKAGE}.ExperimentStateService"
EXPECTED_RPC_COUNT = 26
REPO_ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# The contract's data model
# ---------------------------------------------------------------------------------------------

SINGULAR = "singular"
REPEATED = "repeated"
OPTIONAL = "optional"  # proto3 `optional`: explicit presence through a synthetic oneof


@dataclass(frozen=True)
class FieldSpec:
    """One field, normalised so a contract field and a descriptor field compare with ==."""

    name: str
    number: int
    type_name: str  # scalar kind ("int64", "string", ...) or full message / enum name
    label: str  # SINGULAR, REPEATED or OPTIONAL
    oneof: str | None = None  # real oneof group; None for synthetic (proto3 optional) ones
    map_key: str | None = None
    map_value: str | None = None

    def describe(self) -> str:
        if self.map_key is not None:
            text = f"map<{self.map_key}, {self.map_value}> {self.name} = {self.number}"
        else:
            prefix = "" if self.label == SINGULAR else f"{self.label} "
            text = f"{prefix}{self.type_name} {self.name} = {self.number}"
        return text + (f" [oneof {self.oneof}]" if self.oneof else "")


@dataclass(frozen=True)
class MessageSpec:
    full_name: str
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class EnumSpec:
    full_name: str
    values: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class RpcSpec:
    service: str
    name: str
    input_type: str
    output_type: str


@dataclass
class Contract:
    messages: dict[str, MessageSpec] = field(default_factory=dict)
    enums: dict[str, EnumSpec] = field(default_factory=dict)
    rpcs: dict[str, RpcSpec] = field(default_factory=dict)  # key: "Service.Method" full name


# ---------------------------------------------------------------------------------------------
# Parser for the contract's text format
# ---------------------------------------------------------------------------------------------

_FILE_RE = re.compile(r"^// file (?P<file>\S+)\s+package (?P<package>[\w.]+)\b")
_MESSAGE_RE = re.compile(r"^message (?P<name>\w+) \{$")
_SERVICE_RE = re.compile(r"^service (?P<name>\w+) \{$")
_ENUM_RE = re.compile(r"^enum (?P<name>\w+) \{ (?P<values>.*) \}$")
_ENUM_VALUE_RE = re.compile(r"^(?P<name>\w+)=(?P<number>-?\d+)$")
_RPC_RE = re.compile(
    r"^rpc (?P<name>\w+)\((?P<input>[\w.]+)\) returns \((?P<output>[\w.]+)\);$",
)
_MAP_RE = re.compile(r"^map<(?P<key>\w+), (?P<value>[\w.]+)> (?P<name>\w+) = (?P<number>\d+);$")
_FIELD_RE = re.compile(
    r"^(?:(?P<label>repeated|optional) )?(?P<type>[\w.]+) (?P<name>\w+) = (?P<number>\d+)"
    r"(?:\s+\[oneof (?P<oneof>\w+)\])?;$",
)


class ContractSyntaxError(ValueError):
    pass


@dataclass
class _Block:
    kind: str  # "message" or "service"
    full_name: str
    fields: list[FieldSpec] = field(default_factory=list)


def parse_contract(text: str) -> Contract:
    """Parse the contract text. Unknown lines raise, so a format change cannot go unnoticed."""
    contract = Contract()
    package: str | None = None
    stack: list[_Block] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"contract line {lineno} ({raw!r})"
        if not line or line.startswith("#"):
            continue
        if line.startswith("//"):
            if match := _FILE_RE.match(line):
                if stack:
                    raise ContractSyntaxError(f"{where}: file header inside a block")
                package = match["package"]
            continue
        if package is None:
            raise ContractSyntaxError(
                f"{where}: declaration before any `// file ... package` header"
            )
        scope = stack[-1].full_name if stack else package
        in_message = bool(stack) and stack[-1].kind == "message"
        in_service = bool(stack) and stack[-1].kind == "service"

        if line == "}":
            if not stack:
                raise ContractSyntaxError(f"{where}: unbalanced closing brace")
            block = stack.pop()
            if block.kind == "message":
                contract.messages[block.full_name] = MessageSpec(
                    block.full_name, tuple(block.fields)
                )
        elif (match := _MESSAGE_RE.match(line)) and not in_service:
            stack.append(_Block("message", f"{scope}.{match['name']}"))
        elif (match := _SERVICE_RE.match(line)) and not stack:
            stack.append(_Block("service", f"{scope}.{match['name']}"))
        elif (match := _ENUM_RE.match(line)) and not in_service:
            values: list[tuple[str, int]] = []
            for item in match["values"].split(","):
                value = _ENUM_VALUE_RE.match(item.strip())
                if value is None:
                    raise ContractSyntaxError(f"{where}: bad enum value {item.strip()!r}")
                values.append((value["name"], int(value["number"])))
            full_name = f"{scope}.{match['name']}"
            contract.enums[full_name] = EnumSpec(full_name, tuple(values))
        elif (match := _RPC_RE.match(line)) and in_service:
            rpc = RpcSpec(scope, match["name"], match["input"], match["output"])
            contract.rpcs[f"{scope}.{rpc.name}"] = rpc
        elif (match := _MAP_RE.match(line)) and in_message:
            stack[-1].fields.append(
                FieldSpec(
                    name=match["name"],
                    number=int(match["number"]),
                    type_name="map",
                    label=REPEATED,
                    map_key=match["key"],
                    map_value=match["value"],
                )
            )
        elif (match := _FIELD_RE.match(line)) and in_message:
            label = match["label"] or SINGULAR
            if match["oneof"] and label != SINGULAR:
                raise ContractSyntaxError(f"{where}: a oneof member cannot be repeated or optional")
            stack[-1].fields.append(
                FieldSpec(
                    name=match["name"],
                    number=int(match["number"]),
                    type_name=match["type"],
                    label=label,
                    oneof=match["oneof"],
                )
            )
        else:
            raise ContractSyntaxError(f"{where}: unrecognised line")
    if stack:
        raise ContractSyntaxError(f"unterminated block {stack[-1].full_name}")
    return contract


# ---------------------------------------------------------------------------------------------
# Our generated descriptors, in the same model
# ---------------------------------------------------------------------------------------------

_SCALAR_NAMES: dict[int, str] = {
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_FIXED64: "fixed64",
    FieldDescriptor.TYPE_FIXED32: "fixed32",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_SFIXED32: "sfixed32",
    FieldDescriptor.TYPE_SFIXED64: "sfixed64",
    FieldDescriptor.TYPE_SINT32: "sint32",
    FieldDescriptor.TYPE_SINT64: "sint64",
}


def _type_name(fd: FieldDescriptor) -> str:
    if fd.message_type is not None:
        return fd.message_type.full_name
    if fd.enum_type is not None:
        return fd.enum_type.full_name
    return _SCALAR_NAMES.get(fd.type, f"<type {fd.type}>")


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def field_spec(fd: FieldDescriptor) -> FieldSpec:
    """Describe a generated field the way the contract does."""
    if _is_map(fd):
        assert fd.message_type is not None
        entry = fd.message_type.fields_by_name
        return FieldSpec(
            name=fd.name,
            number=fd.number,
            type_name="map",
            label=REPEATED,
            map_key=_type_name(entry["key"]),
            map_value=_type_name(entry["value"]),
        )
    containing = fd.containing_type
    assert containing is not None
    proto = descriptor_pb2.DescriptorProto()
    containing.CopyToProto(proto)
    (field_proto,) = (f for f in proto.field if f.number == fd.number)
    synthetic = field_proto.proto3_optional and fd.containing_oneof is not None
    if fd.is_repeated:
        label = REPEATED
    elif synthetic and fd.has_presence:
        label = OPTIONAL
    else:
        label = SINGULAR
    oneof = fd.containing_oneof.name if fd.containing_oneof is not None and not synthetic else None
    return FieldSpec(fd.name, fd.number, _type_name(fd), label, oneof)


def message_spec(desc: Descriptor) -> MessageSpec:
    return MessageSpec(desc.full_name, tuple(field_spec(fd) for fd in desc.fields))


def enum_spec(desc: EnumDescriptor) -> EnumSpec:
    return EnumSpec(desc.full_name, tuple((v.name, v.number) for v in desc.values))


def diff_message(want: MessageSpec, have: MessageSpec) -> list[str]:
    """Human-readable differences between a contract message and ours; [] when they match."""
    problems: list[str] = []
    want_fields = {f.name: f for f in want.fields}
    have_fields = {f.name: f for f in have.fields}
    for name in sorted(want_fields.keys() - have_fields.keys()):
        problems.append(f"missing field {want_fields[name].describe()}")
    for name in sorted(have_fields.keys() - want_fields.keys()):
        problems.append(f"extra field {have_fields[name].describe()}")
    for name in sorted(want_fields.keys() & have_fields.keys()):
        w, h = want_fields[name], have_fields[name]
        if w != h:
            problems.append(f"field {name}: contract `{w.describe()}`, ours `{h.describe()}`")
    return problems


def diff_enum(want: EnumSpec, have: EnumSpec) -> list[str]:
    problems: list[str] = []
    want_values, have_values = dict(want.values), dict(have.values)
    for name in sorted(want_values.keys() - have_values.keys()):
        problems.append(f"missing value {name}={want_values[name]}")
    for name in sorted(have_values.keys() - want_values.keys()):
        problems.append(f"extra value {name}={have_values[name]}")
    for name in sorted(want_values.keys() & have_values.keys()):
        if want_values[name] != have_values[name]:
            problems.append(f"value {name}: contract {want_values[name]}, ours {have_values[name]}")
    return problems


def _generated_modules() -> list[ModuleType]:
    """Import every generated cloud.xmanager.v1 *_pb2 module (registers them in the pool)."""
    cloud_v1_package = importlib.import_module("xmc_api.cloud.xmanager.v1")
    names = sorted(
        info.name
        for info in pkgutil.iter_modules(cloud_v1_package.__path__)
        if info.name.endswith("_pb2")
    )
    return [importlib.import_module(f"{cloud_v1_package.__name__}.{name}") for name in names]


GENERATED_MODULES = _generated_modules()
POOL = descriptor_pool.Default()


def _walk_messages(messages: Iterator[Descriptor]) -> Iterator[Descriptor]:
    for desc in messages:
        if desc.GetOptions().map_entry:
            continue
        yield desc
        yield from _walk_messages(iter(desc.nested_types))


def _walk_enums(file: FileDescriptor) -> Iterator[EnumDescriptor]:
    yield from file.enum_types_by_name.values()
    for desc in _walk_messages(iter(file.message_types_by_name.values())):
        yield from desc.enum_types


def _our_files() -> list[FileDescriptor]:
    files: list[FileDescriptor] = [module.DESCRIPTOR for module in GENERATED_MODULES]
    assert all(f.package == PACKAGE for f in files), [f.name for f in files]
    return files


def _find_message(full_name: str) -> Descriptor | None:
    try:
        return POOL.FindMessageTypeByName(full_name)
    except KeyError:
        return None


def _find_enum(full_name: str) -> EnumDescriptor | None:
    try:
        return POOL.FindEnumTypeByName(full_name)
    except KeyError:
        return None


def _find_service(full_name: str) -> ServiceDescriptor | None:
    try:
        return POOL.FindServiceByName(full_name)
    except KeyError:
        return None


# ---------------------------------------------------------------------------------------------
# Loading the contract (skip, with the reason, when it is not there)
# ---------------------------------------------------------------------------------------------


def _contract_path() -> Path:
    override = os.environ.get("XMC_CONTRACT_FILE")
    if override:
        return Path(override)
    return REPO_ROOT.parent / "shared" / "contract" / "cloud_xmanager_v1.txt"


CONTRACT_PATH = _contract_path()
CONTRACT: Contract | None = (
    parse_contract(CONTRACT_PATH.read_text(encoding="utf-8")) if CONTRACT_PATH.is_file() else None
)
SKIP_REASON = (
    f"wire contract not found at {CONTRACT_PATH} "
    "(set XMC_CONTRACT_FILE to the path of cloud_xmanager_v1.txt)"
)


def _require_contract() -> Contract:
    if CONTRACT is None:
        pytest.skip(SKIP_REASON)
    return CONTRACT


def _short(full_name: str) -> str:
    return full_name.removeprefix(f"{PACKAGE}.")


def _cases(items: dict[str, Any], kind: str) -> list[Any]:
    if CONTRACT is None:
        return [pytest.param(None, id=f"{kind}:no-contract", marks=pytest.mark.skip(SKIP_REASON))]
    return [pytest.param(item, id=f"{kind}:{_short(key)}") for key, item in sorted(items.items())]


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("want", _cases(CONTRACT.messages if CONTRACT else {}, "message"))
def test_message_matches_contract(want: MessageSpec) -> None:
    desc = _find_message(want.full_name)
    assert desc is not None, f"message {want.full_name} is not defined by our protos"
    problems = diff_message(want, message_spec(desc))
    assert not problems, f"{want.full_name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("want", _cases(CONTRACT.enums if CONTRACT else {}, "enum"))
def test_enum_matches_contract(want: EnumSpec) -> None:
    desc = _find_enum(want.full_name)
    assert desc is not None, f"enum {want.full_name} is not defined by our protos"
    problems = diff_enum(want, enum_spec(desc))
    assert not problems, f"{want.full_name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("want", _cases(CONTRACT.rpcs if CONTRACT else {}, "rpc"))
def test_rpc_matches_contract(want: RpcSpec) -> None:
    service = _find_service(want.service)
    assert service is not None, f"service {want.service} is not defined by our protos"
    method = service.methods_by_name.get(want.name)
    assert method is not None, f"{want.service} has no method {want.name}"
    assert (method.input_type.full_name, method.output_type.full_name) == (
        want.input_type,
        want.output_type,
    )
    assert not method.client_streaming
    assert not method.server_streaming


def test_service_has_exactly_the_contract_rpcs() -> None:
    contract = _require_contract()
    contract_methods = {rpc.name for rpc in contract.rpcs.values() if rpc.service == SERVICE}
    assert len(contract_methods) == EXPECTED_RPC_COUNT
    assert {rpc.service for rpc in contract.rpcs.values()} == {SERVICE}
    service = _find_service(SERVICE)
    assert service is not None
    ours = {method.name for method in service.methods}
    assert sorted(ours - contract_methods) == [], "RPCs we define that the contract lacks"
    assert sorted(contract_methods - ours) == [], "contract RPCs we do not define"


def test_package_defines_nothing_the_contract_lacks() -> None:
    contract = _require_contract()
    files = _our_files()
    messages = {
        desc.full_name
        for file in files
        for desc in _walk_messages(iter(file.message_types_by_name.values()))
    }
    enums = {desc.full_name for file in files for desc in _walk_enums(file)}
    services = {desc.full_name for file in files for desc in file.services_by_name.values()}
    assert sorted(messages - contract.messages.keys()) == [], "messages not in the contract"
    assert sorted(enums - contract.enums.keys()) == [], "enums not in the contract"
    assert sorted(services - {rpc.service for rpc in contract.rpcs.values()}) == []
    # And the reverse, so a missing item is reported in one place as well.
    assert sorted(contract.messages.keys() - messages) == [], "contract messages we lack"
    assert sorted(contract.enums.keys() - enums) == [], "contract enums we lack"


# A small excerpt in the contract's format, so the parser and comparator are exercised even
# when the real contract file is absent.
_EXCERPT = """\
# comment
// file x/work_unit.proto  package cloud.xmanager.v1  imports: google/protobuf/timestamp.proto
message JobSetExecutable {
  message SuccessPolicy {
    enum Operator { OPERATOR_UNSPECIFIED=0, ALL=1, ANY=2 }
    cloud.xmanager.v1.JobSetExecutable.SuccessPolicy.Operator operator = 1;
    repeated string target_replicated_jobs = 2;
  }
  repeated cloud.xmanager.v1.KubernetesJob jobs = 1;
  cloud.xmanager.v1.JobSetExecutable.Network network = 2;
  cloud.xmanager.v1.JobSetExecutable.Coordinator coordinator = 3;
  optional cloud.xmanager.v1.JobSetExecutable.SuccessPolicy success_policy = 4;
  map<string, string> annotations = 6;
  map<string, string> labels = 7;
}
message EnvVar {
  string name = 1;
  string value = 2  [oneof source];
  cloud.xmanager.v1.EnvVarSource value_from = 3  [oneof source];
}
service ExperimentStateService {
  rpc GetWorkUnit(cloud.xmanager.v1.GetWorkUnitRequest) returns (cloud.xmanager.v1.WorkUnit);
}
"""


def _excerpt_message(name: str) -> MessageSpec:
    return parse_contract(_EXCERPT).messages[f"{PACKAGE}.{name}"]


def test_parser_reads_every_construct() -> None:
    contract = parse_contract(_EXCERPT)
    assert sorted(contract.messages) == [
        "cloud.xmanager.v1.EnvVar",
        "cloud.xmanager.v1.JobSetExecutable",
        "cloud.xmanager.v1.JobSetExecutable.SuccessPolicy",
    ]
    operator = contract.enums["cloud.xmanager.v1.JobSetExecutable.SuccessPolicy.Operator"]
    assert operator.values == (("OPERATOR_UNSPECIFIED", 0), ("ALL", 1), ("ANY", 2))
    jobset = {f.name: f for f in contract.messages["cloud.xmanager.v1.JobSetExecutable"].fields}
    assert jobset["success_policy"].label == OPTIONAL
    assert jobset["jobs"].label == REPEATED
    assert (jobset["labels"].map_key, jobset["labels"].map_value) == ("string", "string")
    env = {f.name: f for f in contract.messages["cloud.xmanager.v1.EnvVar"].fields}
    assert env["value_from"].oneof == "source"
    assert env["name"].oneof is None
    (rpc,) = contract.rpcs.values()
    assert (rpc.service, rpc.name, rpc.output_type) == (
        SERVICE,
        "GetWorkUnit",
        f"{PACKAGE}.WorkUnit",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "message X {\n  int64 a = 1;\n}\n",  # no file header
        "// file f  package p\nmessage X {\n  int64 a = one;\n}\n",
        "// file f  package p\nmessage X {\n  int64 a = 1;\n",
        "// file f  package p\nenum E { A=0, B }\n",
        "// file f  package p\n}\n",
    ],
    ids=["no-header", "bad-number", "unterminated", "bad-enum-value", "unbalanced"],
)
def test_parser_rejects_malformed_text(bad: str) -> None:
    with pytest.raises(ContractSyntaxError):
        parse_contract(bad)


def test_excerpt_matches_our_descriptors() -> None:
    for name in ("JobSetExecutable", "JobSetExecutable.SuccessPolicy", "EnvVar"):
        desc = _find_message(f"{PACKAGE}.{name}")
        assert desc is not None
        assert diff_message(_excerpt_message(name), message_spec(desc)) == []


def _altered(message: MessageSpec, field_name: str, **changes: Any) -> MessageSpec:
    fields = tuple(replace(f, **changes) if f.name == field_name else f for f in message.fields)
    return replace(message, fields=fields)


@pytest.mark.parametrize(
    ("message", "field_name", "changes", "expected"),
    [
        ("JobSetExecutable", "labels", {"number": 8}, "field labels"),
        ("JobSetExecutable", "success_policy", {"label": SINGULAR}, "field success_policy"),
        ("JobSetExecutable", "jobs", {"label": SINGULAR}, "field jobs"),
        ("JobSetExecutable", "annotations", {"map_value": "int64"}, "field annotations"),
        ("JobSetExecutable", "network", {"type_name": f"{PACKAGE}.Url"}, "field network"),
        ("EnvVar", "value", {"oneof": None}, "field value"),
        ("EnvVar", "value", {"oneof": "other"}, "field value"),
        ("EnvVar", "name", {"type_name": "bytes"}, "field name"),
        ("EnvVar", "name", {"name": "title"}, "missing field string title = 1"),
    ],
    ids=[
        "number",
        "optional-dropped",
        "repeated-dropped",
        "map-value",
        "message-type",
        "oneof-dropped",
        "oneof-renamed",
        "scalar-type",
        "renamed",
    ],
)
def test_comparator_detects_alterations(
    message: str, field_name: str, changes: dict[str, Any], expected: str
) -> None:
    desc = _find_message(f"{PACKAGE}.{message}")
    assert desc is not None
    altered = _altered(_excerpt_message(message), field_name, **changes)
    problems = diff_message(altered, message_spec(desc))
    assert any(problem.startswith(expected) for problem in problems), problems


def test_comparator_detects_enum_and_missing_field_changes() -> None:
    desc = _find_message(f"{PACKAGE}.EnvVar")
    assert desc is not None
    want = _excerpt_message("EnvVar")
    dropped = replace(want, fields=want.fields[:-1])
    assert diff_message(dropped, message_spec(desc)) == [
        "extra field cloud.xmanager.v1.EnvVarSource value_from = 3 [oneof source]"
    ]
    operator = _find_enum(f"{PACKAGE}.JobSetExecutable.SuccessPolicy.Operator")
    assert operator is not None
    renumbered = EnumSpec(
        operator.full_name, (("OPERATOR_UNSPECIFIED", 0), ("ALL", 2), ("ANY", 1), ("NONE", 3))
    )
    assert diff_enum(renumbered, enum_spec(operator)) == [
        "missing value NONE=3",
        "value ALL: contract 2, ours 1",
        "value ANY: contract 1, ours 2",
    ]


# ---------------------------------------------------------------------------------------------
# google.api.http rules: the published client's, recorded from its descriptor
# ---------------------------------------------------------------------------------------------

# The contract file lists no options, so the rules are recorded here: printed from the
# FileDescriptorProto serialized in xmanager==0.8.5.post1's
# xmanager_cloud/experiment_state_server/proto/api_pb2.py (docs/rest.md says how).
# Each RPC: its bindings in order (the rule, then additional_bindings) as (method, path, body).
PUBLISHED_HTTP_RULES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "CreateExperiment": (("post", "/v1/experiments", "experiment"),),
    "UpdateExperimentLaunchState": (("post", "/v1/{name=experiments/*}:updateLaunchState", "*"),),
    "GetExperiment": (("get", "/v1/{name=experiments/*}", ""),),
    "GetExperimentStatus": (("get", "/v1/{name=experiments/*}/status", ""),),
    "ListExperiments": (("get", "/v1/experiments", ""),),
    "SearchExperiments": (("get", "/v1/experiments:search", ""),),
    "UpdateExperiment": (("patch", "/v1/{experiment.name=experiments/*}", "experiment"),),
    "CreateWorkUnit": (("post", "/v1/{parent=experiments/*}/workUnits", "work_unit"),),
    "GetWorkUnit": (("get", "/v1/{name=experiments/*/workUnits/*}", ""),),
    "GetCurrentWorkUnitExecution": (
        ("get", "/v1/{name=experiments/*/workUnits/*}/currentExecution", ""),
    ),
    "ListWorkUnitExecutions": (("get", "/v1/{parent=experiments/*/workUnits/*}/executions", ""),),
    "ListWorkUnits": (("get", "/v1/{parent=experiments/*}/workUnits", ""),),
    "SearchWorkUnits": (("get", "/v1/{parent=experiments/*}/workUnits:search", ""),),
    "StopWorkUnit": (("post", "/v1/{name=experiments/*/workUnits/*}:stop", "*"),),
    "BatchStopWorkUnits": (("post", "/v1/{parent=experiments/*}/workUnits:batchStop", "*"),),
    "RestartWorkUnit": (("post", "/v1/{name=experiments/*/workUnits/*}:restart", "*"),),
    "BatchRestartWorkUnits": (("post", "/v1/{parent=experiments/*}/workUnits:batchRestart", "*"),),
    "UpdateWorkUnit": (("patch", "/v1/{work_unit.name=experiments/*/workUnits/*}", "work_unit"),),
    "CreateArtifact": (
        ("post", "/v1/{parent=experiments/*}/artifacts", "artifact"),
        ("post", "/v1/{parent=experiments/*/workUnits/*}/artifacts", "artifact"),
    ),
    "GetArtifact": (("get", "/v1/{name=artifacts/*}", ""),),
    "ListArtifacts": (
        ("get", "/v1/artifacts", ""),
        ("get", "/v1/{parent=experiments/*}/artifacts", ""),
        ("get", "/v1/{parent=experiments/*/workUnits/*}/artifacts", ""),
    ),
    "SearchArtifacts": (
        ("get", "/v1/artifacts:search", ""),
        ("get", "/v1/{parent=experiments/*}/artifacts:search", ""),
        ("get", "/v1/{parent=experiments/*/workUnits/*}/artifacts:search", ""),
    ),
    "DeleteArtifact": (("delete", "/v1/{name=artifacts/*}", ""),),
    "UpdateArtifact": (("patch", "/v1/{artifact.name=artifacts/*}", "artifact"),),
    "ListStatusMessages": (
        ("get", "/v1/{parent=experiments/*}/statusMessages", ""),
        ("get", "/v1/{parent=experiments/*/workUnits/*}/statusMessages", ""),
    ),
    "SearchStatusMessages": (
        ("get", "/v1/{parent=experiments/*}/statusMessages:search", ""),
        ("get", "/v1/{parent=experiments/*/workUnits/*}/statusMessages:search", ""),
    ),
}


def http_bindings(rule: Any) -> tuple[tuple[str, str, str], ...]:
    """An HttpRule and its additional_bindings as (method, path, body); custom verbs as
    (kind, path, body). response_body must be unset (the published rules set none)."""
    out: list[tuple[str, str, str]] = []
    for binding in (rule, *rule.additional_bindings):
        assert not binding.response_body
        kind = binding.WhichOneof("pattern")
        if kind == "custom":
            out.append((binding.custom.kind, binding.custom.path, binding.body))
        else:
            out.append((kind, getattr(binding, kind), binding.body))
    return tuple(out)


@pytest.mark.parametrize("rpc", sorted(PUBLISHED_HTTP_RULES), ids=lambda rpc: f"http:{rpc}")
def test_rpc_carries_the_published_http_rule(rpc: str) -> None:
    from google.api import annotations_pb2  # type: ignore[import-untyped]

    service = _find_service(SERVICE)
    assert service is not None
    options = service.methods_by_name[rpc].GetOptions()
    assert options.HasExtension(annotations_pb2.http), f"{rpc} has no google.api.http option"
    assert http_bindings(options.Extensions[annotations_pb2.http]) == PUBLISHED_HTTP_RULES[rpc]


def test_every_rpc_has_a_recorded_http_rule() -> None:
    service = _find_service(SERVICE)
    assert service is not None
    assert sorted(PUBLISHED_HTTP_RULES) == sorted(m.name for m in service.methods)
    assert len(PUBLISHED_HTTP_RULES) == EXPECTED_RPC_COUNT
