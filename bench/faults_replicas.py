"""The fault matrix's scenarios with two replicas of every service (issue 30 point 4):
two ESS (clients reach both through one multi-address target), two Actuators in one
consumer group, two Reconcilers electing a leader on a short Lease.

- ``baseline-x2``: no fault; the convergence figure the others compare with.
- ``pause-reconciler-leader``: SIGSTOP the leading Reconciler mid-sweep for longer than
  its Lease (the standby takes over while it is frozen), then SIGCONT it. It wakes
  believing it leads, with observations in hand; the fence (decision 0054) refuses any
  write of its that still reaches an ESS, and it stays a standby.
- ``kill-ess-x2``, ``kill-actuator-x2``, ``kill-reconciler-x2``: the matrix's kill-*
  with a replica left running (for the Reconciler, the leader is the one killed); the
  killed process starts again after ``--outage``.

Each scenario plugs into ``bench/faults.py`` through :func:`options_for` and
:func:`inject_replicas`; the workload and the counts are the matrix's own. With
``--replicas 2`` every other scenario of the matrix runs on two of every service too (its
fault hits the first process of a service: ``kill-reconciler`` may then kill the standby);
the HA deployment's faults (store failovers, network faults) always do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Callable
from typing import Final

from bench.fault_table import two_replicas

from tests.ha.fence import lease_holder
from tests.stack import Stack, StackOptions

#: The Reconcilers' Lease here (client-go's 15 s would only stretch every run).
LEASE_SECONDS: Final = 5.0
#: How long the leader stays frozen: well past its Lease, so the standby takes over.
PAUSE_SECONDS: Final = 2 * LEASE_SECONDS
_KILLS: Final = {"kill-ess-x2": "ess", "kill-actuator-x2": "actuator", "kill-reconciler-x2": ""}
REPLICA_SCENARIOS: Final = ("baseline-x2", "pause-reconciler-leader", *_KILLS)


def options_for(scenario: str, options: StackOptions, replicas: int = 1) -> StackOptions:
    """Two of every service with leader election for this module's scenarios and the
    HA deployment's faults (:func:`bench.fault_table.two_replicas`: store failovers,
    network faults), and at least ``replicas`` of every service for any scenario
    (``bench/faults.py --replicas``); the matrix's options unchanged otherwise."""
    if two_replicas(scenario):
        replicas = max(2, replicas)
    if replicas == 1:
        return options
    return dataclasses.replace(
        options,
        replicas=replicas,
        leader_election=True,
        reconciler_args=(*options.reconciler_args, f"--lease-seconds={LEASE_SECONDS:g}"),
    )


async def leader(stack: Stack, within: float = 30.0) -> str:
    """The leading Reconciler's process name (its identity in the Lease)."""
    deadline = time.monotonic() + within
    while not (holder := await lease_holder(stack)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no Reconciler took the Lease within {within:g} s")
        await asyncio.sleep(0.2)  # polling the Lease: a condition with a deadline
    return holder


async def inject_replicas(
    scenario: str, stack: Stack, outage: float, at_fault: Callable[[], None]
) -> bool:
    """Inject this module's fault (``at_fault`` the moment it lands); False for a scenario
    that is not one of them."""
    if scenario not in REPLICA_SCENARIOS:
        return False
    if scenario == "pause-reconciler-leader":
        frozen = await leader(stack)
        stack.signal(frozen, signal.SIGSTOP)
        at_fault()
        await asyncio.sleep(PAUSE_SECONDS)  # the pause itself, not a synchronisation
        stack.signal(frozen, signal.SIGCONT)
    elif scenario in _KILLS:
        victim = _KILLS[scenario] or await leader(stack)
        await stack.kill(victim)
        at_fault()
        await asyncio.sleep(outage)  # the outage itself
        await stack.start_service(victim)
    return True
