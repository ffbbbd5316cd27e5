"""``make run CLUSTER=real``: the setting, and each service's environment (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmc.devrun import check_real_cluster, service_env
from xmc.devrun_checks import local_endpoints
from xmc.errors import InvalidArgumentError
from xmc.local_run_settings import LocalRunSettings
from xmc.settings import Settings, UiSettings, load_settings

BASE = {
    "XMC_KUBE_URL": "http://127.0.0.1:8081",
    "KUBECONFIG": "/home/me/.kube/config",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "PATH": "/usr/bin",
}


def test_kubesim_is_the_default_and_only_kubesim_or_real_is_taken() -> None:
    assert load_settings({}).local_run.cluster == "kubesim"
    assert load_settings({"XMC_RUN_CLUSTER": "real"}).local_run.real_cluster
    with pytest.raises(InvalidArgumentError, match="XMC_RUN_CLUSTER"):
        load_settings({"XMC_RUN_CLUSTER": "kind"})


def test_on_kubesim_every_service_gets_the_environment_as_it_is() -> None:
    assert service_env(BASE, LocalRunSettings(), "actuator") is BASE


def test_on_the_real_cluster_each_kube_client_gets_its_own_kubeconfig(tmp_path: Path) -> None:
    run = LocalRunSettings(cluster="real", cluster_dir=str(tmp_path))
    for service in ("ess", "actuator", "reconciler"):
        env = service_env(BASE, run, service)
        assert env["KUBECONFIG"] == str(tmp_path / "xmc" / f"{service}.kubeconfig")
        assert env["XMC_KUBE_URL"] == ""  # the kubeconfig path, not a plain URL
        assert env["XMC_NAMESPACE"] == "xmc"  # where k8s/base grants the Roles
        assert "KUBERNETES_SERVICE_HOST" not in env  # not the in-cluster path
    assert "KUBECONFIG" not in service_env(BASE, run, "ui")


def test_the_real_cluster_needs_the_service_account_kubeconfigs(tmp_path: Path) -> None:
    run = LocalRunSettings(cluster="real", cluster_dir=str(tmp_path))
    problem = check_real_cluster(run)
    assert problem is not None
    assert "make run CLUSTER=real" in problem
    (tmp_path / "xmc").mkdir()
    for service in ("ess", "actuator", "reconciler"):
        (tmp_path / "xmc" / f"{service}.kubeconfig").write_text("{}")
    assert check_real_cluster(run) is None


def test_no_kubesim_port_is_checked_on_the_real_cluster() -> None:
    endpoints = local_endpoints(Settings(), LocalRunSettings(cluster="real"), UiSettings())
    assert not any("kubesim" in e.what for e in endpoints)
