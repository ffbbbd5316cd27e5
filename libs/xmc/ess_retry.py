"""What a client of the ESS retries, written once: the gRPC service config XMC's own
clients (the ``xmc`` CLI, the Reconciler, ``xmc-ui``) open their channels with, and the
same rule as a function for callers that retry by hand (docs/operations.md, "High
availability: rolling restarts"; decision 0055).

The rule: a call that fails with UNAVAILABLE or CANCELLED is sent again, the same
request, up to :attr:`RetryRule.max_attempts` attempts in all with gRPC's jittered
exponential backoff (about 3 s in all: long enough to reach the other replica of a
draining ESS, short enough that an ESS down for good is still reported within seconds).

- UNAVAILABLE is what an ESS that is starting, stopping or cut off from Postgres
  answers (``ess/interceptor.py``), and what gRPC says when no replica accepts a
  connection.
- CANCELLED, when the client did not cancel, is what a stopping gRPC server answers for
  the calls it had received but not yet handed to a handler (grpc/grpc#41785: core
  zombifies them at shutdown instead of answering UNAVAILABLE). Those calls had no
  effect. gRPC never retries a call its own client cancelled, so listing the code
  retries only the server's.

Either may also mean a connection broke mid-call: an effect nobody saw. Sending the same
request again is therefore safe only where a repeat is idempotent, so the calls that make
something new on every call are left out of the automatic retry (:data:`NOT_IDEMPOTENT`):
CreateExperiment, CreateArtifact, RestartWorkUnit and BatchRestartWorkUnits, and
CreateWorkUnit, which is idempotent only with a client-chosen ``work_unit_id`` (the
published client always sends one; the CLI does not). gRPC itself still re-sends any
call that never reached a server (its transparent retry).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import grpc

#: Methods whose repeat makes a second experiment, artifact or execution.
NOT_IDEMPOTENT: Final = (
    ("cloud.xmanager.v1.ExperimentStateService", "CreateExperiment"),
    ("cloud.xmanager.v1.ExperimentStateService", "CreateWorkUnit"),
    ("cloud.xmanager.v1.ExperimentStateService", "CreateArtifact"),
    ("cloud.xmanager.v1.ExperimentStateService", "RestartWorkUnit"),
    ("cloud.xmanager.v1.ExperimentStateService", "BatchRestartWorkUnits"),
)


@dataclass(frozen=True)
class RetryRule:
    """gRPC's retry policy (gRFC A6): attempts, backoff and the codes retried."""

    max_attempts: int = 5
    initial_backoff: float = 0.2
    max_backoff: float = 2.0
    multiplier: float = 2.0
    codes: frozenset[grpc.StatusCode] = frozenset(
        {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    )

    def delay(
        self, code: grpc.StatusCode, attempt: int, *, jitter: Callable[[], float] = random.random
    ) -> float | None:
        """Seconds to wait before resending after failed attempt ``attempt`` (1-based),
        or None to give up; as gRPC computes it: a uniform draw below the capped
        exponential backoff (pure but for ``jitter``)."""
        if code not in self.codes or attempt >= self.max_attempts:
            return None
        ceiling = min(self.initial_backoff * self.multiplier ** (attempt - 1), self.max_backoff)
        return jitter() * ceiling

    def service_config(self) -> str:
        """The channel's service config: the retry policy for every method (the nameless
        entry), none for :data:`NOT_IDEMPOTENT` (a more specific name wins)."""
        policy = {
            "maxAttempts": self.max_attempts,
            "initialBackoff": f"{self.initial_backoff}s",
            "maxBackoff": f"{self.max_backoff}s",
            "backoffMultiplier": self.multiplier,
            "retryableStatusCodes": sorted(code.name for code in self.codes),
        }
        once = [{"service": service, "method": method} for service, method in NOT_IDEMPOTENT]
        return json.dumps(
            {
                "methodConfig": [
                    {"name": [{}], "retryPolicy": policy},
                    {"name": once},
                ]
            }
        )


#: The rule XMC documents and its own clients follow.
RETRY: Final = RetryRule()


def channel_options(rule: RetryRule = RETRY) -> tuple[tuple[str, object], ...]:
    """Channel arguments that make a channel follow ``rule``."""
    return (("grpc.enable_retries", 1), ("grpc.service_config", rule.service_config()))
