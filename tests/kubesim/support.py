"""What kubesim's API tests share besides their fixtures: a kubernetes-asyncio client
for a running kubesim, the real ``kubectl`` pointed at one, the JobSet API's group and
version, a small JobSet manifest, and how to read and send what the client's stubs do not
type."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from kubesim.server import KubeSim
from tests.builders import JobSetBuilder

MakeKubeSim = Callable[..., Awaitable[KubeSim]]
"""The ``make_kubesim`` fixture: starts a KubeSim with the given options."""


def client_for(sim: KubeSim) -> ApiClient:
    """A kubernetes-asyncio client for ``sim``; use it as ``async with``."""
    return ApiClient(Configuration(host=sim.url))


KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="no kubectl binary on the PATH")


async def run_kubectl(
    sim: KubeSim, tmp_path: Path, *args: str, stdin: str = ""
) -> tuple[int, str, str]:
    """Run kubectl against ``sim`` through a kubeconfig (the event loop keeps serving
    while it runs): its exit code, stdout and stderr."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": sim.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {
                        "name": "sim",
                        "context": {"cluster": "sim", "user": "u", "namespace": "default"},
                    }
                ],
                "current-context": "sim",
            }
        )
    )
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={config}",
        f"--cache-dir={tmp_path / 'cache'}",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def kubectl(sim: KubeSim, tmp_path: Path, *args: str, stdin: str = "") -> str:
    """``run_kubectl`` that must succeed: its stdout."""
    code, out, err = await run_kubectl(sim, tmp_path, *args, stdin=stdin)
    assert code == 0, f"kubectl {' '.join(args)}: {err}"
    return out


JOBSET_API = ("jobset.x-k8s.io", "v1alpha2")


def jobset(
    name: str, *, labels: dict[str, str] | None = None, replicas: int = 1, **meta: Any
) -> dict[str, Any]:
    """A small JobSet manifest: replicated job ``workers`` of Jobs without pods."""
    manifest = JobSetBuilder.manifest(name).replicated_job(
        "workers", replicas=replicas, job_spec={}
    )
    for key, value in (labels or {}).items():
        manifest.label(key, value)
    created = manifest.obj()
    created["metadata"].update(meta)
    return created


def failure(error: BaseException) -> tuple[int, str]:
    """(status, reason) of a kubernetes-asyncio ApiException: only ``reason`` tells
    AlreadyExists from Conflict."""
    status = getattr(error, "status", None)
    body = getattr(error, "body", None)
    assert isinstance(status, int), f"not an API error: {error!r}"
    reason = json.loads(body).get("reason", "") if body else ""  # "" (Unknown) is omitted
    return status, reason


MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
"""Pass as ``**MERGE_PATCH`` to a kubernetes-asyncio patch call: without it a dict body is
sent as a JSON patch (and rejected); the bundled stubs do not declare ``_content_type``."""
