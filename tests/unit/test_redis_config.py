"""Redis configuration and key names (issue 14, decision 0021): a Redis Cluster's nodes
from ``XMC_REDIS_CLUSTER_NODES``, and every key of one prefix under one hash tag."""

from __future__ import annotations

import pytest

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
    ("prefix", "tasks", "dlq", "resume", "published"),
    [
        pytest.param(
            "", "{xmc}:tasks-stream", "{xmc}:dlq-stream", "{xmc}:scheduling-resume-stream",
            "{xmc}:published:t1:2", id="no prefix",
        ),
        pytest.param(
            "tenant-a:", "{tenant-a:xmc}:tasks-stream", "{tenant-a:xmc}:dlq-stream",
            "{tenant-a:xmc}:scheduling-resume-stream", "{tenant-a:xmc}:published:t1:2",
            id="a prefix goes inside the tag",
        ),
    ],
)  # fmt: skip
def test_every_key_of_a_prefix_shares_one_hash_tag(
    prefix: str, tasks: str, dlq: str, resume: str, published: str
) -> None:
    names = StreamNames.with_prefix(prefix)
    assert (names.tasks, names.dlq, names.resume) == (tasks, dlq, resume)
    assert names.published_key("t1", 2) == published
