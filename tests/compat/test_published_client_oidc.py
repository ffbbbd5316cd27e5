"""docs/auth.md's user path, with the published client (``xmanager==0.8.5.post1``) in its
own virtualenv: an ESS serving TLS and verifying OIDC ID tokens with an issuer's key set
(``XMC_AUTH_JWKS_URL``), and a user who sets only ``XMANAGER_ENDPOINT=https://…`` and
``XMC_AUTH_TOKEN`` (plus the CA of a private certificate). ``make compat``."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import ipaddress
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.conftest import EssFactory, auth_settings
from tests.integration.jwks_issuer import AUDIENCE, ISSUER, Issuer

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


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for localhost that is its own CA, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    started = Issuer()
    started.add_key("k1")
    await started.start()
    yield started
    await started.stop()


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
