"""A pod's containers and volumes as Kubernetes writes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from actuator.manifest.resources import resources_spec
from xmc.model.work_unit_spec import rendered_args
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    ConfigMapVolumeSource,
    ContainerPort,
    EnvVar,
    ExecutableSpec,
    SecretVolumeSource,
    Volume,
    VolumeMount,
)

GCSFUSE_DRIVER: Final = "gcsfuse.csi.storage.gke.io"

_PROTOCOLS: Final[Mapping[int, str]] = {
    ContainerPort.TCP: "TCP",
    ContainerPort.UDP: "UDP",
    ContainerPort.SCTP: "SCTP",
}


def container_spec(spec: ExecutableSpec, *, default_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name or default_name, "image": spec.docker_image}
    if spec.command:
        out["command"] = list(spec.command)
    args = list(rendered_args(spec))
    if args:
        out["args"] = args
    env = [{"name": key, "value": spec.env_vars[key]} for key in sorted(spec.env_vars)]
    env.extend(_env_var(var) for var in spec.env)
    if env:
        out["env"] = env
    if spec.ports:
        out["ports"] = [_port(p) for p in spec.ports]
    if spec.volume_mounts:
        out["volumeMounts"] = [_volume_mount(m) for m in spec.volume_mounts]
    if spec.HasField("resources") and (resources := resources_spec(spec.resources)):
        out["resources"] = resources
    if spec.HasField("privileged"):
        out["securityContext"] = {"privileged": spec.privileged}
    if spec.HasField("restart_policy"):
        out["restartPolicy"] = spec.restart_policy
    return out


def _env_var(var: EnvVar) -> dict[str, Any]:
    out: dict[str, Any] = {"name": var.name}
    source = var.WhichOneof("source")
    if source == "value":
        out["value"] = var.value
    elif source == "value_from":
        ref = var.value_from
        kind = ref.WhichOneof("reference")
        if kind == "field_ref":
            field_ref = {"fieldPath": ref.field_ref.field_path}
            if ref.field_ref.api_version:
                field_ref["apiVersion"] = ref.field_ref.api_version
            out["valueFrom"] = {"fieldRef": field_ref}
        elif kind == "secret_key_ref":
            secret: dict[str, Any] = {
                "name": ref.secret_key_ref.name,
                "key": ref.secret_key_ref.key,
            }
            if ref.secret_key_ref.HasField("optional"):
                secret["optional"] = ref.secret_key_ref.optional
            out["valueFrom"] = {"secretKeyRef": secret}
    return out


def _port(port: ContainerPort) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if port.name:
        out["name"] = port.name
    out["containerPort"] = port.container_port
    if port.protocol in _PROTOCOLS:
        out["protocol"] = _PROTOCOLS[port.protocol]
    if port.host_port:
        out["hostPort"] = port.host_port
    return out


def _volume_mount(mount: VolumeMount) -> dict[str, Any]:
    out: dict[str, Any] = {"name": mount.name, "mountPath": mount.mount_path}
    if mount.HasField("read_only"):
        out["readOnly"] = mount.read_only
    if mount.sub_path:
        out["subPath"] = mount.sub_path
    return out


def volume_spec(volume: Volume) -> dict[str, Any]:
    out: dict[str, Any] = {"name": volume.name}
    source = volume.WhichOneof("source")
    if source == "persistent_volume_claim":
        pvc = volume.persistent_volume_claim
        claim: dict[str, Any] = {"claimName": pvc.claim_name}
        if pvc.HasField("read_only"):
            claim["readOnly"] = pvc.read_only
        out["persistentVolumeClaim"] = claim
    elif source == "gcs":
        out["csi"] = _gcs(volume)
    elif source == "host_path":
        host_path = {"path": volume.host_path.path}
        if volume.host_path.type:
            host_path["type"] = volume.host_path.type
        out["hostPath"] = host_path
    elif source == "empty_dir":
        empty_dir: dict[str, Any] = {}
        if volume.empty_dir.medium:
            empty_dir["medium"] = volume.empty_dir.medium
        if volume.empty_dir.size_limit_bytes:
            empty_dir["sizeLimit"] = str(volume.empty_dir.size_limit_bytes)
        out["emptyDir"] = empty_dir
    elif source == "secret":
        secret = volume.secret
        out["secret"] = {"secretName": secret.secret_name, **_mode_and_optional(secret)}
    elif source == "config_map":
        config_map = volume.config_map
        out["configMap"] = {"name": config_map.name, **_mode_and_optional(config_map)}
    elif source == "nfs":
        nfs: dict[str, Any] = {"server": volume.nfs.server, "path": volume.nfs.path}
        if volume.nfs.HasField("read_only"):
            nfs["readOnly"] = volume.nfs.read_only
        out["nfs"] = nfs
    return out


def _gcs(volume: Volume) -> dict[str, Any]:
    gcs = volume.gcs
    attributes = {"bucketName": gcs.bucket}
    if gcs.mount_options:
        # The gcsfuse CSI driver takes its mount options as one comma-separated attribute.
        attributes["mountOptions"] = ",".join(gcs.mount_options)
    csi: dict[str, Any] = {"driver": GCSFUSE_DRIVER}
    if gcs.HasField("read_only"):
        csi["readOnly"] = gcs.read_only
    csi["volumeAttributes"] = attributes
    return csi


def _mode_and_optional(source: SecretVolumeSource | ConfigMapVolumeSource) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if source.HasField("default_mode"):
        out["defaultMode"] = source.default_mode
    if source.HasField("optional"):
        out["optional"] = source.optional
    return out
