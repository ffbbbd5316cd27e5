"""One work unit whose container exits 1: it goes RUNNING, then FAILED.

.venv/bin/python examples/failing.py [--endpoint 127.0.0.1:50051]
"""

from __future__ import annotations

from _common import (
    TERMINAL,
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


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    client = connect(args.endpoint)
    try:
        experiment = create_experiment(client, "failing example")
        name = create_work_unit(
            client, experiment, work_unit(behavior={"run_seconds": 5, "exit_code": 1})
        )
        final = wait_for(
            lambda: work_unit_state(client, name),
            lambda state: state in TERMINAL,
            within=args.timeout,
            what=f"{name} to finish",
            show=lambda state: f"{name}: {state_name(state)}",
        )
        print(f"final state: {state_name(final)} (expected {state_name(State.FAILED)})")
        print(f"status messages of {name}:")
        print_status_messages(client, name)
        print_experiment(client, experiment)
    finally:
        client.close()


if __name__ == "__main__":
    main()
