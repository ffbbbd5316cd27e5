"""Deployment manifests agree with the code (pure: parses YAML/TOML, reads source text).

docker-compose.yml: commands are declared console scripts, XMC_* variables are ones the
code reads, ports agree with the listen settings, depends_on is well-formed.
k8s/base: every object is well-formed, Deployments carry resources and probes on real
ports, RBAC grants each ServiceAccount exactly what its service calls, ConfigMap/Secret
keys are known variables, and the kustomization lists every file.
k8s/overlays/external-access: renders (``kubectl kustomize``), its Ingresses route to
Services and ports the base ships, over TLS, and its settings are ones the code reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.contract import setup as contract_setup
from xmc.kube import WORKLOADS
from xmc.priority_classes import PRIORITY_CLASS_DESCRIPTIONS, PRIORITY_CLASS_VALUES
from xmc.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
K8S_BASE = ROOT / "k8s" / "base"
EXTERNAL_ACCESS = ROOT / "k8s" / "overlays" / "external-access"
ENV_SOURCES = (
    "libs/xmc/settings.py",
    "libs/xmc/auth_settings.py",
    "libs/xmc/local_run_settings.py",
    "libs/xmc/quota_settings.py",
)

Obj = dict[str, Any]

#: (apiGroup, resource, verb) each service's ServiceAccount needs, from the calls in
#: services/actuator/kube.py, services/reconciler/{watch,app,leader,log_capture}.py and
#: services/ess/live_logs.py and queues.py.
ACTUATOR_NEEDS = {
    ("jobset.x-k8s.io", "jobsets", v) for v in ("get", "create", "delete", "patch")
} | {
    ("kueue.x-k8s.io", "workloads", "list")  # a Restart waits for the old Workload (0032)
}
RECONCILER_NEEDS = (
    {("jobset.x-k8s.io", "jobsets", v) for v in ("get", "list", "watch", "patch", "delete")}
    | {("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch")}
    | {("", "pods", v) for v in ("get", "list", "watch")}
    | {("", "pods/log", "get")}
    | {("batch", "jobs", "get")}
    | {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    | {("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")}
)
#: The ESS only reads: a live execution's pods and their logs (services/ess/live_logs.py),
#: and Kueue's queues, Workloads and pending positions (services/ess/queues.py).
ESS_NEEDS = (
    {("", "pods", "get"), ("", "pods", "list"), ("", "pods/log", "get")}
    | {("kueue.x-k8s.io", r, v) for r in ("clusterqueues", "localqueues", "workloads")
       for v in ("get", "list")}
    | {("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")}
)  # fmt: skip
#: Kinds without a namespace among those k8s/ ships.
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "WorkloadPriorityClass",
    "ResourceFlavor",
    "ClusterQueue",
}
EXPECTED_GRANTS = {
    ("xmc", "xmc-actuator"): ACTUATOR_NEEDS,
    ("xmc", "xmc-reconciler"): RECONCILER_NEEDS,
    ("xmc", "xmc-ess"): ESS_NEEDS,
}


# --- helpers ---------------------------------------------------------------------------


def known_env_vars() -> set[str]:
    names: set[str] = set()
    for source in ENV_SOURCES:
        names.update(re.findall(r'"(XMC_[A-Z0-9_]+)"', (ROOT / source).read_text()))
    return names


def console_scripts() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    return set(project["scripts"])


def compose() -> Obj:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def compose_services() -> dict[str, Obj]:
    services = compose()["services"]
    assert isinstance(services, dict)
    return services


def command_words(service: Obj) -> list[str]:
    command = service.get("command")
    if command is None:
        return []
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    if words[:2] == ["sh", "-c"]:
        words = " ".join(words[2:]).split()
    return words


def env_of(service: Obj) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    assert isinstance(env, dict)
    return {str(k): str(v) for k, v in env.items()}


def port_of(listen: str) -> int:
    return int(listen.rpartition(":")[2])


def flag_value(words: list[str], flag: str) -> str | None:
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def published_container_ports(service: Obj) -> set[int]:
    ports: set[int] = set()
    for entry in service.get("ports") or []:
        text = str(entry["target"]) if isinstance(entry, dict) else str(entry)
        ports.add(int(text.rsplit(":", 1)[-1].split("/")[0]))
    return ports


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S_BASE.iterdir() if p.suffix in {".yaml", ".yml"})


def k8s_objects() -> Iterator[Obj]:
    for path in k8s_files():
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                assert isinstance(doc, dict), path
                yield doc


def of_kind(kind: str) -> list[Obj]:
    return [o for o in k8s_objects() if o.get("kind") == kind]


def containers(deployment: Obj) -> list[Obj]:
    found = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(found, list)
    return found


# --- compose -----------------------------------------------------------------------------


def test_compose_services_run_declared_console_scripts() -> None:
    scripts = console_scripts()
    for name, service in compose_services().items():
        assert "image" in service or "build" in service, name
        words = command_words(service)
        if "build" not in service:
            continue  # third-party image (postgres, redis)
        assert words, f"{name}: a service built from the Dockerfile must name its command"
        invoked = [w for w in words if w.startswith("xmc")]
        assert invoked, f"{name}: no xmc console script in {words}"
        for word in invoked:
            assert word in scripts, f"{name}: {word} is not in [project.scripts]"


def test_compose_env_vars_are_read_by_the_code() -> None:
    known = known_env_vars()
    assert {"XMC_DATABASE_URL", "XMC_AUTH_DISABLED", "XMC_SERVICE_TOKEN"} <= known
    for name, service in compose_services().items():
        for var in env_of(service):
            if var.startswith("XMC_"):
                assert var in known, f"{name}: {var} is read by no code"


def test_compose_signing_key_is_long_enough() -> None:
    for name, service in compose_services().items():
        key = env_of(service).get("XMC_TASK_SIGNING_KEY")
        if key is not None:
            assert len(key.encode()) >= 32, name


def test_compose_leaves_the_hosts_postgres_and_redis_ports_alone() -> None:
    """``make run`` and the tests use the host's 5432 and 6379; a compose stack publishing
    its own there could not start beside them (or would shadow them)."""
    services = compose_services()
    for name in ("postgres", "redis"):
        assert not services[name].get("ports"), name


def test_compose_ports_agree_with_listen_settings() -> None:
    services = compose_services()
    ess_env = env_of(services["ess"])
    ess_port = port_of(ess_env["XMC_ESS_LISTEN"])
    assert ess_env["XMC_ESS_LISTEN"].startswith("0.0.0.0:")
    assert ess_port in published_container_ports(services["ess"])

    kubesim_words = command_words(services["kubesim"])
    kubesim_port = flag_value(kubesim_words, "--port")
    assert kubesim_port is not None
    assert flag_value(kubesim_words, "--host") == "0.0.0.0"
    assert str(services["kubesim"]["healthcheck"]["test"]).find(f":{kubesim_port}/healthz") >= 0

    for name, service in services.items():
        env = env_of(service)
        if "XMC_ESS_TARGET" in env:
            host, _, port = env["XMC_ESS_TARGET"].rpartition(":")
            assert host == "ess", name
            assert int(port) == ess_port, name
        if "XMC_KUBE_URL" in env:
            assert env["XMC_KUBE_URL"] == f"http://kubesim:{kubesim_port}", name
        if env.get("XMC_METRICS_LISTEN"):
            assert port_of(env["XMC_METRICS_LISTEN"]) in published_container_ports(service), name


def test_compose_depends_on_healthy_targets() -> None:
    services = compose_services()
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: use the long depends_on form"
        for target, spec in depends.items():
            assert target in services, f"{name} depends on unknown {target}"
            if "healthcheck" in services[target]:
                assert spec.get("condition") == "service_healthy", f"{name} -> {target}"


def test_compose_images_with_healthchecks() -> None:
    services = compose_services()
    for name in ("postgres", "redis", "kubesim", "ess"):
        assert "healthcheck" in services[name], name


# --- k8s -------------------------------------------------------------------------------


def test_base_ships_exactly_the_priority_classes_the_actuator_labels_with() -> None:
    """A JobSet labelled with a class that does not exist stays suspended: k8s/base must
    create every one of the nine, with the values the code documents."""
    shipped = {obj["metadata"]["name"]: obj["value"] for obj in of_kind("WorkloadPriorityClass")}
    assert shipped == dict(PRIORITY_CLASS_VALUES)
    described = {o["metadata"]["name"]: o["description"] for o in of_kind("WorkloadPriorityClass")}
    assert described == dict(PRIORITY_CLASS_DESCRIPTIONS)


def test_the_contract_suite_applies_the_same_priority_classes_as_the_base() -> None:
    """`python -m tests.contract.setup | kubectl apply -f -` runs on clusters where
    k8s/base is deployed (make test-cluster): objects of the same name that differed in
    any field would be rewritten by whichever was applied last."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    labels = {k: v for entry in kustomization["labels"] for k, v in entry["pairs"].items()}
    base = []
    for obj in of_kind("WorkloadPriorityClass"):
        base.append({**obj, "metadata": {**obj["metadata"], "labels": labels}})
    contract = [o for o in contract_setup.cluster_objects() if o["kind"] == "WorkloadPriorityClass"]
    by_name = {o["metadata"]["name"]: o for o in contract}
    assert by_name == {o["metadata"]["name"]: o for o in base}
    assert {obj["apiVersion"] for obj in of_kind("WorkloadPriorityClass")} == {
        f"kueue.x-k8s.io/{WORKLOADS.version}"
    }


def test_kustomization_lists_every_file() -> None:
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    files = {p.name for p in k8s_files()} - {"kustomization.yaml"}
    assert listed == files


def test_every_manifest_is_well_formed() -> None:
    objects = list(k8s_objects())
    assert objects
    for obj in objects:
        assert obj.get("apiVersion"), obj
        assert obj.get("kind"), obj
        assert (obj.get("metadata") or {}).get("name"), obj
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _probe_port(probe: Obj) -> int | str | None:
    for handler in ("grpc", "httpGet", "tcpSocket"):
        if handler in probe:
            port = probe[handler]["port"]
            assert isinstance(port, int | str)
            return port
    return None


def test_deployments_have_resources_and_probes_on_real_ports() -> None:
    deployments = of_kind("Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {
        "xmc-ess",
        "xmc-actuator",
        "xmc-reconciler",
        "xmc-ui",
    }
    scripts = console_scripts()
    for deployment in deployments:
        for container in containers(deployment):
            where = f"{deployment['metadata']['name']}/{container['name']}"
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(part) or {}), where
            command = container.get("command") or container.get("args") or []
            assert command, where
            assert command[0] in scripts, where
            ports = container.get("ports") or []
            names = {p["name"] for p in ports if "name" in p}
            numbers = {p["containerPort"] for p in ports}
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if kind in container:
                    port = _probe_port(container[kind])
                    assert port is not None, f"{where} {kind}: no handler"
                    assert port in names or port in numbers, f"{where} {kind}: port {port}"


def test_every_deployment_probes_healthz_and_readyz_on_its_metrics_port() -> None:
    for deployment in of_kind("Deployment"):
        (container,) = containers(deployment)
        where = deployment["metadata"]["name"]
        for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            probe = container[kind]["httpGet"]
            assert (probe["path"], probe["port"]) == (path, "metrics"), f"{where} {kind}"
        assert {"name": "metrics", "containerPort": 9090} in container["ports"], where


def test_ess_has_a_grpc_startup_probe_and_enough_replicas() -> None:
    (ess,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "xmc-ess"]
    assert ess["spec"]["replicas"] >= 2
    (container,) = containers(ess)
    assert container["startupProbe"]["grpc"]["port"] == 50051
    assert 50051 in {p["containerPort"] for p in container["ports"]}
    (reconciler,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "xmc-reconciler"]
    assert reconciler["spec"]["replicas"] == 2
    assert "--no-leader-election" not in containers(reconciler)[0].get("args", [])


def test_ess_waits_for_its_endpoints_to_drop_it_before_it_stops_listening() -> None:
    """Decision 0055: a preStop pause shorter than the pod's grace period."""
    (ess,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "xmc-ess"]
    (container,) = containers(ess)
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    assert ess["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30) > 5 + 10


def test_compose_services_check_readyz() -> None:
    services = compose_services()
    for name in ("ess", "actuator", "reconciler", "ui"):
        check = " ".join(services[name]["healthcheck"]["test"])
        assert "/readyz" in check, name
        assert "XMC_METRICS_LISTEN" in services[name]["environment"], name


def test_ui_listens_where_compose_and_k8s_publish_it() -> None:
    ui = compose_services()["ui"]
    assert port_of(env_of(ui)["XMC_UI_LISTEN"]) in published_container_ports(ui)
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "xmc-ui"]
    (container,) = containers(deployment)
    listen = {e["name"]: e["value"] for e in container["env"]}["XMC_UI_LISTEN"]
    assert {"name": "http", "containerPort": port_of(listen)} in container["ports"]
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "xmc-ui"]
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http", "metrics"}


def test_ess_service_exposes_grpc_and_metrics() -> None:
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "xmc-ess"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports.get("grpc") == 50051
    assert "metrics" in ports


def test_config_and_secret_keys_are_known_variables() -> None:
    known = known_env_vars()
    config_maps = of_kind("ConfigMap")
    secrets = of_kind("Secret")
    assert config_maps
    assert secrets
    for obj in config_maps + secrets:
        data = {**(obj.get("data") or {}), **(obj.get("stringData") or {})}
        for key in data:
            assert key in known, f"{obj['metadata']['name']}: {key}"
    secret_keys = {k for s in secrets for k in (s.get("stringData") or s.get("data") or {})}
    assert {"XMC_TASK_SIGNING_KEY", "XMC_AUTH_HS256_SECRET", "XMC_SERVICE_TOKEN"} <= secret_keys
    for config_map in config_maps:
        assert not secret_keys & set(config_map.get("data") or {}), "secret in a ConfigMap"


def test_deployment_env_names_known_variables() -> None:
    known = known_env_vars()
    for deployment in of_kind("Deployment"):
        for container in containers(deployment):
            for entry in container.get("env") or []:
                if entry["name"].startswith("XMC_"):
                    assert entry["name"] in known, entry["name"]


def _grants(rules: list[Obj]) -> set[tuple[str, str, str]]:
    granted: set[tuple[str, str, str]] = set()
    for rule in rules:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    granted.add((group, resource, verb))
    return granted


def granted_by_service_account() -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    roles = {
        ("Role", r["metadata"]["namespace"], r["metadata"]["name"]): r for r in of_kind("Role")
    }
    roles.update({("ClusterRole", "", r["metadata"]["name"]): r for r in of_kind("ClusterRole")})
    result: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for binding in of_kind("RoleBinding") + of_kind("ClusterRoleBinding"):
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], namespace, ref["name"]))
        assert role is not None, f"{binding['metadata']['name']}: unknown role {ref['name']}"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            key = (subject["namespace"], subject["name"])
            result.setdefault(key, set()).update(_grants(role["rules"]))
    return result


def test_rbac_grants_what_each_service_calls_and_no_more() -> None:
    granted = granted_by_service_account()
    for account, needs in EXPECTED_GRANTS.items():
        have = granted.get(account, set())
        assert needs <= have, f"{account} lacks {sorted(needs - have)}"
        assert have <= needs, f"{account} has more than it calls: {sorted(have - needs)}"
        assert not any("*" in part for grant in have for part in grant), account
    assert ("xmc", "xmc-ui") not in granted, "the dashboard makes no Kubernetes calls"


def test_deployments_use_their_service_accounts() -> None:
    accounts = {
        (a["metadata"]["namespace"], a["metadata"]["name"]) for a in of_kind("ServiceAccount")
    }
    for deployment in of_kind("Deployment"):
        name = deployment["metadata"]["name"]
        spec = deployment["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == name
        assert (deployment["metadata"]["namespace"], name) in accounts


def test_every_deployment_has_a_pod_disruption_budget() -> None:
    budgets = {
        tuple(sorted(p["spec"]["selector"]["matchLabels"].items()))
        for p in of_kind("PodDisruptionBudget")
    }
    for deployment in of_kind("Deployment"):
        labels = tuple(sorted(deployment["spec"]["selector"]["matchLabels"].items()))
        assert labels in budgets, deployment["metadata"]["name"]


@pytest.mark.parametrize("path", ["docker-compose.yml", "Dockerfile", ".dockerignore"])
def test_deploy_files_exist(path: str) -> None:
    assert (ROOT / path).is_file()


def test_dockerfile_runs_as_non_root_and_installs_the_project() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert "pip install ." in text
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users
    assert not users[-1].startswith(("root", "0"))


# --- k8s/overlays/external-access ------------------------------------------------------


def rendered(overlay: Path) -> list[Obj]:
    """The overlay as ``kubectl kustomize`` builds it (what ``kubectl apply -k`` applies)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    built = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def test_external_access_routes_to_services_and_ports_the_base_ships() -> None:
    objects = rendered(EXTERNAL_ACCESS)
    services = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] == "Service"
    }
    ingresses = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Ingress"}
    assert set(ingresses) == {"xmc-ess-grpc", "xmc-ui"}
    routed = set()
    for name, ingress in ingresses.items():
        spec = ingress["spec"]
        tls_hosts = {host for entry in spec["tls"] for host in entry["hosts"]}
        assert all(entry.get("secretName") for entry in spec["tls"]), name
        for rule in spec["rules"]:
            assert rule["host"] in tls_hosts, f"{name}: {rule['host']} is served without TLS"
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                service = services.get((ingress["metadata"]["namespace"], backend["name"]))
                assert service is not None, f"{name}: no Service {backend['name']}"
                port = backend["port"]
                ports = service["spec"]["ports"]
                assert any(
                    p["name"] == port.get("name") or p["port"] == port.get("number") for p in ports
                ), f"{name}: {backend['name']} has no port {port}"
                routed.add((backend["name"], port.get("name") or port.get("number")))
    assert routed == {("xmc-ess", "grpc"), ("xmc-ui", "http")}
    grpc_annotations = ingresses["xmc-ess-grpc"]["metadata"]["annotations"]
    assert grpc_annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    # The ESS takes 16 MiB requests; nginx's default would cut them at 1 MiB.
    assert grpc_annotations["nginx.ingress.kubernetes.io/proxy-body-size"] == "16m"
    (grpc_host,) = [r["host"] for r in ingresses["xmc-ess-grpc"]["spec"]["rules"]]
    assert grpc_host.startswith("grpc."), "the published client expects grpc.<domain>"
    ui_annotations = ingresses["xmc-ui"]["metadata"]["annotations"]
    assert "nginx.ingress.kubernetes.io/auth-url" in ui_annotations, "the dashboard needs auth"


def test_external_access_configures_oidc_with_settings_the_code_reads() -> None:
    objects = rendered(EXTERNAL_ACCESS)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    data = config["data"]
    assert set(data) <= known_env_vars()
    assert data["XMC_AUTH_JWKS_URL"].startswith("https://")
    assert data["XMC_AUTH_ISSUER"]
    assert data["XMC_AUTH_AUDIENCE"]
    auth = load_settings(data).auth  # the ESS would start with them
    assert auth.jwks_url == data["XMC_AUTH_JWKS_URL"]
    # Everything the base ships is still there (the overlay adds, it does not replace).
    base_kinds = sorted((o["kind"], o["metadata"]["name"]) for o in k8s_objects())
    overlay_kinds = sorted(
        (o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] != "Ingress"
    )
    assert overlay_kinds == base_kinds
