"""A work unit's retry policy (issue 28, docs/retries.md): the JSON a client sets in the
JobSet annotation ``xmc.dev/retry-policy`` — the published client passes its executor's
annotations through to ``JobSetExecutable.annotations`` — read and checked here, so a
malformed policy is refused at CreateWorkUnit with the field named, never found out when
a unit fails days later.

    {"max_attempts": 3, "on_exit_codes": [1, 137], "never_on_exit_codes": [2],
     "backoff_seconds": 30}

Every key is optional. ``max_attempts`` counts executions (1: never retried);
``on_exit_codes`` lists the codes worth a retry (absent: any failure); ``never_on_exit_codes``
the codes never retried, whatever else says; ``backoff_seconds`` the wait before one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: The annotation the policy is read from.
RETRY_POLICY_ANNOTATION: Final = "xmc.dev/retry-policy"
MAX_ATTEMPTS: Final = 100
MAX_BACKOFF_SECONDS: Final = 24 * 3600
#: Exit codes are what a container's main process returns (0..255 on Linux).
MAX_EXIT_CODE: Final = 255
_MAX_CODES: Final = 256
_KEYS: Final = frozenset(
    {"max_attempts", "on_exit_codes", "never_on_exit_codes", "backoff_seconds"}
)


class PolicyError(ValueError):
    """What is wrong (``detail``) and where: the policy's key at fault (``key``, e.g.
    ``on_exit_codes[2]``), '' when the document as a whole is."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"{key}: {detail}" if key else detail)
        self.key = key
        self.detail = detail


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 1
    #: None: any exit code is worth a retry.
    on_exit_codes: frozenset[int] | None = None
    never_on_exit_codes: frozenset[int] = frozenset()
    backoff_seconds: float = 0.0


def _whole(value: Any, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyError(key, f"a whole number from {low} to {high}, got {json.dumps(value)}")
    return value


def _codes(value: Any, key: str) -> frozenset[int]:
    if not isinstance(value, list) or len(value) > _MAX_CODES:
        raise PolicyError(key, f"a list of at most {_MAX_CODES} exit codes")
    return frozenset(_whole(code, f"{key}[{i}]", 0, MAX_EXIT_CODE) for i, code in enumerate(value))


def parse_retry_policy(text: str) -> RetryPolicy:
    """The policy in ``text``; :class:`PolicyError` naming the key at fault."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise PolicyError("", f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise PolicyError("", "must be a JSON object")
    unknown = sorted(set(document) - _KEYS)
    if unknown:
        raise PolicyError(unknown[0], f"unknown key (known: {', '.join(sorted(_KEYS))})")
    backoff = document.get("backoff_seconds", 0)
    if isinstance(backoff, bool) or not isinstance(backoff, int | float):
        raise PolicyError("backoff_seconds", f"a number, got {json.dumps(backoff)}")
    if not 0 <= backoff <= MAX_BACKOFF_SECONDS:
        raise PolicyError("backoff_seconds", f"from 0 to {MAX_BACKOFF_SECONDS}, got {backoff}")
    on = document.get("on_exit_codes")
    return RetryPolicy(
        max_attempts=_whole(document.get("max_attempts", 1), "max_attempts", 1, MAX_ATTEMPTS),
        on_exit_codes=None if on is None else _codes(on, "on_exit_codes"),
        never_on_exit_codes=_codes(document.get("never_on_exit_codes", []), "never_on_exit_codes"),
        backoff_seconds=float(backoff),
    )


def retry_policy_of(annotations: Mapping[str, str]) -> RetryPolicy | None:
    """The policy a JobSet's annotations set, None when they set none."""
    text = annotations.get(RETRY_POLICY_ANNOTATION)
    return None if text is None else parse_retry_policy(text)


def policy_json(policy: RetryPolicy) -> str:
    """The policy as normalized JSON (every key, codes sorted): what XMC stores and
    shows, so two spellings of one policy read the same."""
    document: dict[str, Any] = {"max_attempts": policy.max_attempts}
    if policy.on_exit_codes is not None:
        document["on_exit_codes"] = sorted(policy.on_exit_codes)
    document["never_on_exit_codes"] = sorted(policy.never_on_exit_codes)
    backoff = policy.backoff_seconds
    document["backoff_seconds"] = int(backoff) if backoff == int(backoff) else backoff
    return json.dumps(document, separators=(", ", ": "))
