"""The API resources kubesim serves, with the facts the API server needs about each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    """API group; "" is the core group (``/api/v1``)."""
    version: str
    """The version objects are stored and returned in."""
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    """Whether ``/status`` exists: then spec writes never change status and vice versa."""
    served_versions: tuple[str, ...] = ()
    """Every version served (the stored one included); objects are identical across them."""
    short_names: tuple[str, ...] = ()
    """As upstream's discovery lists them (kubectl resolves ``kubectl get cq`` with them):
    kubernetes' built-in REST storage ``ShortNames()`` and the CRDs' ``names.shortNames``
    (kueue v0.19 and main; JobSet's CRD declares none)."""
    log_subresource: bool = False
    """Whether ``/log`` exists (pods: ``api/pod_logs.py``)."""

    @property
    def key(self) -> str:
        """Stable identity independent of version, e.g. ``jobsets.jobset.x-k8s.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def versions(self) -> tuple[str, ...]:
        return self.served_versions or (self.version,)

    def api_version(self, version: str | None = None) -> str:
        version = version or self.version
        return f"{self.group}/{version}" if self.group else version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


POD = Resource(
    "",
    "v1",
    "pods",
    "Pod",
    True,
    status_subresource=True,
    log_subresource=True,
    short_names=("po",),
)
NAMESPACE = Resource(
    "", "v1", "namespaces", "Namespace", False, status_subresource=True, short_names=("ns",)
)
EVENT = Resource("", "v1", "events", "Event", True, short_names=("ev",))
JOB = Resource("batch", "v1", "jobs", "Job", True, status_subresource=True)
JOBSET = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True, status_subresource=True)
_KUEUE_VERSIONS = ("v1beta2", "v1beta1")
WORKLOAD = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "workloads",
    "Workload",
    True,
    True,
    _KUEUE_VERSIONS,
    ("kwl", "kueueworkload", "kueueworkloads"),
)
CLUSTER_QUEUE = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "clusterqueues",
    "ClusterQueue",
    False,
    True,
    _KUEUE_VERSIONS,
    ("cq",),
)
LOCAL_QUEUE = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "localqueues",
    "LocalQueue",
    True,
    True,
    _KUEUE_VERSIONS,
    ("queue", "queues", "lq"),
)
RESOURCE_FLAVOR = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "resourceflavors",
    "ResourceFlavor",
    False,
    False,
    _KUEUE_VERSIONS,
    ("flavor", "flavors", "rf"),
)
WORKLOAD_PRIORITY_CLASS = Resource(
    "kueue.x-k8s.io",
    "v1beta2",
    "workloadpriorityclasses",
    "WorkloadPriorityClass",
    False,
    False,
    _KUEUE_VERSIONS,
    ("wpc",),
)
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)

RESOURCES: tuple[Resource, ...] = (
    POD,
    NAMESPACE,
    EVENT,
    JOB,
    JOBSET,
    WORKLOAD,
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    LEASE,
)


def find_resource(group: str, version: str, plural: str) -> Resource | None:
    """The resource served at ``/{group}/{version}/{plural}``, or None."""
    for resource in RESOURCES:
        if resource.group == group and resource.plural == plural and version in resource.versions:
            return resource
    return None
