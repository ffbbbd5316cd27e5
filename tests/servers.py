"""The machine's Postgres and Redis the suite runs against (docs/testing.md);
``XMC_TEST_DATABASE_URL`` and ``XMC_TEST_REDIS_URL`` point elsewhere.

Tests, support modules and the conftests' fixtures all read them from here: a conftest
holds fixtures and hooks only, and nothing imports from one."""

from __future__ import annotations

import os

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
"""A database of the shared server to create each test's database from."""
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
"""The shared Redis; each test keeps to a key prefix of its own."""
