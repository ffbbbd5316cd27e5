"""The one reader of the environment (xmc.settings): defaults, good values, bad values.

The auth group's variables have their own tables in test_auth.py, the Redis ones in
test_redis_config.py and XMC_KUBE_REQUEST_TIMEOUT in test_kube_errors.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from xmc.auth_settings import AuthSettings
from xmc.errors import InvalidArgumentError
from xmc.local_run_settings import LocalRunSettings
from xmc.settings import (
    CliSettings,
    ServiceClientSettings,
    Settings,
    TlsSettings,
    UiSettings,
    XmcSettings,
    load_cli_settings,
    load_settings,
)

KEY = "k" * 32


def test_an_empty_environment_gives_every_default() -> None:
    assert load_settings({}) == XmcSettings(
        core=Settings(
            database_url="postgresql://postgres@127.0.0.1:5432/xmc",
            redis_url="redis://127.0.0.1:6379/0",
            redis_cluster_nodes=(),
            ess_listen="127.0.0.1:50051",
            ess_target="127.0.0.1:50051",
            kube_url="",
            kube_request_timeout=30.0,
            namespace="default",
            task_signing_key="",
            stream_prefix="",
            metrics_listen="",
        ),
        auth=AuthSettings(),
        tls=TlsSettings(cert_file="", key_file=""),
        service_client=ServiceClientSettings(token=None),
        local_run=LocalRunSettings(
            kubesim_port=8081,
            time_scale=1.0,
            clock_offset="0s",
            kueue_version="0.19",
            metrics_base=9464,
            run_dir=".run",
        ),
        cli=CliSettings(tls=False),
    )


@pytest.mark.parametrize(
    ("env", "group", "expected"),
    [
        pytest.param(
            {
                "XMC_DATABASE_URL": "postgres://db/xmc",
                "XMC_REDIS_URL": "rediss://cache:6380/1",
                "XMC_ESS_LISTEN": "0.0.0.0:50051",
                "XMC_ESS_TARGET": "ess:50051",
                "XMC_KUBE_URL": "http://kubesim:8081",
                "XMC_NAMESPACE": "team-a",
                "XMC_TASK_SIGNING_KEY": KEY,
                "XMC_STREAM_PREFIX": "t1:",
                "XMC_METRICS_LISTEN": "0.0.0.0:9091",
            },
            "core",
            Settings(
                database_url="postgres://db/xmc",
                redis_url="rediss://cache:6380/1",
                ess_listen="0.0.0.0:50051",
                ess_target="ess:50051",
                kube_url="http://kubesim:8081",
                namespace="team-a",
                task_signing_key=KEY,
                stream_prefix="t1:",
                metrics_listen="0.0.0.0:9091",
            ),
            id="every shared variable",
        ),
        pytest.param(
            {"XMC_TLS_CERT_FILE": "/tls/crt.pem", "XMC_TLS_KEY_FILE": "/tls/key.pem"},
            "tls",
            TlsSettings("/tls/crt.pem", "/tls/key.pem"),
            id="tls files",
        ),
        pytest.param(
            {"XMC_SERVICE_TOKEN": "opaque"},
            "service_client",
            ServiceClientSettings("opaque"),
            id="service token",
        ),
        pytest.param(
            {"XMC_SERVICE_TOKEN": ""},
            "service_client",
            ServiceClientSettings(None),
            id="empty service token is none",
        ),
        pytest.param(
            {
                "XMC_KUBESIM_PORT": "18081",
                "XMC_KUBESIM_TIME_SCALE": "0.5",
                "XMC_KUBESIM_CLOCK_OFFSET": "-5s",
                "XMC_KUBESIM_KUEUE_VERSION": "0.14",
                "XMC_METRICS_BASE_PORT": "19464",
                "XMC_RUN_DIR": "/tmp/run",
            },
            "local_run",
            LocalRunSettings(18081, 0.5, "-5s", "0.14", 19464, "/tmp/run"),
            id="every make-run variable",
        ),
        pytest.param(
            {"XMANAGER_INSECURE_GRPC": "false"}, "cli", CliSettings(tls=True), id="cli: tls"
        ),
        pytest.param(
            {"XMANAGER_INSECURE_GRPC": " No "}, "cli", CliSettings(tls=True), id="cli: no = tls"
        ),
        pytest.param(
            {"XMANAGER_INSECURE_GRPC": "true"}, "cli", CliSettings(tls=False), id="cli: plaintext"
        ),
        pytest.param(
            {"XMANAGER_INSECURE_GRPC": "whatever"},
            "cli",
            CliSettings(tls=False),
            id="cli: anything else is plaintext, as in xmanager",
        ),
        pytest.param(
            {"XMC_AUTH_DISABLED": "yes"}, "auth", AuthSettings(disabled=True), id="auth flag"
        ),
        pytest.param(
            {"XMC_UI_PUBLIC_URL": " https://xmc.example/ "},
            "ui",
            UiSettings(public_url="https://xmc.example/"),
            id="the dashboard's public url (notification links)",
        ),
    ],
)
def test_values_are_read_into_their_group(env: dict[str, str], group: str, expected: Any) -> None:
    assert getattr(load_settings(env), group) == expected


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        pytest.param({"XMC_DATABASE_URL": "mysql://x"}, "XMC_DATABASE_URL: must start", id="db"),
        pytest.param({"XMC_REDIS_URL": "http://x"}, "XMC_REDIS_URL: must be", id="redis url"),
        pytest.param({"XMC_NAMESPACE": ""}, "XMC_NAMESPACE: must not be empty", id="namespace"),
        pytest.param(
            {"XMC_TASK_SIGNING_KEY": "short"},
            "XMC_TASK_SIGNING_KEY: must be at least 32 bytes",
            id="short signing key",
        ),
        pytest.param(
            {"XMC_AUTH_DISABLED": "maybe"},
            "XMC_AUTH_DISABLED: expected true or false, got 'maybe'",
            id="flag",
        ),
        pytest.param(
            {"XMC_KUBESIM_PORT": "eighty"},
            "XMC_KUBESIM_PORT: expected a port number, got 'eighty'",
            id="port not a number",
        ),
        pytest.param(
            {"XMC_METRICS_BASE_PORT": "70000"},
            "XMC_METRICS_BASE_PORT: expected a port number",
            id="port out of range",
        ),
        pytest.param(
            {"XMC_UI_PUBLIC_URL": "xmc.example"},
            "XMC_UI_PUBLIC_URL: must start with http:// or https://",
            id="public url",
        ),
        pytest.param(
            {"XMC_KUBESIM_TIME_SCALE": "fast"},
            "XMC_KUBESIM_TIME_SCALE: expected a number, got 'fast'",
            id="time scale",
        ),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        load_settings(env)


def test_the_loader_does_not_require_what_only_the_ess_needs() -> None:
    """The Actuator and the Reconciler load the same groups; only the ESS asks for a way
    to authenticate callers."""
    settings = load_settings({})
    with pytest.raises(InvalidArgumentError, match="no way to authenticate"):
        settings.auth.require_verifier()


def test_the_cli_reads_only_its_own_group() -> None:
    assert load_cli_settings({"XMC_DATABASE_URL": "broken"}) == CliSettings(tls=False)


def test_flags_override_and_validate_again() -> None:
    settings = load_settings({}).core.replace(ess_listen="0.0.0.0:1")
    assert settings.ess_listen == "0.0.0.0:1"
    with pytest.raises(InvalidArgumentError, match="XMC_DATABASE_URL"):
        settings.replace(database_url="nope")


def test_the_pidfile_lives_in_the_run_dir() -> None:
    assert LocalRunSettings(run_dir="/var/run/xmc").pidfile == Path("/var/run/xmc/xmc.pid")


JWKS = {
    "XMC_AUTH_JWKS_URL": "https://www.googleapis.com/oauth2/v3/certs",
    "XMC_AUTH_ISSUER": "https://accounts.google.com",
    "XMC_AUTH_AUDIENCE": "1234.apps.googleusercontent.com",
}


def test_the_jwks_settings_are_read_and_are_a_way_to_authenticate() -> None:
    auth = load_settings({**JWKS, "XMC_AUTH_JWKS_REFRESH_SECONDS": "600"}).auth
    assert auth.jwks_url == JWKS["XMC_AUTH_JWKS_URL"]
    assert auth.jwks_refresh_seconds == 600
    auth.require_verifier()
    loopback = {**JWKS, "XMC_AUTH_JWKS_URL": "http://127.0.0.1:5556/keys"}
    assert load_settings(loopback).auth.jwks_url == "http://127.0.0.1:5556/keys"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {**JWKS, "XMC_AUTH_JWKS_URL": "http://issuer.example.com/keys"},
            "XMC_AUTH_JWKS_URL: must be an https:// URL (http:// only on loopback), "
            "got 'http://issuer.example.com/keys'",
            id="plain http",
        ),
        pytest.param(
            {**JWKS, "XMC_AUTH_JWKS_URL": "issuer.example.com/keys"},
            "XMC_AUTH_JWKS_URL: must be an https:// URL",
            id="no scheme",
        ),
        pytest.param(
            {**JWKS, "XMC_AUTH_AUDIENCE": ""},
            "XMC_AUTH_AUDIENCE: required with XMC_AUTH_JWKS_URL",
            id="no audience",
        ),
        pytest.param(
            {**JWKS, "XMC_AUTH_ISSUER": ""},
            "XMC_AUTH_ISSUER: required with XMC_AUTH_JWKS_URL",
            id="no issuer",
        ),
        pytest.param(
            {**JWKS, "XMC_AUTH_JWKS_REFRESH_SECONDS": "5"},
            "XMC_AUTH_JWKS_REFRESH_SECONDS: must be between 60 and 86400 seconds, got 5.0",
            id="refresh too often",
        ),
        pytest.param(
            {**JWKS, "XMC_AUTH_JWKS_REFRESH_SECONDS": "hourly"},
            "XMC_AUTH_JWKS_REFRESH_SECONDS: expected seconds, got 'hourly'",
            id="refresh not a number",
        ),
    ],
)
def test_bad_jwks_settings_name_their_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        load_settings(env)


def test_jwks_and_a_fixed_public_key_are_exclusive(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    (tmp_path / "key.pem").write_bytes(pem)
    env = {**JWKS, "XMC_AUTH_PUBLIC_KEY_FILE": str(tmp_path / "key.pem")}
    with pytest.raises(InvalidArgumentError, match="XMC_AUTH_JWKS_URL: set it or"):
        load_settings(env)
