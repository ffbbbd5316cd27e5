"""A sweep launched with the published client (PyPI ``xmanager==0.8.5.post1``), unchanged.

Run it with the client's own virtualenv and the variables ``make run`` prints, from a
directory outside any git repository (README, "Launching from xmanager")::

    cd "$(mktemp -d)"
    XMANAGER_ENDPOINT=http://127.0.0.1:50051 XMC_AUTH_TOKEN=dev \\
    XMC_USER_EMAIL=you@example.com ~/xm/bin/python ~/xmc/examples/xmanager_sweep.py [TRIALS]

It launches TRIALS work units (one prebuilt-image job each, a learning rate per unit),
then follows their states until every one has ended.

Why outside git: the client's ``create_experiment`` looks for a git repository at the
current directory or above it, commits whatever is uncommitted there as a snapshot and
force-pushes it to that repository's ``origin`` as ``refs/xm-snapshots/launch-<xid>``.
From inside an XMC checkout that is XMC's upstream, so this script refuses to start
inside a repository unless ``XM_ALLOW_GIT_SNAPSHOT=1`` says that push is wanted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from xmanager import xm, xm_cloud
from xmanager.xm_local import executables
from xmanager_cloud.experiment_state_server import experiment_state_api
from xmanager_cloud.experiment_state_server.proto import api_pb2, status_pb2

ENDED = {"COMPLETED", "FAILED", "STOPPED"}


def trial_job() -> xm.Job:
    return xm.Job(
        name="train",
        executable=executables.GoogleContainerRegistryImage(name="train", image_path="python:3.11"),
        executor=xm_cloud.KubernetesJobExecutor(
            requirements=xm.JobRequirements(cpu=0.5, memory=256 * xm.MiB)
        ),
    )


def enclosing_repository(start: Path) -> Path | None:
    """The git repository the client would snapshot from ``start``, as it searches: the
    directory itself, then each parent."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def main(trials: int) -> int:
    repository = enclosing_repository(Path.cwd())
    if repository is not None and os.environ.get("XM_ALLOW_GIT_SNAPSHOT") != "1":
        print(
            f"{repository} is a git repository: the xmanager client would commit its "
            "uncommitted changes and push them to its origin (refs/xm-snapshots/launch-<xid>). "
            'Run this from a directory outside any repository (cd "$(mktemp -d)"), or set '
            "XM_ALLOW_GIT_SNAPSHOT=1 if that push is what you want.",
            file=sys.stderr,
        )
        return 2
    experiment = xm_cloud.create_experiment(experiment_title="xmanager sweep", tags=["example"])
    with experiment:  # its end sets the launch COMPLETED
        for trial in range(trials):
            experiment.add(
                trial_job(),
                args={"args": {"lr": f"{10 ** -(1 + trial % 4):g}", "seed": str(trial)}},
                settings=xm_cloud.WorkUnitSettings(),
            )
    api = experiment_state_api.get_experiment_state_api()
    request = api_pb2.ListWorkUnitsRequest(parent=f"experiments/{experiment.id}")
    while True:
        units = api.list_work_units(request).work_units
        states = [
            status_pb2.WorkUnitStatus.WorkUnitState.Name(u.current_work_unit_execution.status.state)
            for u in units
        ]
        print(f"experiment {experiment.id}: " + ", ".join(sorted(set(states))), flush=True)
        if len(states) == trials and all(state in ENDED for state in states):
            return 0 if set(states) == {"COMPLETED"} else 1
        time.sleep(2)  # polling a user's view, not a test


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
