"""Redis configuration and key names (issue 14, decision 0021; issue 23, decision 0027): a
Redis Cluster's nodes from ``XMC_REDIS_CLUSTER_NODES``, and the streams under SPEC's exact
names, each key that goes with a stream tagged with the stream's full name."""

from __future__ import annotations

import fnmatch

import pytest
from redis.crc import key_slot

from xmc.errors import InvalidArgumentError
from xmc.redis_client import parse_nodes
from xmc.settings import load_settings
from xmc.streams import StreamNames


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param("", (), id="unset: one node, XMC_REDIS_URL"),
        pytest.param("10.0.0.1:6379", ("10.0.0.1:6379",), id="one node"),
        pytest.param(
            " a:7000, b:7001 ,,c:7002", ("a:7000", "b:7001", "c:7002"), id="spaces and empties"
        ),
    ],
)
def test_cluster_nodes_are_read_from_the_environment(raw: str, want: tuple[str, ...]) -> None:
    settings = load_settings({"XMC_REDIS_CLUSTER_NODES": raw}).core
    assert settings.redis_cluster_nodes == want


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"XMC_REDIS_CLUSTER_NODES": "a"}, "XMC_REDIS_CLUSTER_NODES", id="no port"),
        pytest.param({"XMC_REDIS_CLUSTER_NODES": "a:x"}, "XMC_REDIS_CLUSTER_NODES", id="bad port"),
        pytest.param({"XMC_REDIS_CLUSTER_NODES": ":7000"}, "XMC_REDIS_CLUSTER_NODES", id="no host"),
        pytest.param(
            {"XMC_REDIS_CLUSTER_NODES": "a:70000"}, "XMC_REDIS_CLUSTER_NODES", id="port too big"
        ),
        pytest.param({"XMC_STREAM_PREFIX": "t{1}:"}, "XMC_STREAM_PREFIX", id="brace in prefix"),
    ],
)
def test_bad_redis_settings_are_refused_at_load(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        load_settings(env)


def test_nodes_parse_to_host_and_port() -> None:
    assert parse_nodes(("a:7000", "[::1]:7001")) == [("a", 7000), ("::1", 7001)]


@pytest.mark.parametrize(
    ("prefix", "tasks", "dlq", "resume", "published", "dead_lettered"),
    [
        pytest.param(
            "", "xmc-tasks-stream", "xmc-dlq-stream", "xmc-scheduling-resume-stream",
            "{xmc-tasks-stream}:published:t1:2", "{xmc-dlq-stream}:dead-lettered",
            id="no prefix: SPEC's names",
        ),
        pytest.param(
            "t1:", "t1:xmc-tasks-stream", "t1:xmc-dlq-stream", "t1:xmc-scheduling-resume-stream",
            "{t1:xmc-tasks-stream}:published:t1:2", "{t1:xmc-dlq-stream}:dead-lettered",
            id="a prefix goes before each name, and inside each tag",
        ),
    ],
)  # fmt: skip
def test_streams_have_spec_names_and_their_keys_the_streams_tags(
    prefix: str, tasks: str, dlq: str, resume: str, published: str, dead_lettered: str
) -> None:
    names = StreamNames.with_prefix(prefix)
    assert (names.tasks, names.dlq, names.resume) == (tasks, dlq, resume)
    assert names.published_key("t1", 2) == published
    assert names.dead_lettered_key == dead_lettered


@pytest.mark.parametrize(
    ("key", "slot_of"),
    [
        pytest.param("{xmc-tasks-stream}:published:t1:2", "xmc-tasks-stream", id="publish"),
        pytest.param("{xmc-dlq-stream}:dead-lettered", "xmc-dlq-stream", id="dead-lettered"),
        pytest.param("{t1:xmc-tasks-stream}:published:a:1", "t1:xmc-tasks-stream", id="prefix"),
    ],
)
def test_a_tagged_key_hashes_to_its_streams_slot(key: str, slot_of: str) -> None:
    assert key_slot(key.encode()) == key_slot(slot_of.encode())


def test_a_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ValueError, match="braces"):
        StreamNames.with_prefix("t{1}:")


@pytest.mark.parametrize(
    ("prefix", "key", "owned"),
    [
        pytest.param("", "xmc-tasks-stream", True, id="a stream"),
        pytest.param("", "{xmc-tasks-stream}:published:t:1", True, id="a publish marker"),
        pytest.param("", "{xmc-dlq-stream}:dead-lettered", True, id="the dead-letter set"),
        pytest.param("", "t1:xmc-tasks-stream", False, id="another prefix's stream"),
        pytest.param("", "{t1:xmc-tasks-stream}:published:t:1", False, id="its marker"),
        pytest.param("t1:", "t1:xmc-dlq-stream", True, id="prefixed stream"),
        pytest.param("t1:", "at1:xmc-dlq-stream", False, id="a prefix ending like ours"),
        pytest.param("t1:", "{xmc}:tasks-stream", False, id="decision 0021's key"),
        pytest.param("t*", "t*xmc-tasks-stream", True, id="glob characters"),
    ],
)
def test_a_deployment_owns_its_streams_and_their_tagged_keys(
    prefix: str, key: str, owned: bool
) -> None:
    names = StreamNames.with_prefix(prefix)
    assert names.owns(key) is owned
    # SCAN MATCH finds every key owned (it may find more, which ``owns`` filters out).
    if owned:
        assert fnmatch.fnmatchcase(key, names.scan_pattern.replace("\\*", "[*]"))
