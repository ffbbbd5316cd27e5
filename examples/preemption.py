"""Preemption: a LOW-priority experiment fills the 64-CPU quota of `cluster-queue` with
long runs, then a HIGH-priority work unit arrives. Kueue evicts one LOW work unit
(RUNNING -> DESCHEDULING -> SCHEDULING); when the HIGH one completes, the evicted one is
admitted again and goes back to RUNNING. At the end the LOW work units are stopped.

    .venv/bin/python examples/preemption.py [--endpoint 127.0.0.1:50051]
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
    state_name,
    states,
    stop_work_unit,
    summary,
    wait_for,
    work_unit,
)

from xmc_api.cloud.xmanager.v1.priority_pb2 import HIGH, LOW

QUOTA_MILLICORES = 64_000
LOW_UNITS = 4


def main() -> None:
    options = parser(__doc__.splitlines()[0])
    options.add_argument(
        "--high-run-seconds",
        type=float,
        default=45,
        help="how long the HIGH work unit runs (longer than the 30 s pod termination grace)",
    )
    args = options.parse_args()
    client = connect(args.endpoint)
    low_names: list[str] = []
    try:
        low = create_experiment(client, "preemption example: low", priority=LOW)
        per_unit = QUOTA_MILLICORES // LOW_UNITS
        for _ in range(LOW_UNITS):
            unit = work_unit(
                behavior={"start_seconds": 1, "run_seconds": None},
                cpu_millicores=per_unit,
                priority=LOW,
            )
            low_names.append(create_work_unit(client, low, unit))
        say(f"{LOW_UNITS} LOW work units x {per_unit} millicores = the whole quota")
        wait_for(
            lambda: states(client, low_names),
            lambda found: all(state == State.RUNNING for state in found.values()),
            within=args.timeout,
            what="the LOW work units RUNNING",
            show=lambda found: "LOW: " + summary(found),
        )

        high = create_experiment(client, "preemption example: high", priority=HIGH)
        high_name = create_work_unit(
            client,
            high,
            work_unit(
                behavior={"start_seconds": 1, "run_seconds": args.high_run_seconds},
                cpu_millicores=per_unit,
                priority=HIGH,
            ),
        )

        def everything() -> dict[str, int]:
            return states(client, [*low_names, high_name])

        def show(found: dict[str, int]) -> str:
            low_part = ", ".join(
                f"{name.rsplit('/', 1)[-1]}={state_name(found[name])}" for name in low_names
            )
            return f"LOW [{low_part}]  HIGH {state_name(found[high_name])}"

        seen: dict[str, set[int]] = {name: set() for name in low_names}

        def settled(found: dict[str, int]) -> bool:
            for name in low_names:
                seen[name].add(found[name])
            evicted = any(
                {State.DESCHEDULING, State.SCHEDULING} & history for history in seen.values()
            )
            return (
                evicted
                and found[high_name] == State.COMPLETED
                and all(found[name] == State.RUNNING for name in low_names)
            )

        wait_for(
            everything,
            settled,
            within=args.timeout + args.high_run_seconds,
            what="preemption and recovery",
            show=show,
        )
        for name, history in seen.items():
            print(f"{name} went through: {sorted(state_name(state) for state in history)}")
        print_experiment(client, low)
        print_experiment(client, high)
    finally:
        for name in low_names:
            stop_work_unit(client, name)
        client.close()


if __name__ == "__main__":
    main()
