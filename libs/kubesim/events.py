"""The store's change feed: one ``Event`` per write, delivered to each ``Subscription``'s
asyncio queue (watches and controllers read them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kubesim.resources import Resource

Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    """One change: ``type`` is ADDED, MODIFIED or DELETED; ``old`` is the object before
    (None for ADDED) so label-selector watches can report crossings."""

    type: str
    resource: Resource
    object: Obj
    old: Obj | None
    resource_version: int


@dataclass
class Subscription:
    """A live feed of events for one resource (or all, when ``resource`` is None)."""

    resource: Resource | None
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)
