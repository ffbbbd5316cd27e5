"""Redis streams of SPEC §6: names, and the one place tasks are signed and published.

The streams are the keys SPEC names, ``xmc-tasks-stream``, ``xmc-dlq-stream`` and
``xmc-scheduling-resume-stream``, behind an optional prefix (``XMC_STREAM_PREFIX``) so
tests and tenants sharing one Redis never see each other's entries. A key that a script
touches together with a stream takes the stream's full name as its hash tag
(``{xmc-tasks-stream}:published:…``): Redis Cluster hashes only what is between the
braces, so the key lands in the stream's slot and the script on one node. No script spans
two streams (decision 0027).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ClusterError, ResponseError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from xmc.errors import UnavailableError
from xmc.tasks import sign_task
from xmc_api.internal.v1.tasks_pb2 import Task

ACTUATOR_GROUP = "xmc-actuators"
RESUME_GROUP = "xmc-resumers"

# Publish each attempt of a task at most once: the first call XADDs and remembers the entry
# id under the attempt's key, a repeat (the relay crashed after XADD, before recording
# the publish) returns that id without a second entry. One call for a whole batch: a
# Redis Cluster pipeline cannot carry EVALSHA, and all the keys share the stream's slot.
# KEYS: tasks stream, then one attempt key per task. ARGV: seconds to remember, then the
# task bytes and token of each task, in KEYS order. Returns the entry ids, in order.
_PUBLISH_ATTEMPTS = """
local ids = {}
for i = 2, #KEYS do
  local id = redis.call('GET', KEYS[i])
  if not id then
    id = redis.call('XADD', KEYS[1], '*', 'task', ARGV[2 * i - 2], 'token', ARGV[2 * i - 1])
    redis.call('SET', KEYS[i], id, 'EX', ARGV[1])
  end
  ids[#ids + 1] = id
end
return ids
"""


#: SPEC §1's stream names: with no ``XMC_STREAM_PREFIX``, these are the Redis keys.
TASKS_STREAM = "xmc-tasks-stream"
DLQ_STREAM = "xmc-dlq-stream"
RESUME_STREAM = "xmc-scheduling-resume-stream"


@dataclass(frozen=True)
class StreamNames:
    """Every Redis key of one deployment (one prefix), in one place."""

    tasks: str
    dlq: str
    resume: str
    prefix: str = ""

    @classmethod
    def with_prefix(cls, prefix: str = "") -> StreamNames:
        """``prefix`` + each SPEC name. A brace in the prefix would make Redis Cluster hash
        only part of a name (and the tagged keys differently from their stream): refused
        (``Settings`` refuses it at load, naming XMC_STREAM_PREFIX)."""
        if "{" in prefix or "}" in prefix:
            raise ValueError(f"a stream prefix may not contain braces, got {prefix!r}")
        return cls(
            tasks=prefix + TASKS_STREAM,
            dlq=prefix + DLQ_STREAM,
            resume=prefix + RESUME_STREAM,
            prefix=prefix,
        )

    @property
    def streams(self) -> tuple[str, str, str]:
        return self.tasks, self.dlq, self.resume

    def published_key(self, task_id: str, attempt: int) -> str:
        """Remembers that attempt ``attempt`` of task ``task_id`` is on the stream; in the
        task stream's slot (the relay's publish script touches both)."""
        return f"{{{self.tasks}}}:published:{task_id}:{attempt}"

    @property
    def served_by_key(self) -> str:
        """The run id of the Redis server that held the task stream when the relay last
        had every published task checked; in the stream's slot, so it lives and dies
        with the stream's data (decision 0052)."""
        return f"{{{self.tasks}}}:served-by"

    @property
    def dead_lettered_key(self) -> str:
        """The source entry ids the DLQ holds (a sorted set), so an entry is dead-lettered
        once; in the DLQ's slot (the dead-letter script touches both)."""
        return f"{{{self.dlq}}}:dead-lettered"

    @property
    def scan_pattern(self) -> str:
        """A ``SCAN MATCH`` pattern that finds every key of this prefix (and maybe others:
        filter with ``owns``): streams and tagged keys both contain ``<prefix>xmc-``."""
        return f"*{_glob_escape(self.prefix)}xmc-*"

    def owns(self, key: str) -> bool:
        """Whether ``key`` is one of this deployment's: a stream, or tagged with one."""
        return key in self.streams or key.startswith(tuple(f"{{{s}}}:" for s in self.streams))


def _glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis glob pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def text(value: bytes | str) -> str:
    """A Redis reply value as text: redis-py answers bytes unless the client decodes."""
    return value.decode() if isinstance(value, bytes) else value


#: Redis cannot serve now: a node down or unreachable, or (a cluster) a slot without a node.
REDIS_UNAVAILABLE = (
    RedisConnectionError, RedisTimeoutError, OSError, ClusterError, SlotNotCoveredError
)  # fmt: skip


class ReadFailure(enum.Enum):
    """What a Redis error answer to XREADGROUP means for a consumer."""

    #: The stream or its group is gone (``NOGROUP``; ``UNBLOCKED`` when the key is
    #: deleted under a blocked read): create the group again and read on.
    GROUP_GONE = "group_gone"
    #: The server cannot serve now (loading, a replica mid-failover, out of memory): wait.
    BUSY = "busy"
    #: Anything else (``WRONGTYPE``: the key is not a stream): the consumer cannot work.
    FATAL = "fatal"


_GROUP_GONE = ("NOGROUP", "UNBLOCKED")
_BUSY = ("LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM", "BUSY")


def classify_read_error(message: str) -> ReadFailure:
    """Classify an error reply by its leading code word (pure)."""
    code = message.split(" ", 1)[0].upper()
    if code in _GROUP_GONE:
        return ReadFailure.GROUP_GONE
    if code in _BUSY:
        return ReadFailure.BUSY
    return ReadFailure.FATAL


async def ensure_group(redis: Any, stream: str, group: str, start_id: str = "0") -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream, ``MKSTREAM``), its
    cursor at ``start_id``; a group that exists already (``BUSYGROUP``) is the wanted
    state, not an error. Any other error reply propagates (``WRONGTYPE``: the key holds
    something else; ``OOM``; ``LOADING``): no group exists then, and swallowing the error
    would only move it to the first read, with a less telling message."""
    try:
        await redis.xgroup_create(stream, group, id=start_id, mkstream=True)
    except ResponseError as exc:
        if not str(exc).startswith("BUSYGROUP"):
            raise


class TaskPublisher:
    """Signs tasks and appends them to ``xmc-tasks-stream``.

    Every entry gets a fresh token, so a task re-driven days after its intent still
    verifies. Redis failures surface as ``UnavailableError``.
    """

    def __init__(
        self,
        redis: Any,
        names: StreamNames,
        *,
        signing_key: str,
        clock: Callable[[], datetime],
        token_ttl: timedelta = timedelta(hours=24),
    ) -> None:
        self._redis = redis
        self._names = names
        self._key = signing_key
        self._clock = clock
        self._ttl = token_ttl
        self._publish_attempts = redis.register_script(_PUBLISH_ATTEMPTS)

    def _entry(self, task: Task) -> dict[str, Any]:
        return sign_task(task, key=self._key, now=self._clock(), ttl=self._ttl)

    async def publish(self, task: Task) -> bytes:
        """XADD one signed task straight to the stream, bypassing the outbox (tests and
        tools that replay an entry); returns the entry id."""
        try:
            entry_id: bytes = await self._redis.xadd(self._names.tasks, self._entry(task))
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return entry_id

    async def publish_many(self, tasks: Sequence[Task]) -> list[bytes]:
        """``publish`` for several tasks in one round trip; returns their entry ids."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for task in tasks:
                    pipe.xadd(self._names.tasks, self._entry(task))
                ids: list[bytes] = await pipe.execute()
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return ids

    async def publish_attempts(
        self, attempts: Sequence[tuple[Task, int]], *, remember_for: timedelta = timedelta(days=1)
    ) -> list[str]:
        """Publish (task, attempt number) pairs in one round trip, each attempt at most
        once (see ``_PUBLISH_ATTEMPTS``); returns the entry ids, in order."""
        if not attempts:
            return []
        keys, args = [self._names.tasks], [int(remember_for.total_seconds())]
        for task, attempt in attempts:
            entry = self._entry(task)
            keys.append(self._names.published_key(task.task_id, attempt))
            args += [entry["task"], entry["token"]]
        try:
            ids: list[bytes | str] = await self._publish_attempts(keys=keys, args=args)
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return [text(i) for i in ids]
