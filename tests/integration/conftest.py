"""The integration tests' fixtures: each lives in the module of what it starts, and is
provided here."""

from tests.integration.browser import browser  # noqa: F401  (a fixture)
from tests.integration.ess_harness import ess, ess_factory  # noqa: F401  (fixtures)
from tests.integration.jwks_issuer import issuer  # noqa: F401  (a fixture)
from tests.integration.pg_auto_failover import auto_failover  # noqa: F401  (a fixture)
from tests.integration.postgres_server import private_postgres  # noqa: F401  (a fixture)
from tests.integration.processes import client, ledger, stack  # noqa: F401  (fixtures)
from tests.integration.read_auth_support import world  # noqa: F401  (a fixture)
from tests.integration.redis_cluster import redis_cluster  # noqa: F401  (a fixture)
from tests.integration.webhook_receiver import receiver  # noqa: F401  (a fixture)
