"""A sweep launched with the published client (PyPI ``xmanager==0.8.5.post1``), unchanged.

Run it with the client's own virtualenv and the three variables ``make run`` prints
(README, "Launching from xmanager")::

    XMANAGER_ENDPOINT=http://127.0.0.1:50051 XMC_AUTH_TOKEN=dev \\
    XMC_USER_EMAIL=you@example.com ~/xm/bin/python examples/xmanager_sweep.py [TRIALS]

It launches TRIALS work units (one prebuilt-image job each, a learning rate per unit),
then follows their states until every one has ended.
"""

from __future__ import annotations

import sys
import time

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


def main(trials: int) -> int:
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
