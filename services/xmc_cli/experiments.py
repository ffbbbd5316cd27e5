"""``xmc experiments``: create, list, inspect and close experiments.

An experiment is ACTIVE while its launch is LAUNCHING, whatever its work units do
(SPEC §3.3): the ESS cannot tell "the client is still adding work units" from "the
client is done". ``close`` says the latter, as the published client does at the end of
every ``with experiment:`` block.
"""

from __future__ import annotations

import click

from xmc.model.states import ActiveState, LaunchState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus

from .client import (
    Client,
    experiment_name,
    fmt_time,
    list_all,
    pass_client,
    print_table,
    short_id,
    state_name,
    to_dict,
)

EXPERIMENT_COLUMNS = ["xid", "title", "creator", "active", "launch", "tags", "created"]


def active_name(status: ExperimentStatus) -> str:
    return ExperimentStatus.ActiveState.Name(status.active_state)


def launch_name(status: ExperimentStatus) -> str:
    return ExperimentStatus.LaunchState.Name(status.launch_state)


def is_inactive(experiment: Experiment) -> bool:
    return int(experiment.status.active_state) == ActiveState.INACTIVE


def experiment_row(e: Experiment) -> list[str]:
    return [
        short_id(e.name),
        e.title,
        e.creator,
        active_name(e.status),
        launch_name(e.status),
        ",".join(e.tags),
        fmt_time(e.create_time),
    ]


def state_counts(e: Experiment) -> list[tuple[str, int]]:
    """Work units per state, the states with none left out."""
    return [(state_name(c.state), c.count) for c in e.status.child_state_counts if c.count]


def close_launch(client: Client, name: str, state: LaunchState) -> Experiment:
    """UpdateExperimentLaunchState. A repeat of the current state is the ESS's no-op, so
    this is safe to call twice; an illegal move comes back as its FAILED_PRECONDITION."""
    experiment: Experiment = client.call(
        client.api.UpdateExperimentLaunchState,
        api_pb2.UpdateExperimentLaunchStateRequest(name=name, launch_state=int(state)),  # type: ignore[arg-type]
    )
    return experiment


@click.group()
def experiments() -> None:
    """Create, list, inspect and close experiments."""


@experiments.command("create")
@click.option("--title", required=True)
@click.option("--tag", "tags", multiple=True, help="Repeatable.")
@click.option("--notes", default="")
@pass_client
def experiments_create(client: Client, title: str, tags: tuple[str, ...], notes: str) -> None:
    """Create an experiment (LAUNCHING until `xmc experiments close`)."""
    experiment = Experiment(title=title, tags=list(tags), notes=notes)
    created: Experiment = client.call(
        client.api.CreateExperiment, api_pb2.CreateExperimentRequest(experiment=experiment)
    )
    client.show(to_dict(created), lambda: click.echo(created.name))


@experiments.command("list")
@click.option("--filter", "filter_", default="", help="AIP-160 filter.")
@pass_client
def experiments_list(client: Client, filter_: str) -> None:
    """List experiments."""
    found: list[Experiment] = list_all(
        client,
        client.api.ListExperiments,
        api_pb2.ListExperimentsRequest(filter=filter_),
        "experiments",
    )
    client.show(
        [to_dict(e) for e in found],
        lambda: print_table(None, EXPERIMENT_COLUMNS, [experiment_row(e) for e in found]),
    )


def print_experiment(client: Client, e: Experiment) -> None:
    """The experiment's row and its work units per state (or its JSON)."""
    client.show(to_dict(e), lambda: _print_experiment_tables(e))


def _print_experiment_tables(e: Experiment) -> None:
    print_table(e.name, EXPERIMENT_COLUMNS, [experiment_row(e)])
    counts = [[state, str(count)] for state, count in state_counts(e)]
    if counts:
        print_table("work units", ["state", "count"], counts)


@experiments.command("get")
@click.argument("name")
@pass_client
def experiments_get(client: Client, name: str) -> None:
    """Show one experiment (``experiments/7`` or ``7``)."""
    e: Experiment = client.call(
        client.api.GetExperiment, api_pb2.GetExperimentRequest(name=experiment_name(name))
    )
    print_experiment(client, e)


@experiments.command("close")
@click.argument("name")
@click.option(
    "--failed",
    is_flag=True,
    help="Mark the launch FAILED: the experiment turns INACTIVE at once.",
)
@pass_client
def experiments_close(client: Client, name: str, failed: bool) -> None:
    """Mark NAME's launch done: no more work units are coming.

    COMPLETED (the default) lets the experiment turn INACTIVE once every work unit is
    STOPPED, COMPLETED or FAILED; FAILED makes it INACTIVE now (running work units keep
    running). Closing again with the same state changes nothing; COMPLETED and FAILED
    are final, so moving from one to the other is refused."""
    state = LaunchState.FAILED if failed else LaunchState.COMPLETED
    print_experiment(client, close_launch(client, experiment_name(name), state))
