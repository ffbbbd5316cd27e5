"""Pausing scheduling: PauseScheduling, create work units (they wait in
SCHEDULING_PAUSED), stop one of them (STOPPED), ResumeScheduling (the others run and
complete).

Pausing is system-wide: while this runs, no other work unit is scheduled either.

    .venv/bin/python examples/pause_resume.py [--endpoint 127.0.0.1:50051]
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
    stop_work_unit,
    summary,
    wait_for,
    work_unit,
)

from xmc_api.internal.v1 import scheduling_pb2


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    client = connect(args.endpoint)
    paused = False
    try:
        state = client.scheduling.PauseScheduling(
            scheduling_pb2.PauseSchedulingRequest(reason="pause_resume example")
        )
        paused = True
        say(f"PauseScheduling: paused={state.paused} reason={state.reason!r}")

        experiment = create_experiment(client, "pause/resume example")
        names = [
            create_work_unit(
                client, experiment, work_unit(behavior={"start_seconds": 1, "run_seconds": 5})
            )
            for _ in range(3)
        ]
        wait_for(
            lambda: states(client, names),
            lambda found: all(s == State.SCHEDULING_PAUSED for s in found.values()),
            within=args.timeout,
            what="SCHEDULING_PAUSED",
            show=summary,
        )

        stopped, others = names[0], names[1:]
        stop_work_unit(client, stopped)
        wait_for(
            lambda: states(client, names),
            lambda found: found[stopped] == State.STOPPED,
            within=args.timeout,
            what=f"{stopped} STOPPED",
            show=summary,
        )

        state = client.scheduling.ResumeScheduling(scheduling_pb2.ResumeSchedulingRequest())
        paused = False
        say(f"ResumeScheduling: paused={state.paused}")
        wait_for(
            lambda: states(client, names),
            lambda found: all(found[name] == State.COMPLETED for name in others),
            within=args.timeout,
            what="the other work units COMPLETED",
            show=summary,
        )
        print_experiment(client, experiment)
    finally:
        if paused:  # never leave the system paused
            client.scheduling.ResumeScheduling(scheduling_pb2.ResumeSchedulingRequest())
            say("ResumeScheduling (cleanup)")
        client.close()


if __name__ == "__main__":
    main()
