"""A work unit whose image cannot be pulled: the pod waits in ErrImagePull /
ImagePullBackOff, and once it has not started for 2 minutes (the Reconciler's startup
rule, SPEC §8.3) the Reconciler writes an ERROR system message naming the cause.

The local run uses real time, so this example takes a little over 2 minutes.

    .venv/bin/python examples/bad_image.py [--endpoint 127.0.0.1:50051]
"""

from __future__ import annotations

from typing import Any

from _common import (
    connect,
    create_experiment,
    create_work_unit,
    parser,
    print_status_messages,
    say,
    severity_name,
    state_name,
    stop_work_unit,
    wait_for,
    work_unit,
)

from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage


def main() -> None:
    options = parser(__doc__.splitlines()[0])
    options.set_defaults(timeout=240.0)
    args = options.parse_args()
    client = connect(args.endpoint)
    try:
        experiment = create_experiment(client, "bad image example")
        name = create_work_unit(
            client,
            experiment,
            work_unit(image="registry.invalid/no-such:image", behavior={"image_pull_error": True}),
        )
        say("waiting for the Reconciler's startup rule (about 2 minutes of real time) ...")

        def current() -> Any:
            unit = client.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
            return unit.current_work_unit_execution.status

        def show(status: Any) -> str:
            message = status.system_message
            text = (
                f" system_message=[{severity_name(message.severity)}] {message.user_facing_text}"
                if message.user_facing_text
                else ""
            )
            return f"{name}: {state_name(status.state)}{text}"

        wait_for(
            current,
            lambda status: status.system_message.severity >= StructuredMessage.ERROR,
            within=args.timeout,
            what="an ERROR system message",
            show=show,
            every=2.0,
        )
        print(f"status messages of {name}:")
        print_status_messages(client, name)
        stop_work_unit(client, name)  # it would never start: clean up
    finally:
        client.close()


if __name__ == "__main__":
    main()
