"""Redis streams of SPEC §6: names, and the one place tasks are signed and published.

Every key carries an optional prefix (``XMC_STREAM_PREFIX``) so tests and tenants sharing
one Redis never see each other's entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from xmc.errors import UnavailableError
from xmc.tasks import sign_task
from xmc_api.internal.v1.tasks_pb2 import Task

ACTUATOR_GROUP = "xmc-actuators"
RESUME_GROUP = "xmc-resumers"

# Atomically: remember that a task was published, and publish it only the first time.
# A resume run that crashes after XADD but before marking the task processed will meet
# the key on its retry and not enqueue the task twice.
_PUBLISH_ONCE = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', 'task', ARGV[2], 'token', ARGV[3])
end
return false
"""


@dataclass(frozen=True)
class StreamNames:
    tasks: str
    dlq: str
    resume: str
    prefix: str = ""

    @classmethod
    def with_prefix(cls, prefix: str = "") -> StreamNames:
        return cls(
            tasks=f"{prefix}xmc-tasks-stream",
            dlq=f"{prefix}xmc-dlq-stream",
            resume=f"{prefix}xmc-scheduling-resume-stream",
            prefix=prefix,
        )

    def published_key(self, task_id: str) -> str:
        return f"{self.prefix}xmc-published:{task_id}"


REDIS_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)


class TaskPublisher:
    """Signs tasks and appends them to ``xmc-tasks-stream``.

    Redis failures surface as ``UnavailableError`` so callers can take the enqueue-failure
    path of SPEC §4 (a message on the work unit) instead of failing the RPC.
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
        self._publish_once = redis.register_script(_PUBLISH_ONCE)

    def _entry(self, task: Task) -> dict[str, Any]:
        return sign_task(task, key=self._key, now=self._clock(), ttl=self._ttl)

    async def publish(self, task: Task) -> bytes:
        """XADD one signed task; returns the entry id."""
        try:
            entry_id: bytes = await self._redis.xadd(self._names.tasks, self._entry(task))
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return entry_id

    async def publish_many(self, tasks: Sequence[Task]) -> list[bytes]:
        """XADD several signed tasks in one round trip; returns their entry ids."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for task in tasks:
                    pipe.xadd(self._names.tasks, self._entry(task))
                ids: list[bytes] = await pipe.execute()
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return ids

    async def publish_once(
        self,
        task: Task,
        *,
        dedupe_id: str | None = None,
        remember_for: timedelta = timedelta(days=8),
    ) -> bytes | None:
        """XADD unless ``dedupe_id`` (default: the task id) was already published; None
        when it was."""
        entry = self._entry(task)
        try:
            result = await self._publish_once(
                keys=[self._names.published_key(dedupe_id or task.task_id), self._names.tasks],
                args=[int(remember_for.total_seconds()), entry["task"], entry["token"]],
            )
        except REDIS_UNAVAILABLE as exc:
            raise UnavailableError(f"task stream unavailable: {exc}") from exc
        return result if result else None
