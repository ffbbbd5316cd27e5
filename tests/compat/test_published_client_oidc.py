"""docs/auth.md's user path, with the published client (``xmanager==0.8.5.post1``) in its
own virtualenv: an ESS serving TLS and verifying OIDC ID tokens with an issuer's key set
(``XMC_AUTH_JWKS_URL``), and a user who sets only ``XMANAGER_ENDPOINT=https://…`` and
``XMC_AUTH_TOKEN`` (plus the CA of a private certificate). ``make compat``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pytest

from tests.integration.ess_harness import EssFactory, auth_settings
from tests.integration.jwks_issuer import (
    AUDIENCE,
    ISSUER,
    Issuer,
)
from tests.integration.tls import self_signed

pytestmark = pytest.mark.compat

CLIENT = """
import json
from xmanager_cloud.experiment_state_server import experiment_state_api
from xmanager_cloud.experiment_state_server.proto import api_pb2, experiment_pb2

api = experiment_state_api.get_experiment_state_api()
created = api.create_experiment(
    api_pb2.CreateExperimentRequest(experiment=experiment_pb2.Experiment(title="oidc"))
)
print(json.dumps({"creator": created.creator}))
"""


async def test_a_user_with_an_oidc_token_launches_over_tls(
    stubs_python: Path, ess_factory: EssFactory, issuer: Issuer, tmp_path: Path
) -> None:
    cert_file, key_file = self_signed(tmp_path)
    auth = dataclasses.replace(
        auth_settings(), jwks_url=issuer.url, issuer=ISSUER, audience=AUDIENCE
    )
    ess = await ess_factory(auth=auth, tls_cert_file=str(cert_file), tls_key_file=str(key_file))
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env = {
        **keep,
        "XMANAGER_ENDPOINT": f"https://localhost:{ess.server.port}",
        "XMC_AUTH_TOKEN": issuer.token("k1", email="carol@example.com"),
        # A private CA: gRPC's own variable for the roots it trusts.
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert_file),
    }
    process = await asyncio.create_subprocess_exec(
        str(stubs_python), "-c", CLIENT, cwd=tempfile.gettempdir(), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-4000:]
    (line,) = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    # The creator is the token's email: the client sent it as x-goog-user-email too (read
    # from the token), and the ESS found the two equal.
    assert line == {"creator": "carol@example.com"}
