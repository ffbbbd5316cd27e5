"""The finalizer bypass (SPEC §8.4), the Reconciler's one synchronous write path.

A managed JobSet being deleted keeps ``jobset.xmanager.cloud/finalizer`` until its
terminal state is written through ``UpdateWorkUnitExecutions`` (not the batcher), so a
stop or a completion is never lost between the cluster and the store. The decision is
pure (``observe.decide_finalizer``); this shell reads, writes, judges the write's result
(``ess_client.judge_terminal_write``) and removes the finalizer only once the execution
has ended — or, after ``max_stopped_write_retry_age``, anyway, logged and counted.
Between the write and the removal it keeps the pods' logs (``capture_logs``, bounded):
the removal lets the garbage collector delete the pods, and their logs with them.

The task per JobSet ends only when the finalizer is gone (or the JobSet is, NOT_FOUND) or
the Reconciler stops: every failure of a pass — a Kubernetes call of any
``KubeFailure``, the ESS unavailable or refusing, a bug — is logged and the pass retried
after a backoff, since a task that died would hold the JobSet's deletion for good.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from reconciler import metrics
from reconciler.ess_client import (
    EssClient,
    EssRejected,
    EssUnavailable,
    TerminalWrite,
    judge_terminal_write,
)
from reconciler.failure import DescribedFailure
from reconciler.observation import Observation
from reconciler.observe import FinalizerAction, decide_finalizer, finalizer_removal_patch
from xmc.kube import JOBSETS, KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc.retry import Backoffs, sleep_or_stop

log = structlog.get_logger()
Obj = dict[str, Any]
#: Why a FAILED JobSet failed, as its terminal write's ``system_message`` and as facts for
#: the retry decision (None: nothing to say); ``Reconciler._describe_failure``, which
#: never raises.
DescribeFailure = Callable[[Obj], Awaitable[DescribedFailure | None]]
#: Keeps the JobSet's containers' logs before its pods go (``LogCapture``); bounded in
#: time and never raises.
CaptureLogs = Callable[[Obj], Awaitable[None]]

#: Seconds between attempts; the last repeats.
BACKOFF: Final = Backoffs((0.2, 0.5, 1.0, 2.0, 5.0))


class _Step(enum.Enum):
    """Where one pass of the finalizer path ended."""

    DONE = "done"
    #: The terminal write failed or was refused: back off, write again.
    WRITE_FAILED = "write_failed"
    #: The JobSet changed under the removal patch: back off, read it again.
    REREAD = "reread"
    #: A call failed (Kubernetes, or a bug): back off, start over; the last write's
    #: outcome stands.
    FAILED = "failed"


@dataclass
class Finalizer:
    """One task per JobSet being deleted; ``kube`` and ``ess`` may be swapped (tests of
    an outage)."""

    kube: KubeClient
    ess: EssClient
    _: KW_ONLY
    namespace: str
    clock: Callable[[], datetime]
    #: After this long since the stop, the finalizer goes even if no write landed.
    max_retry_age: timedelta
    #: The Reconciler's stop: ends every retry loop.
    stopping: asyncio.Event
    describe_failure: DescribeFailure | None = None  # None for tests
    capture_logs: CaptureLogs | None = None  # None for tests
    _running: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False, repr=False)

    def soon(self, name: str) -> None:
        """Finalize JobSet ``name`` unless that is already under way."""
        if name not in self._running or self._running[name].done():
            self._running[name] = asyncio.create_task(self._finalize(name))

    def cancel_all(self) -> None:
        for task in self._running.values():
            task.cancel()

    async def _finalize(self, name: str) -> None:
        """Write the terminal state synchronously, then remove our finalizer; retry every
        failure with backoff, and after ``max_retry_age`` remove it anyway."""
        failed, failures = False, 0
        while not self.stopping.is_set():
            step = await self._attempt(name, last_write_failed=failed)
            if step is _Step.DONE:
                return
            if step is not _Step.FAILED:
                failed = step is _Step.WRITE_FAILED
            failures += 1
            await sleep_or_stop(self.stopping, BACKOFF.after(failures))

    async def _attempt(self, name: str, *, last_write_failed: bool) -> _Step:
        """One pass, every failure classified into the step that follows it."""
        try:
            return await self._finalize_once(name, last_write_failed=last_write_failed)
        except EssUnavailable as error:
            metrics.FINALIZER_RETRIES_TOTAL.inc()
            log.warning("terminal write failed; will retry", jobset=name, error=str(error))
            return _Step.WRITE_FAILED
        except EssRejected as error:
            log.error("terminal write rejected", jobset=name, error=str(error))
            metrics.TERMINAL_WRITES_REJECTED_TOTAL.labels(error.code.name.lower()).inc()
            return _Step.WRITE_FAILED
        except KubeError as error:
            if error.failure is KubeFailure.NOT_FOUND:
                return _Step.DONE  # the JobSet is gone: nothing left to hold
            if error.failure is KubeFailure.CONFLICT:
                log.info("finalizer removal conflicted; re-reading", jobset=name)
                return _Step.REREAD
            log.warning("finalizer path: Kubernetes call failed; will retry", jobset=name,
                        failure=error.failure.value, error=str(error))  # fmt: skip
            return _Step.FAILED
        except Exception:
            log.exception("finalizer path failed unexpectedly; will retry", jobset=name)
            return _Step.FAILED

    async def _finalize_once(self, name: str, *, last_write_failed: bool) -> _Step:
        jobset = await self.kube.get(JOBSETS, self.namespace, name)
        if jobset is None:
            return _Step.DONE
        described = None
        if self.describe_failure is not None:
            described = await self.describe_failure(jobset)
        decision = decide_finalizer(
            jobset,
            now=self.clock(),
            last_write_failed=last_write_failed,
            max_retry_age=self.max_retry_age,
            failure=described.message if described else None,
            facts=described.facts if described else None,
        )
        if decision.action == FinalizerAction.NOT_OURS:
            return _Step.DONE
        if decision.action == FinalizerAction.REMOVE_ANYWAY:
            log.error("finalizer removed without a terminal write", jobset=name,
                      reason=decision.reason)  # fmt: skip
            metrics.FINALIZERS_FORCE_REMOVED_TOTAL.inc()
        elif decision.observation is not None and not await self._write_terminal(
            name, decision.observation
        ):
            return _Step.WRITE_FAILED
        if self.capture_logs is not None:
            await self.capture_logs(jobset)
        await self.kube.patch(JOBSETS, self.namespace, name, finalizer_removal_patch(jobset))
        return _Step.DONE

    async def _write_terminal(self, name: str, observation: Observation) -> bool:
        """The synchronous terminal write; False when the ESS kept the execution live."""
        (result,) = await self.ess.update([observation], writer="reconciler/finalizer")
        if judge_terminal_write(result) is not TerminalWrite.REJECTED:
            return True
        reason = result.state_rejection or "unknown"
        log.error(
            "terminal write refused; keeping the finalizer", jobset=name,
            stored_state=WorkUnitState(result.state).name, reason=reason,
        )  # fmt: skip
        metrics.TERMINAL_WRITES_REJECTED_TOTAL.labels(reason).inc()
        return False
