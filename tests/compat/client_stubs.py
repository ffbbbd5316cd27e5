"""Every RPC of the published client's ``ExperimentStateGRpcApi``, as a user's code calls
them (``xmanager==0.8.5.post1``, ``xmanager_cloud.experiment_state_server``).

Runs inside the compat virtualenv, which holds the published package and nothing of XMC
(its protobuf is older than ours). Configured only the way a user configures the client:
``XMANAGER_ENDPOINT=http://host:port``, ``XMC_AUTH_TOKEN``, ``XMC_USER_EMAIL``. Prints
one JSON object per call (``rpc``, ``code``, ``detail``) and a final ``summary`` line;
the test (``test_published_client.py``) judges them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import field_mask_pb2
from xmanager_cloud.experiment_state_server import experiment_state_api
from xmanager_cloud.experiment_state_server.proto import api_pb2 as pb
from xmanager_cloud.experiment_state_server.proto import (
    artifact_pb2,
    experiment_pb2,
    status_pb2,
    url_pb2,
    work_unit_pb2,
)

RESULTS: list[dict[str, Any]] = []


def call(rpc: str, do: Callable[[], Any]) -> Any:
    try:
        answer = do()
    except grpc.RpcError as error:
        RESULTS.append({"rpc": rpc, "code": error.code().name, "detail": error.details()})
        print(json.dumps(RESULTS[-1]), flush=True)
        return None
    RESULTS.append({"rpc": rpc, "code": "OK", "detail": ""})
    print(json.dumps(RESULTS[-1]), flush=True)
    return answer


def work_unit() -> work_unit_pb2.WorkUnit:
    """What ``xm_cloud`` sends for one ``xm.Job`` of a prebuilt image."""
    unit = work_unit_pb2.WorkUnit()
    executable = unit.executable
    executable.scheduling_constraints.queue_name = "cpu-queue"
    job = executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "python:3.11"
    job.spec.command.extend(["python", "-c", "print('compat')"])
    return unit


def main() -> int:
    api = experiment_state_api.get_experiment_state_api()
    experiment = call(
        "CreateExperiment",
        lambda: api.create_experiment(
            pb.CreateExperimentRequest(
                experiment=experiment_pb2.Experiment(title="compat stubs", tags=["compat"])
            )
        ),
    )
    if experiment is None:
        return 1
    xid = experiment.name
    operation = call(
        "CreateWorkUnit",
        lambda: api.create_work_unit(pb.CreateWorkUnitRequest(parent=xid, work_unit=work_unit())),
    )
    if operation is None:
        return 1
    wu = operation.name.split("/operations")[0]
    call("GetExperiment", lambda: api.get_experiment(pb.GetExperimentRequest(name=xid)))
    call(
        "ListExperiments",
        lambda: api.list_experiments(pb.ListExperimentsRequest(filter="tags:compat")),
    )
    call(
        "SearchExperiments",
        lambda: api.search_experiments(pb.ListExperimentsRequest(filter='title:"compat"')),
    )
    call("GetWorkUnit", lambda: api.get_work_unit(pb.GetWorkUnitRequest(name=wu)))
    call("ListWorkUnits", lambda: api.list_work_units(pb.ListWorkUnitsRequest(parent=xid)))
    call(
        "SearchWorkUnits",
        lambda: api.search_work_units(pb.ListWorkUnitsRequest(parent=xid, filter="wid = 1")),
    )
    call(
        "UpdateExperiment",
        lambda: api.update_experiment(
            pb.UpdateExperimentRequest(
                experiment=experiment_pb2.Experiment(name=xid, notes="from the published client"),
                update_mask=field_mask_pb2.FieldMask(paths=["notes"]),
            )
        ),
    )
    call(
        "UpdateWorkUnit",
        lambda: api.update_work_unit(
            pb.UpdateWorkUnitRequest(
                work_unit=work_unit_pb2.WorkUnit(name=wu, tags=["trial"]),
                update_mask=field_mask_pb2.FieldMask(paths=["tags"]),
            )
        ),
    )
    artifact = call(
        "CreateArtifact",
        lambda: api.create_artifact(
            pb.CreateArtifactRequest(
                parent=xid,
                artifact=artifact_pb2.Artifact(
                    url=url_pb2.Url(url="https://example.com/run", display_name="run"),
                    data_type=artifact_pb2.Artifact.URL,
                    tags=["compat"],
                ),
            )
        ),
    )
    call("ListArtifacts", lambda: api.list_artifacts(pb.ListArtifactsRequest(parent=xid)))
    call(
        "SearchArtifacts",
        lambda: api.search_artifacts(pb.ListArtifactsRequest(parent=xid, filter="tags:compat")),
    )
    if artifact is not None:
        call(
            "UpdateArtifact",
            lambda: api.update_artifact(
                pb.UpdateArtifactRequest(
                    artifact=artifact_pb2.Artifact(name=artifact.name, tags=["compat", "kept"]),
                    update_mask=field_mask_pb2.FieldMask(paths=["tags"]),
                )
            ),
        )
        call(
            "DeleteArtifact",
            lambda: api.delete_artifact(pb.DeleteArtifactRequest(name=artifact.name)),
        )
    call(
        "ListStatusMessages",
        lambda: api.list_status_messages(pb.ListStatusMessagesRequest(parent=wu)),
    )
    call(
        "SearchStatusMessages",
        lambda: api.search_status_messages(pb.ListStatusMessagesRequest(parent=xid)),
    )
    call(
        "BatchStopWorkUnits",
        lambda: api.batch_stop_work_units(
            pb.BatchStopWorkUnitsRequest(parent=xid, filter="wid = 1")
        ),
    )
    call(
        "BatchRestartWorkUnits",
        lambda: api.batch_restart_work_units(
            pb.BatchRestartWorkUnitsRequest(parent=xid, filter="wid = 1")
        ),
    )
    for rpc in ("UpdateExperimentLaunchState", "UpdateExperimentLaunchState (repeat)"):
        call(
            rpc,
            lambda: api.update_experiment_launch_state(
                pb.UpdateExperimentLaunchStateRequest(
                    name=xid, launch_state=status_pb2.ExperimentStatus.COMPLETED
                )
            ),
        )
    failed = [r for r in RESULTS if r["code"] != "OK"]
    print(json.dumps({"summary": True, "xid": xid, "calls": len(RESULTS), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
