"""The published client's fixtures: its virtualenvs (``tests.compat.support``), and a
real XMC stack for it to talk to: ``tests.stack``'s four OS processes, with
authentication on; the client sends ``XMC_AUTH_TOKEN`` as a bearer token, as a user's
would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.compat.support import SERVICE_EMAIL, SERVICE_TOKEN, USER_EMAIL, USER_TOKEN, client_venv
from tests.integration.ess_harness import ess_factory  # noqa: F401  (a fixture: an in-process ESS)
from tests.integration.jwks_issuer import issuer  # noqa: F401  (a fixture)
from tests.integration.processes import running_stack
from tests.integration.redis_server import RedisServer
from tests.servers import ADMIN_DSN
from tests.stack import Stack, StackOptions


@pytest.fixture(scope="session")
def stubs_python() -> Path:
    return client_venv("stubs")


@pytest.fixture(scope="session")
def full_python() -> Path:
    return client_venv("full")


@pytest.fixture
async def compat_stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    auth = {
        "XMC_AUTH_DISABLED": "false",
        "XMC_AUTH_STATIC_TOKENS": f"{USER_TOKEN}={USER_EMAIL},{SERVICE_TOKEN}={SERVICE_EMAIL}",
        "XMC_AUTH_SERVICE_ACCOUNTS": SERVICE_EMAIL,
        "XMC_SERVICE_TOKEN": SERVICE_TOKEN,
    }
    async with running_stack(
        ADMIN_DSN, private_redis.url, tmp_path / "logs", request, StackOptions(extra_env=auth)
    ) as stack:
        yield stack


@pytest.fixture
async def dev_stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    """A stack as ``make run`` serves it: authentication disabled."""
    options = StackOptions(extra_env={"XMC_AUTH_DISABLED": "true"})
    async with running_stack(
        ADMIN_DSN, private_redis.url, tmp_path / "logs", request, options
    ) as stack:
        yield stack
