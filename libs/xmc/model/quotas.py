"""Quota decisions (docs/quotas.md, decision 0049), free of I/O: whom a create counts
against, which limits apply to each, and whether one more create fits.

A create counts against its caller's user principal (``user:<email>``) and each of the
caller's groups (``group:<name>``, from the token's groups claim). The user's limits are
their own row, else the ``default`` row, else the server's default setting; a group has
limits only when an admin set a row for it. A create is admitted only if every principal
it counts against admits it: one token of each creates-per-second bucket, and one place
under each live limit.

The token bucket is the usual one: ``burst`` tokens at most, ``rate`` tokens a second
refilled, one spent per create. Time is passed in, so tests pin it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from xmc.errors import InvalidArgumentError, QuotaExceededError

DEFAULT_PRINCIPAL: Final = "default"
_PRINCIPAL = re.compile(r"^(user|group):(\S.{0,253})$")
#: What a client told "too many live" is asked to wait: a unit has to finish first, which
#: no server can predict; long enough that a polite client does not spin.
LIVE_RETRY_SECONDS: Final = 10.0

Kind = Literal["work_unit", "experiment"]


@dataclass(frozen=True)
class Limits:
    """One principal's limits; None = unlimited."""

    creates_per_second: float | None = None
    #: Creates allowed at once after a quiet spell; None = max(1, ceil(rate)).
    creates_burst: int | None = None
    live_work_units: int | None = None
    live_experiments: int | None = None

    @property
    def unlimited(self) -> bool:
        return (
            self.creates_per_second is None
            and self.live_work_units is None
            and self.live_experiments is None
        )

    @property
    def burst(self) -> float:
        if self.creates_burst is not None:
            return float(self.creates_burst)
        return float(max(1, math.ceil(self.creates_per_second or 1)))


UNLIMITED: Final = Limits()


def parse_principal(text: str, *, field_name: str = "principal") -> str:
    """``user:<email>`` (lowercased, as emails are everywhere in XMC), ``group:<name>`` or
    ``default``; INVALID_ARGUMENT names the field otherwise."""
    value = text.strip()
    if value == DEFAULT_PRINCIPAL:
        return value
    match = _PRINCIPAL.match(value)
    if match is None or not value.isprintable():
        raise InvalidArgumentError(
            f"{field_name}: expected 'user:<email>', 'group:<name>' or 'default', got {text!r}"
        )
    kind, name = match[1], match[2]
    if kind == "user":
        if "@" not in name:
            raise InvalidArgumentError(f"{field_name}: a user principal is an email, got {text!r}")
        name = name.lower()
    return f"{kind}:{name}"


_NAME_KINDS: Final = {"users": "user", "groups": "group"}


def parse_quota_name(name: str, *, field_name: str = "name") -> str:
    """``quotas/users/{email}``, ``quotas/groups/{group}`` or ``quotas/default`` → the
    principal (``user:{email}``, ``group:{group}``, ``default``)."""
    prefix, _, rest = name.partition("/")
    kind, _, who = rest.partition("/")
    if prefix == "quotas" and rest == DEFAULT_PRINCIPAL:
        return DEFAULT_PRINCIPAL
    if prefix != "quotas" or kind not in _NAME_KINDS or not who:
        raise InvalidArgumentError(
            f"{field_name}: expected quotas/users/{{email}}, quotas/groups/{{group}} or "
            f"quotas/default, got {name!r}"
        )
    return parse_principal(f"{_NAME_KINDS[kind]}:{who}", field_name=field_name)


def quota_name(principal: str) -> str:
    if principal == DEFAULT_PRINCIPAL:
        return f"quotas/{DEFAULT_PRINCIPAL}"
    kind, _, who = principal.partition(":")
    return f"quotas/{kind}s/{who}"


def limits_source(
    principal: str, table: Mapping[str, Limits], default: Limits
) -> tuple[Limits, str]:
    """The limits a principal gets and where from: ``quota`` (its own row), ``default``
    (the default row, users only), ``server`` (the setting, users only) or ``none``."""
    if principal in table:
        return table[principal], "quota"
    if principal.startswith("group:"):
        return UNLIMITED, "none"
    if DEFAULT_PRINCIPAL in table:
        return table[DEFAULT_PRINCIPAL], "default"
    return (default, "server") if not default.unlimited else (UNLIMITED, "none")


def check_limits(limits: Limits) -> None:
    """Values an admin may set; INVALID_ARGUMENT names the field."""
    rate = limits.creates_per_second
    if rate is not None and not (0 < rate <= 1_000_000 and math.isfinite(rate)):
        raise InvalidArgumentError("creates_per_second: must be > 0 and at most 1000000")
    if limits.creates_burst is not None:
        if rate is None:
            raise InvalidArgumentError("creates_burst: needs creates_per_second")
        if not 1 <= limits.creates_burst <= 1_000_000:
            raise InvalidArgumentError("creates_burst: must be between 1 and 1000000")
    for name in ("live_work_units", "live_experiments"):
        value = getattr(limits, name)
        if value is not None and not 0 <= value <= 2**53:
            raise InvalidArgumentError(f"{name}: must be between 0 and 2^53")


def principals_of(email: str, groups: Iterable[str]) -> tuple[str, ...]:
    """Whom a caller's creates count against: their user, then their groups in order
    (the order rows are locked in, so two creates never wait on each other in a cycle)."""
    return (f"user:{email.lower()}", *sorted({f"group:{g}" for g in groups if g}))


def applicable_limits(
    principals: Sequence[str], table: Mapping[str, Limits], default: Limits
) -> dict[str, Limits]:
    """The limits that bind each principal (unlimited ones left out)."""
    found: dict[str, Limits] = {}
    for principal in principals:
        limits, _source = limits_source(principal, table, default)
        if not limits.unlimited:
            found[principal] = limits
    return found


def refill(tokens: float | None, since: datetime | None, limits: Limits, now: datetime) -> float:
    """The bucket's tokens at ``now``: full when never used; a clock behind ``since``
    (another replica's, a little ahead) refills nothing rather than going negative."""
    if tokens is None or since is None or limits.creates_per_second is None:
        return limits.burst
    elapsed = max(0.0, (now - since).total_seconds())
    return min(limits.burst, tokens + elapsed * limits.creates_per_second)


@dataclass
class Usage:
    """One principal's counters as read under its row lock, then as this transaction's
    admissions change them."""

    live_work_units: int = 0
    live_experiments: int = 0
    tokens: float | None = None
    tokens_time: datetime | None = None


@dataclass
class Admission:
    """The admissions of one transaction: ``usage`` of every principal that has limits,
    read under their row locks; :meth:`admit` decides one create at a time, in order."""

    limits: Mapping[str, Limits]
    usage: dict[str, Usage]
    now: datetime
    #: Principals whose bucket this transaction changed (to write back).
    spent: set[str] = field(default_factory=set)

    def admit(self, principals: Sequence[str], kind: Kind) -> QuotaExceededError | None:
        """Admit one create counting against ``principals``, or the refusal naming the
        first limit it would break; a refused create changes nothing."""
        bound = [p for p in principals if p in self.limits]
        for principal in bound:
            refusal = self._refusal(principal, kind)
            if refusal is not None:
                return refusal
        for principal in bound:
            limits, usage = self.limits[principal], self.usage[principal]
            if limits.creates_per_second is not None:
                usage.tokens = refill(usage.tokens, usage.tokens_time, limits, self.now) - 1
                usage.tokens_time = self.now
                self.spent.add(principal)
            if kind == "work_unit":
                usage.live_work_units += 1
            else:
                usage.live_experiments += 1
        return None

    def _refusal(self, principal: str, kind: Kind) -> QuotaExceededError | None:
        limits, usage = self.limits[principal], self.usage[principal]
        live, most = (
            (usage.live_work_units, limits.live_work_units)
            if kind == "work_unit"
            else (usage.live_experiments, limits.live_experiments)
        )
        noun = "live work units" if kind == "work_unit" else "live experiments"
        if most is not None and live + 1 > most:
            return QuotaExceededError(
                f"quota: {principal} may have at most {most} {noun} ({live} live now); "
                f"retry when some of them finish (in {LIVE_RETRY_SECONDS:g} s or later)",
                principal=principal,
                limit=noun.replace(" ", "_"),
                value=float(most),
                retry_after=LIVE_RETRY_SECONDS,
            )
        rate = limits.creates_per_second
        if rate is None:
            return None
        tokens = refill(usage.tokens, usage.tokens_time, limits, self.now)
        if tokens >= 1:
            return None
        wait = (1 - tokens) / rate
        return QuotaExceededError(
            f"quota: {principal} may create at most {rate:g} experiments and work units "
            f"per second (burst {limits.burst:g}); retry in {wait:.2f} s",
            principal=principal,
            limit="creates_per_second",
            value=rate,
            retry_after=wait,
        )
