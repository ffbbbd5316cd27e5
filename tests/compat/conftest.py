"""The published client's own virtualenvs, and a real XMC stack for it to talk to.

The client pins ``protobuf<7`` and ours is newer, so it can never share the test
interpreter: each path gets its own virtualenv, built once per requirements file and
kept (``XMC_COMPAT_HOME``, default ``~/.cache/xmc-compat``) so later runs start at once.
The stack is ``tests.stack``'s four OS processes, with authentication on: the client
sends ``XMC_AUTH_TOKEN`` as a bearer token, as a user's would.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import ADMIN_DSN
from tests.integration.conftest import ess_factory  # noqa: F401  (a fixture: an in-process ESS)
from tests.integration.jwks_issuer import issuer  # noqa: F401  (a fixture)
from tests.integration.processes import running_stack
from tests.integration.redis_server import RedisServer
from tests.stack import Stack, StackOptions

HERE = Path(__file__).resolve().parent
#: Each virtualenv's requirements. The full client's is the file users install from
#: (README, "Launching from xmanager"), so what CI tests is what they get.
REQUIREMENTS = {
    "stubs": HERE / "requirements-stubs.txt",
    "full": HERE.parents[1] / "examples" / "xmanager-requirements.txt",
}
USER_TOKEN = "compat-alice-token"
USER_EMAIL = "alice@example.com"
SERVICE_TOKEN = "compat-reconciler-token"
SERVICE_EMAIL = "reconciler@xmc.internal"


def _home() -> Path:
    configured = os.environ.get("XMC_COMPAT_HOME", "").strip()
    return Path(configured) if configured else Path.home() / ".cache" / "xmc-compat"


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        check=True,
    )


def client_venv(kind: str) -> Path:
    """The Python of the ``kind`` ("stubs" or "full") virtualenv, built if missing. A
    ``.complete`` marker is written last, so a build cut short is rebuilt."""
    files = [HERE / "client-version.txt", REQUIREMENTS[kind]]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    root = _home() / f"{kind}-{digest}"
    python = root / "bin" / "python"
    if (root / ".complete").exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    if kind == "stubs":
        _pip(python, "--no-deps", "-r", str(HERE / "client-version.txt"))
    _pip(python, "-r", str(REQUIREMENTS[kind]))
    (root / ".complete").write_text("ok\n")
    return python


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


def client_env(stack: Stack) -> dict[str, str]:
    """Exactly what a user sets to point the published client at XMC (README)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {
        **keep,
        "XMANAGER_ENDPOINT": f"http://{stack.endpoint}",
        "XMC_AUTH_TOKEN": USER_TOKEN,
        "XMC_USER_EMAIL": USER_EMAIL,
    }
