"""What the published client's tests share: its own virtualenvs, the tokens of the
stack it talks to, and the environment a user sets for it.

The client pins ``protobuf<7`` and ours is newer, so it can never share the test
interpreter: each path gets its own virtualenv, built once per requirements file and
kept (``XMC_COMPAT_HOME``, default ``~/.cache/xmc-compat``) so later runs start at once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.stack import Stack

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


def client_env(stack: Stack) -> dict[str, str]:
    """Exactly what a user sets to point the published client at XMC (README)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {
        **keep,
        "XMANAGER_ENDPOINT": f"http://{stack.endpoint}",
        "XMC_AUTH_TOKEN": USER_TOKEN,
        "XMC_USER_EMAIL": USER_EMAIL,
    }
