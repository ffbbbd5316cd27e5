"""``ensure_group`` on the real Redis: a new group (and its stream) is created, an existing
one is left as it is (``BUSYGROUP`` is success), any other error reply is raised."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from tests.servers import REDIS_URL
from xmc.streams import ensure_group


@pytest.fixture
async def redis() -> AsyncIterator[Any]:
    client: Any = aioredis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
async def key(redis: Any) -> AsyncIterator[str]:
    name = f"ensure-group-test:{uuid.uuid4().hex}"
    yield name
    await redis.delete(name)


async def _groups(redis: Any, stream: str) -> dict[bytes, bytes]:
    return {g["name"]: g["last-delivered-id"] for g in await redis.xinfo_groups(stream)}


async def test_a_new_group_is_created_with_its_stream(redis: Any, key: str) -> None:
    await ensure_group(redis, key, "readers")
    assert await redis.type(key) == b"stream"
    assert await _groups(redis, key) == {b"readers": b"0-0"}


async def test_an_existing_group_is_left_as_it_is(redis: Any, key: str) -> None:
    entry = await redis.xadd(key, {"n": "1"})
    await ensure_group(redis, key, "readers", start_id="$")
    assert await _groups(redis, key) == {b"readers": entry}

    await ensure_group(redis, key, "readers")  # BUSYGROUP: no error, cursor kept

    assert await _groups(redis, key) == {b"readers": entry}


async def test_any_other_error_is_raised(redis: Any, key: str) -> None:
    await redis.set(key, "not a stream")
    with pytest.raises(ResponseError, match=r"^WRONGTYPE"):
        await ensure_group(redis, key, "readers")
    assert await redis.get(key) == b"not a stream"
