"""``xmc launch``: an experiment, its work units and the close of its launch, in one go.

An experiment is ACTIVE while its launch is LAUNCHING (SPEC §3.3), so one made with
``xmc experiments create`` + ``xmc wu create`` stays ACTIVE after its work units finish
until someone closes it. ``launch`` does what the published client does around a ``with
experiment:`` block: create, add the work units, then set the launch state — COMPLETED
when every work unit was accepted, FAILED (and say so) when one was not or the user hit
Ctrl-C, so no experiment is left LAUNCHING by this command.

Steps, in order:

1. Plan everything locally (:func:`specs.plan_launch`): a bad flag or spec field is
   reported before anything exists on the server.
2. CreateExperiment.
3. CreateWorkUnit for each planned work unit, in order; the first failure stops.
4. UpdateExperimentLaunchState: COMPLETED, or FAILED after a failure in step 3.
5. With ``--watch``, follow the states (``xmc watch``'s loop) until INACTIVE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from xmc.model.states import LaunchState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

from .client import Client, CliError, fail, pass_client, short_id, to_dict
from .experiments import close_launch
from .specs import (
    DEFAULT_QUEUE,
    LaunchFlags,
    LaunchPlan,
    SpecError,
    plan_launch,
    read_document,
)
from .watching import as_created, follow, summary
from .work_units import create_work_unit, print_created, unit_from_kwargs, unit_options


def _abandon(client: Client, name: str, created: int, reason: str) -> CliError:
    """Step 4 after a failed step 3: mark the launch FAILED; the error to raise says
    what exists now and, if even that failed, the command that finishes the job."""
    done = f"{created} work unit{'' if created == 1 else 's'} created"
    try:
        close_launch(client, name, LaunchState.FAILED)
    except CliError as exc:
        return CliError(
            f"{reason}\n{done}, and marking the launch of {name} FAILED failed too "
            f"({exc.message}); run: xmc experiments close {short_id(name)} --failed"
        )
    return CliError(
        f"{reason}\n{done}; the launch of {name} is marked FAILED, so the experiment is "
        "INACTIVE (work units already created keep running: xmc wu stop)"
    )


def run_launch(client: Client, plan: LaunchPlan) -> tuple[Experiment, list[dict[str, str]]]:
    """Steps 2–4: the closed experiment and the created work units; CliError otherwise."""
    experiment: Experiment = client.call(
        client.api.CreateExperiment, api_pb2.CreateExperimentRequest(experiment=plan.experiment)
    )
    name = experiment.name
    created: list[dict[str, str]] = []
    planned = len(plan.work_units)
    try:
        for work_unit in plan.work_units:
            created.append(create_work_unit(client, name, work_unit))
    except CliError as exc:
        reason = f"work unit {len(created) + 1} of {planned}: {exc.message}"
        raise _abandon(client, name, len(created), reason) from None
    except KeyboardInterrupt:
        reason = f"interrupted at work unit {len(created) + 1} of {planned}"
        raise _abandon(client, name, len(created), reason) from None
    try:
        closed = close_launch(client, name, LaunchState.COMPLETED)
    except CliError as exc:
        fail(
            f"{exc.message}\nall {len(created)} work units were created, but the launch of "
            f"{name} may still be LAUNCHING; run: xmc experiments close {short_id(name)}"
        )
    return closed, created


@click.command("launch")
@click.option("--title", help="Experiment title (or title in --spec).")
@click.option("--tag", "tags", multiple=True, help="Experiment tag, repeatable.")
@click.option("--notes", help="Experiment notes.")
@click.option(
    "--spec",
    type=click.Path(path_type=Path),
    help="YAML/JSON launch spec: experiment fields and work_unit (+ sweep) or work_units.",
)
@unit_options
@click.option("--queue", help=f"Scheduling queue of every work unit (default {DEFAULT_QUEUE}).")
@click.option(
    "--count",
    type=click.IntRange(min=1),
    help="Identical work units to create  [default: 1; not with a sweep or work_units].",
)
@click.option(
    "--watch",
    "watch_",
    is_flag=True,
    help="Then follow the states until the experiment is INACTIVE (as xmc watch does).",
)
@click.option("--interval", type=float, default=1.0, show_default=True, help="--watch poll, s.")
@pass_client
def launch(
    client: Client,
    /,  # pass_client hands it over positionally; the flags come by name
    title: str | None,
    tags: tuple[str, ...],
    notes: str | None,
    spec: Path | None,
    queue: str | None,
    count: int | None,
    watch_: bool,
    interval: float,
    **unit: Any,
) -> None:
    """Create an experiment and its work units, then mark its launch COMPLETED.

    The work units come from the flags (COUNT identical ones) or from --spec, a YAML
    file such as:

    \b
        title: lr sweep
        tags: [baseline]
        work_unit:            # as `xmc wu create --file` reads it
          jobs: [{name: main, spec: {docker_image: python:3.11}}]
        sweep: [{lr: 0.1}, {lr: 0.01}]   # one work unit per entry, as container args

    or `work_units: [...]` instead of work_unit and sweep; without work_unit the
    template comes from --image etc. If a work unit is refused, the launch is marked
    FAILED and the command exits 1. The experiment turns INACTIVE once every work unit
    is STOPPED, COMPLETED or FAILED."""
    if watch_ and client.json:
        fail("--watch prints a table or a transcript; it cannot be combined with --output json")
    where = f"--spec {spec}" if spec else "--spec"
    try:
        plan = plan_launch(
            None if spec is None else read_document(spec, "--spec"),
            flags=LaunchFlags(title=title, tags=tags, notes=notes, queue=queue, count=count),
            options=unit_from_kwargs(unit),
            where=where,
        )
    except SpecError as exc:
        fail(str(exc))
    experiment, created = run_launch(client, plan)
    client.show(
        {"experiment": to_dict(experiment), "work_units": created},
        lambda: _report(client, experiment, created, watch_=watch_, interval=interval),
    )


def _report(
    client: Client,
    experiment: Experiment,
    created: list[dict[str, str]],
    *,
    watch_: bool,
    interval: float,
) -> None:
    """The table form of a launch: what was created, then (``--watch``) its progress."""
    click.echo(experiment.name)
    print_created(created)
    click.echo(
        f"launch COMPLETED: {experiment.name} turns INACTIVE when its {len(created)} work "
        f"units are done (xmc watch {short_id(experiment.name)})"
    )
    if watch_:
        start = as_created(experiment, [unit["work_unit"] for unit in created])
        followed = follow(
            client, experiment.name, interval=interval, until_inactive=True, start=start
        )
        if followed.interrupted:
            click.echo(f"stopped watching; {experiment.name} carries on")
        elif followed.last is not None:
            click.echo(summary(experiment.name, followed.last))
