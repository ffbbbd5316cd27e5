"""Quota settings (docs/quotas.md): the server's default limits and how often each ESS
rereads the limits admins set. In a module of its own, as ``auth_settings``, so that
``xmc.settings`` stays a table of groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from xmc.errors import InvalidArgumentError
from xmc.model.quotas import Limits, check_limits
from xmc.setting_values import Env, items, seconds

_INTEGER_KEYS: Final = ("creates_burst", "live_work_units", "live_experiments")


def parse_limits(text: str, *, name: str) -> Limits:
    """``creates_per_second=20,creates_burst=40,live_work_units=5000,live_experiments=50``
    (any subset; empty: unlimited); the error names the variable and the key."""
    values: dict[str, float | int] = {}
    for item in items(text):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key != "creates_per_second" and key not in _INTEGER_KEYS:
            raise InvalidArgumentError(
                f"{name}: unknown key {key!r} (creates_per_second, creates_burst, "
                "live_work_units, live_experiments)"
            )
        try:
            values[key] = float(raw) if key == "creates_per_second" else int(raw)
        except ValueError:
            raise InvalidArgumentError(f"{name}: {key} must be a number, got {raw!r}") from None
    limits = Limits(**values)  # type: ignore[arg-type]
    try:
        check_limits(limits)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"{name}: {error}") from None
    return limits


@dataclass(frozen=True)
class QuotaSettings:
    """Quotas and rate limits (docs/quotas.md)."""

    #: XMC_QUOTA_DEFAULT — every user's limits unless an admin set a ``default`` row or
    #: one of their own; empty (the default): unlimited.
    default: Limits = field(default_factory=Limits)
    #: XMC_QUOTA_REFRESH_SECONDS — how often each ESS rereads the limits table and folds
    #: the pending live-count changes (a Set takes effect at once on the ESS that served
    #: it, within this on the others).
    refresh_seconds: float = 5.0

    @classmethod
    def _from_env(cls, env: Env) -> QuotaSettings:
        refresh = seconds(env, "XMC_QUOTA_REFRESH_SECONDS", cls.refresh_seconds)
        if not 0.05 <= refresh <= 3600:
            raise InvalidArgumentError(
                f"XMC_QUOTA_REFRESH_SECONDS: between 0.05 and 3600 seconds, got {refresh!r}"
            )
        return cls(
            default=parse_limits(env.get("XMC_QUOTA_DEFAULT", ""), name="XMC_QUOTA_DEFAULT"),
            refresh_seconds=refresh,
        )
