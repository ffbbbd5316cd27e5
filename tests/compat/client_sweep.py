"""A researcher's launch through the published high-level client (``xmanager.xm_cloud``):
a sweep, one more trial added to the launched experiment, a stop and a restart.

Runs inside the compat "full" virtualenv (``pip install xmanager==0.8.5.post1``) with
only the environment a user sets (``XMANAGER_ENDPOINT``, ``XMC_AUTH_TOKEN``,
``XMC_USER_EMAIL``). The published work unit has no ``stop()``: the client's batch stop
and restart with a ``wid = N`` filter do that job. Prints JSON lines for the test.
"""

from __future__ import annotations

import json
import sys

from xmanager import xm, xm_cloud
from xmanager.xm_local import executables
from xmanager_cloud.experiment_state_server import experiment_state_api
from xmanager_cloud.experiment_state_server.proto import api_pb2


def job(seconds: int | None) -> xm.Job:
    """A prebuilt image (``package()`` would need Google Cloud credentials); kubesim's
    behaviour annotation says how long the simulated container runs."""
    behavior = {"run_seconds": seconds}
    return xm.Job(
        name="main",
        executable=executables.GoogleContainerRegistryImage(name="main", image_path="python:3.11"),
        executor=xm_cloud.KubernetesJobExecutor(
            requirements=xm.JobRequirements(cpu=0.1, memory=64 * xm.MiB),
            annotations={"kubesim.xmc/behavior": json.dumps(behavior)},
        ),
    )


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def launch(trials: int, *, re_entry: bool = True) -> None:
    experiment = xm_cloud.create_experiment(experiment_title="compat sweep", tags=["compat"])
    with experiment:
        for trial in range(trials):
            experiment.add(
                job(2),
                args={"args": {"lr": str(0.1 * (trial + 1))}},
                settings=xm_cloud.WorkUnitSettings(),
            )
    # ``work_units`` (the first page), not ``get_work_unit_count()``: the published client's
    # ``list_all_work_units()`` loops forever, as it waits for a page token of None and a
    # proto3 string is never None.
    emit(step="sweep", xid=experiment.id, work_units=len(experiment.work_units))
    if not re_entry:
        return

    # One more trial, long-running, added to the launched experiment: the block's exit sets
    # COMPLETED again, which must be a no-op.
    again = xm_cloud.get_experiment(experiment.id)
    with again:
        again.add(job(None), args={"args": {"lr": "0.9"}}, settings=xm_cloud.WorkUnitSettings())
    emit(step="re-entry", xid=experiment.id, work_units=len(again.work_units))


def batch(verb: str, xid: int, wid: int) -> None:
    api = experiment_state_api.get_experiment_state_api()
    parent, only = f"experiments/{xid}", f"wid = {wid}"
    if verb == "stop":
        api.batch_stop_work_units(api_pb2.BatchStopWorkUnitsRequest(parent=parent, filter=only))
    else:
        api.batch_restart_work_units(
            api_pb2.BatchRestartWorkUnitsRequest(parent=parent, filter=only)
        )
    emit(step=verb, xid=xid, wid=wid)


def main(argv: list[str]) -> int:
    """``launch N`` | ``sweep N`` (the sweep alone) | ``stop XID WID`` | ``restart XID WID``."""
    if argv[0] in ("launch", "sweep"):
        launch(int(argv[1]), re_entry=argv[0] == "launch")
    else:
        batch(argv[0], int(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
