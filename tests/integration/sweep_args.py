"""The args of a small sweep, shared by the args tests of the store, the ESS and the CLI:
numbers spelled two ways (``0.1``, ``1e-1``), a value that is not a number (``auto``) and a
unit without ``lr``."""

from __future__ import annotations

from tests.integration.support import minimal_work_unit
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

SWEEP = [
    {"lr": "0.1", "opt": "adam", "layers": "4"},
    {"lr": "0.01", "opt": "sgd", "layers": "12"},
    {"lr": "0.001", "opt": "adam", "layers": "4"},
    {"lr": "1e-1", "opt": "adam", "layers": "8"},
    {"lr": "auto", "opt": "sgd", "layers": "2"},
    {"opt": "adam", "layers": "4"},
]


def unit_with_args(args: dict[str, str], sidecar: dict[str, str] | None = None) -> WorkUnit:
    """A minimal work unit whose main container has ``args`` (and a sidecar ``sidecar``)."""
    work_unit = minimal_work_unit()
    job = work_unit.executable.jobset.jobs[0]
    job.spec.args.update(args)
    if sidecar is not None:
        job.sidecars.add(name="side").args.update(sidecar)
    return work_unit
