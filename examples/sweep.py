"""A 20-work-unit sweep that completes: create the experiment, launch the work units,
mark the launch COMPLETED, wait for all of them to finish, print the rollups.

    .venv/bin/python examples/sweep.py [--endpoint 127.0.0.1:50051] [--count 20]
"""

from __future__ import annotations

from _common import (
    State,
    connect,
    create_experiment,
    create_work_unit,
    parser,
    print_experiment,
    say,
    states,
    summary,
    wait_for,
    work_unit,
)

from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus


def main() -> None:
    options = parser(__doc__.splitlines()[0])
    options.add_argument("--count", type=int, default=20, help="work units (default 20)")
    args = options.parse_args()
    client = connect(args.endpoint)
    try:
        experiment = create_experiment(client, "sweep example")
        names: list[str] = []
        for index in range(args.count):
            learning_rate = f"{0.001 * (index + 1):.3f}"
            unit = work_unit(
                behavior={"start_seconds": 1, "run_seconds": 5},
                args={"learning_rate": learning_rate},
            )
            names.append(create_work_unit(client, experiment, unit))
        say(f"created {len(names)} work units")

        client.api.UpdateExperimentLaunchState(
            api_pb2.UpdateExperimentLaunchStateRequest(
                name=experiment, launch_state=ExperimentStatus.LaunchState.COMPLETED
            )
        )
        say("launch state -> COMPLETED")

        wait_for(
            lambda: states(client, names),
            lambda found: all(state == State.COMPLETED for state in found.values()),
            within=args.timeout,
            what="every work unit COMPLETED",
            show=summary,
        )
        print_experiment(client, experiment)
    finally:
        client.close()


if __name__ == "__main__":
    main()
