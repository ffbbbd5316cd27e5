"""One work unit whose container exits 1: it goes RUNNING, then FAILED, and says why.

.venv/bin/python examples/failing.py [--endpoint 127.0.0.1:50051]

The Reconciler stores the reason of a FAILED execution as its ERROR system message and in
its status messages (docs/reconciler.md): the failed Job, the container, its exit code
and reason, and the termination message the container left.
"""

from __future__ import annotations

import re

from _common import (
    TERMINAL,
    Client,
    State,
    connect,
    create_experiment,
    create_work_unit,
    parser,
    print_experiment,
    print_status_messages,
    state_name,
    wait_for,
    work_unit,
    work_unit_state,
)

from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

#: What the simulated container does: run 5 s, write a termination message, exit 1.
BEHAVIOR = {"run_seconds": 5, "exit_code": 1, "message": "ValueError: loss is NaN"}
_EXIT = re.compile(
    r'container "(?P<container>[^"]+)" .*exited with code (?P<code>-?\d+)'
    r"(?: \((?P<reason>[^)]+)\))?"
)


def failure_reason(client: Client, name: str) -> str:
    """The ERROR status message of the current execution: why it failed."""
    unit = client.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
    eid = int(unit.current_work_unit_execution.name.rsplit("/", 1)[-1])
    found = client.api.ListStatusMessages(api_pb2.ListStatusMessagesRequest(parent=name))
    errors = [
        m.content.user_facing_text
        for m in found.status_messages
        if m.execution_id == eid and m.content.severity == StructuredMessage.ERROR
    ]
    if not errors:
        raise SystemExit(f"{name} is FAILED but has no ERROR status message saying why")
    return str(errors[-1])


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    client = connect(args.endpoint)
    try:
        experiment = create_experiment(client, "failing example")
        name = create_work_unit(client, experiment, work_unit(behavior=BEHAVIOR))
        final = wait_for(
            lambda: work_unit_state(client, name),
            lambda state: state in TERMINAL,
            within=args.timeout,
            what=f"{name} to finish",
            show=lambda state: f"{name}: {state_name(state)}",
        )
        print(f"final state: {state_name(final)} (expected {state_name(State.FAILED)})")
        if final == State.FAILED:
            reason = failure_reason(client, name)
            print(f"why: {reason}")
            match = _EXIT.search(reason)
            if match is not None:
                print(
                    f"container {match['container']!r}: exit code {match['code']}, "
                    f"reason {match['reason'] or 'unknown'}"
                )
        print(f"status messages of {name}:")
        print_status_messages(client, name)
        print_experiment(client, experiment)
    finally:
        client.close()


if __name__ == "__main__":
    main()
