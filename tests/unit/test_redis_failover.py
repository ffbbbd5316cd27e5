"""Redis failover (issue 30, decision 0052): the Sentinel settings, and when the relay
must check every published task because the stream's node may lack some of them."""

from __future__ import annotations

import pytest
from redis.asyncio.sentinel import SentinelConnectionPool

from xmc.errors import InvalidArgumentError
from xmc.model.outbox import stream_data_suspect
from xmc.redis_client import connect_redis
from xmc.sentinel_settings import sentinel_problem
from xmc.settings import load_settings


@pytest.mark.parametrize(
    ("served_by", "run_id", "suspect"),
    [
        pytest.param("r1", "r1", False, id="the node that was checked serves on"),
        pytest.param("r1", "r2", True, id="failover: the replica holds its master's stamp"),
        pytest.param(None, "r2", True, id="restart without persistence: the stamp is gone"),
        pytest.param("r1", "r3", True, id="restart from an older snapshot: an old stamp"),
        pytest.param(None, "r1", True, id="never stamped: a new deployment checks once"),
    ],
)
def test_the_stream_data_is_suspect_unless_stamped_by_the_node_serving_it(
    served_by: str | None, run_id: str, suspect: bool
) -> None:
    assert stream_data_suspect(served_by, run_id) is suspect


@pytest.mark.parametrize(
    ("sentinels", "master", "cluster", "names"),
    [
        pytest.param((), "", False, None, id="unset: one node or a cluster"),
        pytest.param(("s1:26379", "s2:26379"), "xmc", False, None, id="sentinels and master"),
        pytest.param(("s1:26379",), "my.master-1_a", False, None, id="every allowed character"),
        pytest.param((), "xmc", False, "XMC_REDIS_SENTINELS", id="a master without sentinels"),
        pytest.param(("s1:1",), "", False, "XMC_REDIS_SENTINEL_MASTER", id="sentinels, no master"),
        pytest.param(("s1:1",), "my master", False, "XMC_REDIS_SENTINEL_MASTER", id="a space"),
        pytest.param(("s1:1",), "xmc", True, "XMC_REDIS_CLUSTER_NODES", id="and a cluster"),
    ],
)
def test_sentinel_settings_go_together(
    sentinels: tuple[str, ...], master: str, cluster: bool, names: str | None
) -> None:
    problem = sentinel_problem(sentinels, master, cluster=cluster)
    if names is None:
        assert problem is None
    else:
        assert names in (problem or "")


def test_sentinels_are_read_from_the_environment() -> None:
    env = {"XMC_REDIS_SENTINELS": " a:26379, b:26380 ,", "XMC_REDIS_SENTINEL_MASTER": " xmc "}
    core = load_settings(env).core
    assert (core.redis_sentinels, core.redis_sentinel_master) == (("a:26379", "b:26380"), "xmc")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"XMC_REDIS_SENTINELS": "a", "XMC_REDIS_SENTINEL_MASTER": "m"},
                     "XMC_REDIS_SENTINELS: expected host:port", id="no port"),
        pytest.param({"XMC_REDIS_SENTINELS": "a:0", "XMC_REDIS_SENTINEL_MASTER": "m"},
                     "XMC_REDIS_SENTINELS: expected host:port", id="port 0"),
        pytest.param({"XMC_REDIS_SENTINEL_MASTER": "m"}, "XMC_REDIS_SENTINELS", id="alone"),
        pytest.param({"XMC_REDIS_SENTINELS": "a:1"}, "XMC_REDIS_SENTINEL_MASTER", id="no name"),
    ],
)  # fmt: skip
def test_bad_sentinel_settings_are_refused_at_load(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        load_settings(env)


def test_with_sentinels_the_client_asks_them_for_the_named_master() -> None:
    """No I/O: the client connects on its first command. The database and the password
    are XMC_REDIS_URL's; its host is not used."""
    settings = load_settings(
        {
            "XMC_REDIS_URL": "redis://:secret@unused:1/3",
            "XMC_REDIS_SENTINELS": "s1:26379,s2:26380",
            "XMC_REDIS_SENTINEL_MASTER": "xmc",
        }
    ).core
    pool = connect_redis(settings).connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert (pool.service_name, pool.is_master) == ("xmc", True)
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (3, "secret")
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [26379, 26380]
