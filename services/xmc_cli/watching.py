"""``xmc watch``: follow an experiment's work-unit states.

The ESS pushes the experiment's changes (``xmc.v1.WatchService``, docs/watch.md): the
watch re-reads the experiment when a change arrives — at most once per ``--interval`` —
instead of every interval whatever happens. Against an ESS without the push API, or while
its stream is down, it polls every ``--interval`` as before (:class:`Pushes`).

On a terminal the view is a live table. Anywhere else (a pipe, a file, a test) a table
redrawn in place is unreadable, so the output is a transcript instead: one timestamped
line per change seen (``wu 3  STARTING → RUNNING``). What changed is decided by the pure
:func:`changes`, from two :class:`Snapshot` values; the loop only fetches and prints.

The transcript compares what two reads saw, so a state shorter than the interval can be
missed; a kubesim job made to run longer (``--annotation kubesim.xmc/behavior=...``)
shows every one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import click
import grpc
from rich.console import Console
from rich.live import Live
from rich.table import Table

from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1 import watch_pb2

from .client import (
    TABLE_WIDTH,
    Client,
    experiment_name,
    fail,
    list_work_units,
    pass_client,
    short_id,
    state_name,
    to_dict,
)
from .experiments import active_name, is_inactive, launch_name
from .work_units import work_units_table


@dataclass(frozen=True)
class Snapshot:
    """What one poll saw: the experiment's two states and each work unit's state."""

    active: str
    launch: str
    units: tuple[tuple[str, str], ...]
    """(wid, state) in the ESS's order."""
    inactive: bool = False


def snapshot(experiment: Experiment, units: list[WorkUnit]) -> Snapshot:
    return Snapshot(
        active=active_name(experiment.status),
        launch=launch_name(experiment.status),
        units=tuple(
            (short_id(w.name), state_name(w.current_work_unit_execution.status.state))
            for w in units
        ),
        inactive=is_inactive(experiment),
    )


def as_created(experiment: Experiment, work_units: list[str]) -> Snapshot:
    """What a launch knows without reading anything: its closed experiment, and each work
    unit it created INITIALIZING (CreateWorkUnit writes that state, SPEC). A transcript
    that starts here shows INITIALIZING even when the first read comes after it — on a
    busy machine the units are often STARTING by then."""
    units = tuple((short_id(name), "INITIALIZING") for name in work_units)
    return dataclasses.replace(snapshot(experiment, []), units=units)


def changes(before: Snapshot | None, after: Snapshot) -> list[str]:
    """Transcript lines for what moved between two polls (all of ``after`` when first).
    The experiment's line leads the first poll and follows the work units afterwards,
    since its state moves because theirs did."""
    experiment = f"experiment  {after.active}, launch {after.launch}"
    if before is None:
        return [experiment, *(f"wu {wid}  {state}" for wid, state in after.units)]
    lines = []
    seen = dict(before.units)
    for wid, state in after.units:
        old = seen.get(wid)
        if old is None:
            lines.append(f"wu {wid}  {state}")
        elif old != state:
            lines.append(f"wu {wid}  {old} → {state}")
    if (before.active, before.launch) != (after.active, after.launch):
        lines.append(experiment)
    return lines


def summary(parent: str, last: Snapshot) -> str:
    """``experiments/1 is INACTIVE (launch COMPLETED): 5 COMPLETED``."""
    counts: dict[str, int] = {}
    for _, state in last.units:
        counts[state] = counts.get(state, 0) + 1
    shown = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no work units"
    return f"{parent} is {last.active} (launch {last.launch}): {shown}"


@dataclass(frozen=True)
class Followed:
    last: Snapshot | None
    """None when Ctrl-C came before the first answer."""
    interrupted: bool
    """True when Ctrl-C ended the watch."""


def fetch(client: Client, parent: str) -> tuple[Experiment, list[WorkUnit]]:
    """The experiment, then its work units: read in this order, an INACTIVE experiment's
    work units are all terminal in the same poll (terminal states never change)."""
    experiment: Experiment = client.call(
        client.api.GetExperiment, api_pb2.GetExperimentRequest(name=parent)
    )
    return experiment, list_work_units(client, parent)


#: Seconds to wait for a new stream's opening Sync before polling instead.
STREAM_START_SECONDS = 5.0
#: While the stream is unavailable, how often to try opening it again.
STREAM_RETRY_SECONDS = 30.0
#: With the stream up and quiet, the experiment is still re-read this often (a safety net:
#: the stream says what changed, this only bounds how stale a missed wake could leave it).
QUIET_REREAD_SECONDS = 30.0


class Pushes:
    """The push stream of one experiment, read on a thread of its own: :meth:`wait` says
    whether anything changed since the last wait. ``failed`` once the stream ended (an
    ESS without the push API answers UNIMPLEMENTED; a restarting one, UNAVAILABLE)."""

    def __init__(self, client: Client, parent: str) -> None:
        self._changed = threading.Event()
        self._started = threading.Event()
        self._closing = False
        self.failed = False
        self._call = client.watches.WatchExperiments(
            watch_pb2.WatchRequest(experiment=parent), metadata=client.metadata()
        )
        threading.Thread(target=self._read, name="xmc-watch-stream", daemon=True).start()

    def _read(self) -> None:
        try:
            for batch in self._call:
                for event in batch.events:
                    if event.WhichOneof("kind") == "sync":
                        self._started.set()
                    else:
                        self._changed.set()
        except grpc.RpcError:
            pass  # ended: cancelled by close(), or refused or cut off (failed below)
        self.failed = not self._closing
        self._started.set()
        self._changed.set()

    def started(self, within: float = STREAM_START_SECONDS) -> bool:
        """The stream is open: every change from here on wakes :meth:`wait`."""
        return self._started.wait(within) and not self.failed

    def wait(self, timeout: float) -> bool:
        changed = self._changed.wait(timeout)
        self._changed.clear()
        return changed

    def close(self) -> None:
        self._closing = True
        self._call.cancel()


def refreshes(
    client: Client, parent: str, *, interval: float
) -> Iterator[tuple[Experiment, list[WorkUnit]]]:
    """The experiment as read after each change the ESS pushes (at most one read per
    ``interval``), or every ``interval`` while the stream is unavailable; the first read
    follows the stream's opening Sync, so nothing between the two is missed."""
    pushes: Pushes | None = None
    retry_at = 0.0  # when to try the stream again after it failed
    try:
        while True:
            if (pushes is None or pushes.failed) and time.monotonic() >= retry_at:
                if pushes is not None:
                    pushes.close()
                pushes = Pushes(client, parent)
                if not pushes.started():
                    pushes.close()
                    pushes.failed = True  # no Sync in time: poll, as when refused
                if pushes.failed:
                    retry_at = time.monotonic() + STREAM_RETRY_SECONDS
            yield fetch(client, parent)
            began = time.monotonic()
            if pushes is None or pushes.failed:
                time.sleep(interval)  # polling: the stream is not there
                continue
            pushes.wait(QUIET_REREAD_SECONDS)
            # At most one read per interval, however many changes arrive.
            time.sleep(max(0.0, interval - (time.monotonic() - began)))
    finally:
        if pushes is not None:
            pushes.close()


def watch_table(parent: str, experiment: Experiment, units: list[WorkUnit]) -> Table:
    status = f"{active_name(experiment.status)}, launch {launch_name(experiment.status)}"
    title = f'{parent} "{experiment.title}" — {status} — {len(units)} work units'
    return work_units_table(title, units)


def _print_changes(before: Snapshot | None, after: Snapshot) -> None:
    """The transcript's lines for one step, stamped with the local time they were seen."""
    clock = datetime.now().strftime("%H:%M:%S")
    for line in changes(before, after):
        click.echo(f"{clock}  {line}")


def follow(
    client: Client,
    parent: str,
    *,
    interval: float,
    until_inactive: bool,
    start: Snapshot | None = None,
) -> Followed:
    """Re-read the experiment as it changes (:func:`refreshes`) until Ctrl-C or, with
    ``until_inactive``, until it is INACTIVE (launch closed, every work unit terminal).
    A transcript begins with ``start`` when given (what the caller knows already) and
    prints each read's changes from it."""
    console = Console(width=TABLE_WIDTH)

    def polls() -> Iterator[tuple[Experiment, list[WorkUnit]]]:
        return refreshes(client, parent, interval=interval)

    last: Snapshot | None = None
    try:
        if console.is_terminal:
            with Live(console=console, refresh_per_second=4) as live:
                for experiment, units in polls():
                    live.update(watch_table(parent, experiment, units))
                    last = snapshot(experiment, units)
                    if until_inactive and last.inactive:
                        break
        else:
            if start is not None:
                _print_changes(None, start)
                last = start
            for experiment, units in polls():
                current = snapshot(experiment, units)
                _print_changes(last, current)
                last = current
                if until_inactive and last.inactive:
                    break
    except KeyboardInterrupt:
        interrupted = True
    else:
        interrupted = False
    return Followed(last, interrupted)


@click.command("watch")
@click.argument("experiment")
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds: at most one re-read per interval (every interval without the push API).",
)
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option(
    "--until-inactive",
    is_flag=True,
    help="Exit once the experiment is INACTIVE (launch closed, every work unit terminal).",
)
@pass_client
def watch(
    client: Client, experiment: str, interval: float, once: bool, until_inactive: bool
) -> None:
    """Follow EXPERIMENT's work-unit states (Ctrl-C to quit): a live table on a
    terminal, one line per change otherwise."""
    parent = experiment_name(experiment)
    if client.json and not once:
        fail("--output json needs --once (a followed watch prints a table or a transcript)")
    if once:
        found, units = fetch(client, parent)
        client.show(
            [to_dict(w) for w in units],
            lambda: Console(width=TABLE_WIDTH).print(watch_table(parent, found, units)),
        )
        return
    followed = follow(client, parent, interval=interval, until_inactive=until_inactive)
    if followed.last is not None and not followed.interrupted:
        click.echo(summary(parent, followed.last))
