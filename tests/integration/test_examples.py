"""The examples a researcher runs first, against the four services as OS processes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.stack import Stack

# The four services as OS processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def test_failing_example_prints_the_containers_reason_and_exit_code(stack: Stack) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "failing.py"), "--endpoint", stack.endpoint,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    text = out.decode()
    assert process.returncode == 0, text
    assert "FAILED" in text
    assert "exited with code 1 (Error)" in text, text
    assert "exit code 1, reason Error" in text, text
