"""Quotas at the ESS (docs/quotas.md, decision 0049): which limits bind a caller, the
exact admission inside the create transaction, and a cheap early refusal.

- The limits table is small and changes rarely: each replica holds a copy, reread every
  ``refresh_seconds`` (and at once on this replica after a Set or Delete). A caller that
  no limit binds costs creates nothing here but the principals written on its rows.
- The decision itself is made in the create's transaction, on counter rows locked in
  Postgres (``xmc.store.quotas``): exact across replicas, whatever their number.
- A refused principal is remembered for the refusal's retry-after, at most a second:
  within it, its creates are refused before any transaction, so a flooder's refused
  calls cost Postgres nothing. A bucket's refusal is never remembered longer than the
  bucket needs to refill one token, so it refuses nothing Postgres would have admitted;
  a live limit's is seen up to a second late (a unit that finished, a limit an admin
  raised).
- A refusal is answered after a ``HOLD`` of one second (the wait it then names is what
  is left of its retry-after). A flooder that retries at once, as fast as answers come,
  then sends each of its concurrent calls once a second, so refusing costs the ESS a
  timer instead of the CPU of thousands of RPCs a second (``bench/flood_bench.py``:
  answered at once, 900 refusals a second made a bystander's p99 5x its baseline; held
  a quarter of a second, 57 a second still made it 2.2x). The price: a caller whose
  bucket refills in 50 ms hears back after a second, as slow as a retrying client
  would be anyway.
- The same background loop folds every principal's pending live-count deltas, so
  ``quota_deltas`` holds only the last few seconds of state changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from ess.auth import Identity
from xmc.errors import QuotaExceededError
from xmc.model.audit import Actor, AuditAction, AuditEntry
from xmc.model.quotas import Admission, Limits, applicable_limits, principals_of
from xmc.names import parse_experiment_name
from xmc.quota_settings import QuotaSettings
from xmc.store.transactions import (
    Connection,
    Store,
    fetch_quotas,
    fold_all_quota_deltas,
    insert_experiment,
    lock_usage,
    record_audit,
    save_tokens,
)
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

log = structlog.get_logger()

#: Longest a refusal is answered from memory (see the module docstring).
MAX_COOL_DOWN = timedelta(seconds=1)
#: How long a refused call is held before its answer (see the module docstring).
HOLD = 1.0


@dataclass(frozen=True)
class Bound:
    """A caller's principals and the limits that bind them (empty: nothing binds)."""

    principals: tuple[str, ...]
    limits: dict[str, Limits]


#: Counts against nobody (creates made without a caller's principals: tests, tools).
UNBOUND = Bound((), {})


class QuotaGate:
    def __init__(
        self, store: Store, settings: QuotaSettings, *, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._default = settings.default
        self._refresh = settings.refresh_seconds
        self._clock = clock
        self._table: dict[str, Limits] = {}
        #: principal -> (when refused, until when refused from memory, the refusal)
        self._cooling: dict[str, tuple[datetime, datetime, QuotaExceededError]] = {}

    async def load(self) -> None:
        """Reread the limits table (after a change on this replica, and periodically)."""
        async with self._store.connection() as conn:
            self._table = {row.principal: row.limits for row in await fetch_quotas(conn)}

    @property
    def table(self) -> dict[str, Limits]:
        """The limits rows as last read."""
        return self._table

    @property
    def default(self) -> Limits:
        """The server's default (XMC_QUOTA_DEFAULT)."""
        return self._default

    def bound(self, identity: Identity) -> Bound:
        principals = principals_of(identity.email, identity.groups)
        return Bound(principals, applicable_limits(principals, self._table, self._default))

    def refuse_early(self, bound: Bound) -> None:
        """Raise the remembered refusal of a principal still cooling down."""
        if not bound.limits or not self._cooling:
            return
        now = self._clock()
        for principal in bound.principals:
            cooling = self._cooling.get(principal)
            if cooling is None:
                continue
            refused, until, refusal = cooling
            if now >= until:
                del self._cooling[principal]
                continue
            raise QuotaExceededError(
                str(refusal),
                principal=refusal.principal,
                limit=refusal.limit,
                value=refusal.value,
                retry_after=max(0.0, refusal.retry_after - (now - refused).total_seconds()),
            )

    def remember(self, refusal: QuotaExceededError) -> None:
        now = self._clock()
        cool = min(timedelta(seconds=refusal.retry_after), MAX_COOL_DOWN)
        self._cooling[refusal.principal] = (now, now + cool, refusal)

    async def admission(self, conn: Connection, bounds: Sequence[Bound]) -> Admission | None:
        """Lock the counters of every principal some limit binds (None: none), in the
        caller's transaction."""
        limits = {p: lim for bound in bounds for p, lim in bound.limits.items()}
        if not limits:
            return None
        usage = await lock_usage(conn, list(limits))
        return Admission(limits, usage, self._clock())

    @staticmethod
    async def save(conn: Connection, admission: Admission | None) -> None:
        """Write back the buckets ``admission`` spent from (same transaction)."""
        if admission is not None and admission.spent:
            await save_tokens(conn, {p: admission.usage[p] for p in admission.spent})

    async def run(self, stop: asyncio.Event) -> None:
        """Reread the limits and fold pending deltas every ``refresh_seconds``."""
        while not stop.is_set():
            try:
                await self.load()
                async with self._store.transaction() as conn:
                    await fold_all_quota_deltas(conn)
            except Exception:
                log.exception("quota refresh failed; trying again next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self._refresh)


def caller_bound(gate: QuotaGate | None, identity: Identity) -> Bound:
    """The caller's bound (nothing binds without a gate); refused early when cooling."""
    if gate is None:
        return Bound(principals_of(identity.email, identity.groups), {})
    bound = gate.bound(identity)
    gate.refuse_early(bound)
    return bound


async def held(refusal: QuotaExceededError) -> QuotaExceededError:
    """``refusal`` after its hold, naming the wait that is left."""
    await asyncio.sleep(HOLD)
    return QuotaExceededError(
        str(refusal),
        principal=refusal.principal,
        limit=refusal.limit,
        value=refusal.value,
        retry_after=max(0.0, refusal.retry_after - HOLD),
    )


async def create_experiment(
    store: Store, gate: QuotaGate | None, identity: Identity, experiment: Experiment, *, by: Actor
) -> Experiment:
    """CreateExperiment, admitted (or refused, after its hold) in its own transaction,
    with its audit row (docs/audit.md)."""
    try:
        bound = caller_bound(gate, identity)
    except QuotaExceededError as early:
        raise await held(early) from None
    async with store.transaction() as conn:
        admission = await gate.admission(conn, [bound]) if gate else None
        refusal = admission.admit(bound.principals, "experiment") if admission else None
        if refusal is None:
            now = store.clock()
            created = await insert_experiment(
                conn, experiment, creator=identity.email, now=now, principals=bound.principals
            )
            xid = parse_experiment_name(created.name)
            entry = AuditEntry(AuditAction.CREATE_EXPERIMENT, created.name, xid, created.title)
            await record_audit(conn, by, entry, now=now)
            await QuotaGate.save(conn, admission)
    if refusal is not None:
        assert gate is not None
        gate.remember(refusal)
        raise await held(refusal)
    return created
