"""``OutboxRelay.entry_states`` when the Actuator reads an entry while the relay looks.

Seen in ``bench/e2e_sweep.py`` (once at N=500 on the real cluster, once at N=2000 on
kubesim): the relay re-drove a create "refused unfinished" ~1 s before the Actuator
carried it out. Its two reads — the entries' places (pending or not) and the group's
last-delivered id — straddled the Actuator's XREADGROUP: not pending yet, but delivered,
which is how an acknowledged entry looks.
"""

from __future__ import annotations

from typing import Any, cast

from ess.relay import OutboxRelay
from xmc.model.outbox import EntryState
from xmc.streams import ACTUATOR_GROUP, StreamNames
from xmc.timestamps import utc_now

ENTRY = "100-5"
_STREAM, _PENDING = 1, 2  # the lookup script's places: in the stream / in the PEL


class DeliversBetweenReads:
    """A Redis whose Actuator group delivers ``ENTRY`` right after the relay's first read
    of either kind (so it is in the pending list from then on)."""

    def __init__(self) -> None:
        self.delivered = False

    def register_script(self, _source: str) -> Any:
        async def where(keys: list[str], args: list[str]) -> list[int]:
            place = _PENDING if self.delivered else _STREAM
            self.delivered = True
            return [place for _ in args[1:]]

        return where

    async def xinfo_groups(self, _stream: str) -> list[dict[str, Any]]:
        last = ENTRY if self.delivered else "100-4"
        self.delivered = True
        return [{"name": ACTUATOR_GROUP, "last-delivered-id": last}]


async def test_an_entry_delivered_while_the_relay_looks_is_not_taken_for_settled() -> None:
    relay = OutboxRelay(
        cast(Any, None), DeliversBetweenReads(), StreamNames.with_prefix("t:"),
        cast(Any, None), clock=utc_now,
    )  # fmt: skip
    states = await relay.entry_states([ENTRY])
    assert states[ENTRY] in (EntryState.WAITING, EntryState.IN_FLIGHT)
