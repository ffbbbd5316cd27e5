"""Reads from a resourceVersion the server has not reached, as kube-apiserver answers them.

This happens for real when etcd is restored from a backup (the revision goes back) and
for kubesim whenever an ephemeral one restarts: a client resumes from a resourceVersion
of the old timeline, higher than anything the server has. Read against kubernetes
(1.33–1.35 ``staging/src/k8s.io/apiserver``):

- ``pkg/storage/cacher/delegator.go`` ``shouldDelegateList``: a list with
  ``resourceVersionMatch=Exact``, or with a ``limit`` and a ``resourceVersion`` but no
  match (the legacy exact read), goes to etcd; every other list with a ``resourceVersion``
  (``NotOlderThan``, or no match) and a GET with one are served by the watch cache.
- ``pkg/storage/cacher/watch_cache.go`` ``waitUntilFreshAndBlock``: the watch cache waits
  ``blockTimeout`` (3 s) for the resourceVersion to arrive, then fails with
  ``storage.NewTooLargeResourceVersionError(rv, current, 1)``
  (``resourceVersionTooHighRetrySeconds``).
- ``pkg/storage/errors.go`` ``NewTooLargeResourceVersionError``: apimachinery's
  ``NewTimeoutError`` — HTTP 504, reason ``Timeout``, message ``Timeout: Too large
  resource version: RV, current: CURRENT``, ``details.retryAfterSeconds: 1`` (so also a
  ``Retry-After: 1`` header) — plus the cause ``{reason: ResourceVersionTooLarge,
  message: "Too large resource version"}``. client-go's ``reflector.go``
  ``isTooLargeResourceVersionError`` looks for that cause, then relists with
  ``resourceVersion=""`` (``relistResourceVersion``).
- ``pkg/storage/etcd3/store.go`` ``GetList``: an exact read asks etcd for that revision;
  etcd answers ``mvcc: required revision is a future revision`` at once, which no layer
  converts, so the client gets HTTP 500 with that message and no reason.

A plain watch from such a resourceVersion is *not* an error upstream:
``cacher.go`` ``Watch`` → ``waitUntilWatchCacheFreshAndForceAllEvents`` waits only for
``sendInitialEvents=true`` ("otherwise, we allow for establishing the connection because
the clients can wait for events without unnecessary blocking"), and the watcher then
delivers only events after that resourceVersion. kubesim's watch does the same (see
``watch.py``); a client learns of the restart from its next list.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from kubesim.errors import ApiError, bad_request, invalid
from kubesim.store import ObjectStore
from kubesim.watch import parse_resource_version

WAIT_SECONDS = 3.0
"""The watch cache's ``blockTimeout``."""
RETRY_AFTER_SECONDS = 1
"""``resourceVersionTooHighRetrySeconds``."""
NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"
_LIST_OPTIONS = "ListOptions.meta.k8s.io"


def too_large(requested: int, current: int) -> ApiError:
    """The watch cache's answer once the wait for ``requested`` is over."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": RETRY_AFTER_SECONDS,
        },
    )


def future_revision() -> ApiError:
    """etcd's answer to a read at a revision it has not reached, passed through as is."""
    return ApiError(500, "", "etcdserver: mvcc: required revision is a future revision")


@dataclass(frozen=True)
class ReadAt:
    """How a read with a ``resourceVersion`` is served."""

    minimum: int | None
    """The resourceVersion the answer must be at least as new as (None: any)."""
    exact: bool = False
    """Read at exactly ``minimum`` (from etcd): a future one fails at once."""


def list_read(
    raw_resource_version: str | None, match: str | None, limit: int | None, has_continue: bool
) -> ReadAt:
    """How a list is served (pure). Bad combinations are refused as apimachinery's
    ``ValidateListOptions`` and etcd3's ``GetList`` refuse them."""
    match = match or ""
    _check_match_has_version(raw_resource_version, match)
    resource_version = parse_resource_version(raw_resource_version)
    if match not in ("", NOT_OLDER_THAN, EXACT):
        raise invalid(
            _LIST_OPTIONS,
            "",
            f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
            f'"{EXACT}", "{NOT_OLDER_THAN}"',
        )
    if match and has_continue:
        raise invalid(
            _LIST_OPTIONS,
            "",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue "
            "is provided",
        )
    if has_continue and resource_version is not None:
        raise bad_request("specifying resource version is not allowed when using continue")
    if resource_version is None:
        return ReadAt(None)
    if match == EXACT or (match == "" and limit):
        return ReadAt(resource_version, exact=True)
    return ReadAt(resource_version)


def _check_match_has_version(raw_resource_version: str | None, match: str) -> None:
    """``resourceVersionMatch`` needs a ``resourceVersion``, and ``Exact`` a non-zero one."""
    if not match:
        return
    if not raw_resource_version:
        raise invalid(
            _LIST_OPTIONS,
            "",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided",
        )
    if match == EXACT and raw_resource_version == "0":
        raise invalid(
            _LIST_OPTIONS,
            "",
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
            'resourceVersion "0"',
        )


async def wait_until_fresh(
    store: ObjectStore, read: ReadAt, wait_seconds: float = WAIT_SECONDS
) -> None:
    """Return once the store has reached ``read.minimum``: at once for an exact read
    (else 500), after up to ``wait_seconds`` for the others (else 504 Too large). Costs
    nothing unless the version is ahead of the store."""
    target = read.minimum
    if target is None or store.resource_version >= target:
        return
    if read.exact:
        raise future_revision()
    subscription = store.subscribe(None)
    deadline = time.monotonic() + wait_seconds
    try:
        while store.resource_version < target:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise too_large(target, store.resource_version)
            try:
                if await asyncio.wait_for(subscription.queue.get(), remaining) is None:
                    break  # the store closed its feeds: kubesim is stopping
            except TimeoutError:
                continue
    finally:
        store.unsubscribe(subscription)
    if store.resource_version < target:
        raise too_large(target, store.resource_version)
