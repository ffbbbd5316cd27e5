"""Leader election over a ``coordination.k8s.io/v1`` Lease, so exactly one Reconciler
replica acts at a time (SPEC §11) while the others stand by.

The protocol is client-go's: read the Lease; take it when it has no holder or its holder
stopped renewing (``renewTime + leaseDurationSeconds`` is in the past); renew it while
holding it. Every write is a PUT carrying the ``resourceVersion`` that was read, so two
candidates racing for a free Lease cannot both win: the loser gets 409 Conflict and just
reads again.

Fencing (decision 0054). A leader paused past its Lease wakes believing it leads; checks
before each write narrow that window but cannot close it. So each term has a
*generation*, written as the Lease's ``leaseTransitions`` when the term begins, and
every write of the term carries it (``fence()``); the ESS refuses one older than the
newest it has seen. Unlike client-go, ``leaseTransitions`` moves up on every new term,
not only on a change of holder: a replica that stepped down and takes its own Lease back
(or a restarted process with the same identity) starts a newer term, so its writes from
before are refused too. A refusal that names a generation newer than this replica's
current term (``fenced``) ends the term at once; if the Lease's count went *backwards*
(a Lease deleted and re-created, an etcd restore), the next term starts above the
newest generation the ESS named, so the fence never locks the rightful leader out.

Why the leader steps down *before* the Lease expires (``renew_deadline_seconds``, by
default two thirds of the lease, like client-go's 10 s of 15 s): a standby may take over
the moment the Lease expires, so a leader that cannot renew must stop acting earlier, or
for a moment two replicas would both act. The renewal request itself is bounded by the
same deadline, so a hanging API server cannot keep a stale leader acting.

Cancelling :meth:`LeaderElector.run` is a crash (the Lease is left to expire); :meth:`stop`
is a graceful stop that releases the Lease so a standby takes over at once. Any failure of
one attempt — a Kubernetes error, a timeout, a bug — is logged and counted, and the loop
goes on: an elector that died would leave a leader acting on a stale Lease.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import structlog

from xmc.kube import LEASES, KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.model.fence import Fence
from xmc.retry import sleep_or_stop
from xmc.timestamps import parse_rfc3339, utc_now

log = structlog.get_logger()

Obj = dict[str, Any]
Callback = Callable[[], Awaitable[None]]
Sleep = Callable[[float], Coroutine[Any, Any, None]]

#: Failures of a write that lost a race with another candidate: read again.
_LOST_RACE: Final = frozenset({KubeFailure.CONFLICT, KubeFailure.ALREADY_EXISTS})


@dataclass(frozen=True)
class LeaseSettings:
    name: str = "xmc-reconciler"
    namespace: str = "default"
    lease_seconds: float = 15.0
    """How long a holder's renewal keeps others away; written (rounded up) as
    ``leaseDurationSeconds``, an integer in the API."""
    renew_seconds: float = 5.0
    """Seconds between renewals while leading."""
    retry_seconds: float = 2.0
    """Seconds between attempts to acquire, and between failed renewals."""
    renew_deadline_seconds: float | None = None
    """Seconds without a successful renewal after which the leader steps down; None = two
    thirds of ``lease_seconds``. Must be below ``lease_seconds``."""
    request_timeout: float = 10.0
    """Seconds one acquire-or-renew attempt (a read and a write) may take; a renewal is
    bounded by the renew deadline as well."""

    @property
    def renew_deadline(self) -> float:
        if self.renew_deadline_seconds is not None:
            return self.renew_deadline_seconds
        return self.lease_seconds * 2 / 3

    @property
    def lease_duration(self) -> int:
        return max(1, math.ceil(self.lease_seconds))


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 with microseconds in UTC, as ``MicroTime`` fields are written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expired(spec: Obj, now: datetime) -> bool:
    """Whether the holder has stopped renewing: no ``renewTime`` counts as expired."""
    renewed = parse_rfc3339(spec.get("renewTime"))
    if renewed is None:
        return True
    duration = spec.get("leaseDurationSeconds")
    seconds = float(duration) if isinstance(duration, int | float) else 0.0
    return renewed + timedelta(seconds=seconds) <= now


class LeaderElector:
    """Campaigns for, holds and releases one Lease; ``is_leader`` / ``leading`` tell the
    rest of the Reconciler whether to act."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        identity: str,
        settings: LeaseSettings | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        clock: Callable[[], datetime] = utc_now,  # injected for tests
        sleep: Sleep = asyncio.sleep,  # injected for tests
    ) -> None:
        self._kube = kube
        self.identity = identity
        self._settings = settings or LeaseSettings()
        if self._settings.renew_deadline >= self._settings.lease_seconds:
            raise ValueError("renew_deadline_seconds must be below lease_seconds")
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._sleep = sleep
        self._stopping = asyncio.Event()
        self._renewed_at: datetime | None = None
        self.leading = asyncio.Event()
        """Set while this replica leads (cleared when it steps down or releases)."""
        self.failures = 0
        """Consecutive failed calls (for logs and health)."""
        self._generation = 0
        """The generation of this replica's latest term (0: it never led)."""
        self._floor = 0
        """The newest generation the ESS named in a refusal: a new term starts above it."""

    @property
    def is_leader(self) -> bool:
        """True only while the last renewal is within the renew deadline, even if the loop
        has not noticed yet that it is stale."""
        if not self.leading.is_set() or self._renewed_at is None:
            return False
        age = (self._clock() - self._renewed_at).total_seconds()
        return age < self._settings.renew_deadline

    @property
    def generation(self) -> int:
        """The generation of this replica's latest term, 0 if it never led."""
        return self._generation

    @property
    def lease_key(self) -> str:
        return f"{self._settings.namespace}/{self._settings.name}"

    def fence(self) -> Fence:
        """The token of a write decided now. Kept after stepping down: a write that
        slips out afterwards must still carry its term, never none (an unfenced write
        is accepted)."""
        return Fence(self.lease_key, self._generation)

    def fenced(self, refused: int, newest: int) -> None:
        """The ESS refused a write of generation ``refused`` because it has seen
        ``newest``. A write of an earlier term of ours changes nothing; otherwise another
        replica holds a newer term (or the Lease's count went backwards): stop acting now
        (the loop steps down on its next pass) and start any next term above ``newest``."""
        if refused < self._generation or newest <= self._generation:
            return
        log.warning(f"{self._where}: fenced out by generation {newest}; stepping down",
                    generation=self._generation)  # fmt: skip
        self._floor = max(self._floor, newest)
        self._renewed_at = None

    @property
    def _where(self) -> str:
        return f"lease {self._settings.namespace}/{self._settings.name}"

    # --- running ---------------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: :meth:`run` releases the Lease and returns."""
        self._stopping.set()

    async def run(self) -> None:
        """Campaign and renew until :meth:`stop`; cancellation leaves the Lease to expire."""
        while not self._stopping.is_set():
            await self._step()
            if self._stopping.is_set():
                break
            renewing = self.leading.is_set() and not self.failures
            pause = self._settings.renew_seconds if renewing else self._settings.retry_seconds
            await sleep_or_stop(self._stopping, pause, sleep=self._sleep)
        await self.release()

    async def _step(self) -> None:
        """One acquire-or-renew attempt, then step down if renewals have been failing past
        the deadline.

        A leader whose last renewal is already past the deadline (the process was paused,
        the loop starved) has not been leading for a while: others may have acted, and its
        own watch handlers ignored events meanwhile. It steps down first, so a renewal that
        still succeeds starts a new term and ``on_started_leading`` re-observes."""
        if self.leading.is_set() and not self.is_leader:
            await self._stop_leading("the last renewal is past the deadline")
        held = False
        try:
            held = await self._acquire_or_renew()
        except KubeError as error:
            self._count_failure(error)
        except Exception as error:
            self._count_failure(error, unexpected=True)
        else:
            self.failures = 0
        if held:
            self._renewed_at = self._clock()
            if not self.leading.is_set():
                await self._start_leading()
        elif self.leading.is_set() and not self.is_leader:
            await self._stop_leading("renewal failed past the deadline")

    def _count_failure(self, error: Exception, *, unexpected: bool = False) -> None:
        """Count and log a failed attempt (an unexpected one with its traceback)."""
        self.failures += 1
        what = "renewal" if self.leading.is_set() else "acquisition"
        message = (
            f"{self._where}: {what} failed (attempt {self.failures}); "
            f"retrying in {self._settings.retry_seconds}s"
        )
        if unexpected:
            log.exception(message)
        else:
            log.warning(message, error=str(error))

    async def _acquire_or_renew(self) -> bool:
        """True when this replica holds the Lease afterwards."""
        timeout = self._settings.request_timeout
        if self.leading.is_set() and self._renewed_at is not None:
            left = (
                self._settings.renew_deadline - (self._clock() - self._renewed_at).total_seconds()
            )
            timeout = max(0.05, min(timeout, left))
        try:
            async with asyncio.timeout(timeout):
                return await self._try_acquire_or_renew()
        except TimeoutError as error:
            raise KubeError.no_response(f"no answer within {timeout:.2f}s") from error

    async def _try_acquire_or_renew(self) -> bool:
        now = self._clock()
        lease = await self._get()
        if lease is None:
            return await self._create(now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not expired(spec, now):
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        renewing = self.continues_term(holder, transitions)
        if holder and holder != self.identity:
            log.info(f"{self._where}: taking over from {holder} (its lease expired)")
        generation = transitions if renewing else self.next_generation(transitions)
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._settings.lease_duration,
            "renewTime": format_micro_time(now),
            "acquireTime": spec.get("acquireTime") if renewing else format_micro_time(now),
            "leaseTransitions": generation,
        }
        if not await self._replace(lease):
            return False
        self._generation = generation
        return True

    def continues_term(self, holder: str, transitions: int) -> bool:
        """Whether a Lease read as held by ``holder`` after ``transitions`` is this
        replica's current term (a renewal), rather than a new term to begin."""
        return (
            self.leading.is_set() and holder == self.identity
            and transitions == self._generation and self._renewed_at is not None
        )  # fmt: skip

    def next_generation(self, transitions: int) -> int:
        """A new term's generation: above the Lease's count and any the ESS named."""
        return max(transitions, self._floor, self._generation) + 1

    async def release(self) -> None:
        """Give the Lease up if held (holder cleared, so a standby takes it on its next
        attempt) and stop leading. Safe to call when not leading."""
        if not self.leading.is_set():
            return
        try:
            async with asyncio.timeout(self._settings.request_timeout):
                lease = await self._get()
                if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == (
                    self.identity
                ):
                    spec = dict(lease["spec"])
                    spec.pop("holderIdentity", None)
                    spec.update(leaseDurationSeconds=1, renewTime=format_micro_time(self._clock()))
                    lease["spec"] = spec
                    if not await self._replace(lease):
                        log.warning(f"{self._where}: changed under us; not released")
        except Exception as error:
            # The Lease then expires by itself; nothing else to do.
            log.warning(f"{self._where}: release failed; it will expire", error=repr(error))
        await self._stop_leading("released")

    async def _start_leading(self) -> None:
        log.info(f"{self._where}: {self.identity} started leading")
        self.leading.set()
        await self._notify(self._on_started, "started")

    async def _stop_leading(self, why: str) -> None:
        log.warning(f"{self._where}: {self.identity} stopped leading ({why})")
        self.leading.clear()
        self._renewed_at = None
        await self._notify(self._on_stopped, "stopped")

    async def _notify(self, callback: Callback | None, what: str) -> None:
        """A failing callback is logged; it never stops the election."""
        if callback is None:
            return
        try:
            await callback()
        except Exception:
            log.exception(f"{self._where}: the {what}-leading callback failed")

    # --- the API -----------------------------------------------------------------------

    async def _get(self) -> Obj | None:
        return await self._kube.get(LEASES, self._settings.namespace, self._settings.name)

    async def _create(self, now: datetime) -> bool:
        generation = self.next_generation(0)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._settings.name, "namespace": self._settings.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._settings.lease_duration,
                "acquireTime": format_micro_time(now),
                "renewTime": format_micro_time(now),
                "leaseTransitions": generation,
            },
        }
        try:
            await self._kube.create(LEASES, self._settings.namespace, lease)
        except KubeError as error:
            if error.failure in _LOST_RACE:  # another candidate created it first
                return False
            raise
        self._generation = generation
        return True

    async def _replace(self, lease: Obj) -> bool:
        """PUT with the resourceVersion read; False on CONFLICT (someone wrote in between)."""
        try:
            await self._kube.replace(LEASES, self._settings.namespace, self._settings.name, lease)
        except KubeError as error:
            if error.failure in _LOST_RACE:
                log.info(f"{self._where}: conflicting update; will read it again")
                return False
            raise
        return True
