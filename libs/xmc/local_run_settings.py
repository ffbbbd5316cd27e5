"""``make run``'s settings group (SPEC §11): kubesim's side of a local run and which
cluster the services run against. Read with every other group by
:func:`xmc.settings.load_settings`; its own module as ``xmc.auth_settings`` and
``xmc.quota_settings`` are, so that ``xmc.settings`` stays one screenful per concern.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xmc.errors import InvalidArgumentError
from xmc.setting_values import Env, number, port


@dataclass(frozen=True)
class LocalRunSettings:
    """``make run`` (``xmc.devrun``): kubesim's side of a local run, and where it keeps its
    pidfile. The ESS address is the shared ``Settings.ess_listen``."""

    #: XMC_KUBESIM_PORT — kubesim's API port.
    kubesim_port: int = 8081
    #: XMC_KUBESIM_TIME_SCALE — simulated seconds per real second (pod run times, grace).
    time_scale: float = 1.0
    #: XMC_KUBESIM_CLOCK_OFFSET — kubesim's clock against the host's, as
    #: ``xmc-kubesim --clock-offset`` takes it (e.g. ``-5s``).
    clock_offset: str = "0s"
    #: XMC_KUBESIM_KUEUE_VERSION — whose Kueue defaults kubesim follows.
    kueue_version: str = "0.19"
    #: XMC_METRICS_BASE_PORT — /metrics of the ESS; +1 the Actuator, +2 the Reconciler.
    metrics_base: int = 9464
    #: XMC_RUN_DIR — where a running ``make run`` keeps its pidfile and kubesim its cluster.
    run_dir: str = ".run"
    #: XMC_RUN_CLUSTER — what the services run against: ``kubesim`` (started by ``make
    #: run``) or ``real``, the loopback cluster of ``make cluster`` (``make run
    #: CLUSTER=real``), as the ServiceAccounts of k8s/base (docs/cluster.md).
    cluster: str = "kubesim"
    #: XMC_RUN_CLUSTER_DIR — where ``make cluster`` keeps its state; with ``real`` the
    #: Actuator and Reconciler use ``<dir>/xmc/<service>.kubeconfig``.
    cluster_dir: str = ".cluster"

    @property
    def real_cluster(self) -> bool:
        return self.cluster == "real"

    def service_kubeconfig(self, service: str) -> Path:
        """The kubeconfig (ServiceAccount token) of ``service`` on the real cluster."""
        return Path(self.cluster_dir) / "xmc" / f"{service}.kubeconfig"

    @property
    def pidfile(self) -> Path:
        return Path(self.run_dir) / "xmc.pid"

    @classmethod
    def _from_env(cls, env: Env) -> LocalRunSettings:
        d = cls()
        return cls(
            kubesim_port=port(env, "XMC_KUBESIM_PORT", d.kubesim_port),
            time_scale=number(env, "XMC_KUBESIM_TIME_SCALE", d.time_scale),
            clock_offset=env.get("XMC_KUBESIM_CLOCK_OFFSET", d.clock_offset),
            kueue_version=env.get("XMC_KUBESIM_KUEUE_VERSION", d.kueue_version),
            metrics_base=port(env, "XMC_METRICS_BASE_PORT", d.metrics_base),
            run_dir=env.get("XMC_RUN_DIR", d.run_dir),
            cluster=_cluster(env.get("XMC_RUN_CLUSTER", d.cluster)),
            cluster_dir=env.get("XMC_RUN_CLUSTER_DIR", d.cluster_dir),
        )


def _cluster(value: str) -> str:
    cluster = value.strip().lower() or "kubesim"
    if cluster not in ("kubesim", "real"):
        raise InvalidArgumentError(f"XMC_RUN_CLUSTER: kubesim or real, got {value!r}")
    return cluster
