"""The JobSet manifest as created (decision 0039): what is kept of it, how the work-unit
page shows it, and the name of an execution."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from google.protobuf.timestamp_pb2 import Timestamp

from ui.manifest_view import manifest_view
from xmc.errors import InvalidArgumentError
from xmc.model.manifest import (
    MAX_MANIFEST_BYTES,
    KeptManifest,
    keep_manifest,
    manifest_yaml,
    masked,
)
from xmc.model.work_unit_spec import MASK
from xmc.names import MAX_ID, parse_execution_name
from xmc_api.xmc.v1.spec_pb2 import ExecutionManifest


@pytest.mark.parametrize(
    ("manifest", "limit", "want"),
    [
        pytest.param({}, 2, KeptManifest("{}", 2), id="exactly at the bound: kept"),
        pytest.param({}, 1, KeptManifest(None, 2), id="one byte past: size only"),
        pytest.param(
            {"kind": "JobSet", "apiVersion": "v"},
            100,
            KeptManifest('{"kind":"JobSet","apiVersion":"v"}', 34),
            id="compact, the builder's key order",
        ),
        pytest.param(
            {"a": "é"}, 100, KeptManifest('{"a":"é"}', 10), id="UTF-8 bytes, not characters"
        ),
        pytest.param({"a": "é"}, 9, KeptManifest(None, 10), id="bound counted in UTF-8 bytes"),
    ],
)
def test_keep_manifest(manifest: dict[str, Any], limit: int, want: KeptManifest) -> None:
    assert keep_manifest(manifest, limit=limit) == want


def test_the_default_bound_keeps_a_large_sweep_unit_and_drops_a_huge_one() -> None:
    env = [{"name": f"V{i}", "value": "x" * 100} for i in range(100)]
    assert keep_manifest({"env": env}).text is not None
    huge = {"env": "x" * MAX_MANIFEST_BYTES}
    kept = keep_manifest(huge)
    assert kept.text is None
    assert kept.size_bytes == MAX_MANIFEST_BYTES + len('{"env":""}')


def env_of(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return {"env": [{"name": name, "value": value} for name, value in pairs]}


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param(
            env_of(("HF_TOKEN", "hf_abc"), ("LR", "0.1")),
            env_of(("HF_TOKEN", MASK), ("LR", "0.1")),
            id="credential-named literal masked, others kept",
        ),
        pytest.param(
            {"containers": [{"name": "main", **env_of(("DB_PASSWORD", "pw"))}]},
            {"containers": [{"name": "main", **env_of(("DB_PASSWORD", MASK))}]},
            id="at any depth",
        ),
        pytest.param(
            {
                "env": [
                    {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                ]
            },
            {
                "env": [
                    {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
                ]
            },
            id="a Secret reference is only its name and key: shown",
        ),
        pytest.param(
            {"labels": {"name": "TOKEN", "value": "v"}},
            {"labels": {"name": "TOKEN", "value": "v"}},
            id="only env lists",
        ),
        pytest.param(
            {"env": "not a list"}, {"env": "not a list"}, id="an ill-typed env is left as it is"
        ),
        pytest.param(
            {"env": [7, {"name": "TOKEN", "value": 3}]},
            {"env": [7, {"name": "TOKEN", "value": 3}]},
            id="no string value: nothing to mask",
        ),
    ],
)
def test_masked(value: Any, want: Any) -> None:
    assert masked(value) == want


def test_manifest_yaml_keeps_the_order_and_reads_back_masked() -> None:
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "xmc-1-2", "labels": {"b": "1", "a": "true"}},
        "spec": {"replicatedJobs": [{"name": "w", **env_of(("AUTH", "x"), ("N", "on"))}]},
    }
    text = manifest_yaml(json.dumps(manifest))
    assert text.startswith("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n")
    back = yaml.safe_load(text)
    assert back["metadata"]["labels"] == {"b": "1", "a": "true"}, "strings stay strings"
    assert list(back["metadata"]["labels"]) == ["b", "a"]
    assert back["spec"]["replicatedJobs"][0]["env"] == [
        {"name": "AUTH", "value": MASK},
        {"name": "N", "value": "on"},
    ]


def stored(**fields: Any) -> ExecutionManifest:
    return ExecutionManifest(
        task_id="t-1", record_time=Timestamp(seconds=1_800_000_000), max_bytes=1024, **fields
    )


@pytest.mark.parametrize(
    ("found", "yaml_start", "note"),
    [
        pytest.param(None, "", "No manifest stored for execution 2", id="none stored"),
        pytest.param(
            stored(manifest_json='{"kind":"JobSet"}', size_bytes=17),
            "kind: JobSet",
            "",
            id="stored",
        ),
        pytest.param(
            stored(size_bytes=4096, omitted=True),
            "",
            "(4 KiB) is larger than the 1 KiB XMC keeps",
            id="past the bound",
        ),
    ],
)
def test_manifest_view(found: ExecutionManifest | None, yaml_start: str, note: str) -> None:
    view = manifest_view("2", found)
    assert view["eid"] == "2"
    assert view["yaml"].startswith(yaml_start)
    assert bool(view["yaml"]) == bool(yaml_start)
    assert note in view["note"]
    assert bool(view["note"]) == bool(note)
    if found is not None:
        assert (view["task"], view["recorded"]) == ("t-1", "2027-01-15 08:00:00Z")


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("experiments/1/workUnits/2/executions/3", (1, 2, 3), id="plain"),
        pytest.param("experiments/1/workUnits/2", "is not of the form", id="no execution"),
        pytest.param("experiments/1/workUnits/2/executions/0", "is not of the form", id="eid 0"),
        pytest.param(
            f"experiments/1/workUnits/2/executions/{MAX_ID + 1}", "out of range", id="past bigint"
        ),
        pytest.param("experiments/1/workUnits/2/executions/3/x", "is not of the form", id="extra"),
    ],
)
def test_parse_execution_name(name: str, want: tuple[int, int, int] | str) -> None:
    if isinstance(want, tuple):
        assert parse_execution_name(name) == want
    else:
        with pytest.raises(InvalidArgumentError, match=f"^name: .*{want}"):
            parse_execution_name(name)
