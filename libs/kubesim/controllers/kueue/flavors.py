"""Flavor assignment — pure: whether a Workload's pod sets fit a ClusterQueue's free
quota, in which flavors, and if not, why (upstream ``flavorassigner``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal

from kubequantity import format_quantity

from .model import (
    ClusterQueueModel,
    FlavorFit,
    FlavorQuota,
    PodSetAssignment,
    QueuedWorkload,
    Usage,
)
from .vocabulary import WaitReason


def _shortfall(
    resource: str, flavor: FlavorQuota, own: Decimal, used: Decimal, request: Decimal
) -> tuple[str, bool] | None:
    """Why ``request`` (after this workload's earlier pod sets, ``own``) does not fit in
    ``flavor`` where others use ``used``, and whether it exceeds the quota outright;
    None when it fits (upstream ``fitsResourceQuota``, no cohort: capacity = nominal)."""
    nominal = flavor.nominal.get(resource, Decimal(0))
    wanted = own + request
    if wanted > nominal:
        return (
            f"insufficient quota for {resource} in flavor {flavor.name}, previously considered "
            f"podsets requests ({format_quantity(own, resource)}) + current podset request "
            f"({format_quantity(request, resource)}) > maximum capacity "
            f"({format_quantity(nominal, resource)})",
            True,
        )
    missing = wanted - (nominal - used)
    if missing > 0:
        return (
            f"insufficient unused quota for {resource} in flavor {flavor.name}, "
            f"{format_quantity(missing, resource)} more needed",
            False,
        )
    return None


_SEVERITY = (WaitReason.WAITING_FOR_QUOTA, WaitReason.EXCEEDS_MAX_QUOTA)


def assign_flavors(
    cq: ClusterQueueModel, workload: QueuedWorkload, usage: Mapping[tuple[str, str], Decimal]
) -> FlavorFit:
    """Kueue's flavor assignment, reduced: per pod set and resource group, the first
    flavor whose free nominal quota covers the pod set's total request. A group none of
    whose flavors could ever hold the request is ``ExceedsMaxQuota``; otherwise the
    workload waits for quota (upstream ``resolveNoFitReason``)."""
    own: Usage = defaultdict(Decimal)
    assignments = []
    for pod_set in workload.pod_sets:
        total = pod_set.total()
        flavors: dict[str, str] = {}
        uncovered = sorted(r for r in total if not any(r in g.covered for g in cq.groups))
        if uncovered:
            return FlavorFit(
                None,
                f"couldn't assign flavors to pod set {pod_set.name}: resource {uncovered[0]} "
                "unavailable in ClusterQueue",
                WaitReason.NO_MATCHING_FLAVOR,
            )
        for group in cq.groups:
            wanted = sorted(r for r in total if r in group.covered)
            if not wanted:
                continue
            reasons: list[str] = []
            exceeds_everywhere = bool(group.flavors)
            for flavor in group.flavors:
                short = [
                    found
                    for r in wanted
                    if (
                        found := _shortfall(
                            r,
                            flavor,
                            own[(flavor.name, r)],
                            Decimal(usage.get((flavor.name, r), 0)),
                            total[r],
                        )
                    )
                ]
                if not short:
                    flavors.update({r: flavor.name for r in wanted})
                    break
                reasons += [message for message, _ in short]
                exceeds_everywhere = exceeds_everywhere and any(e for _, e in short)
            else:
                detail = ", ".join(reasons) or "no flavors in ClusterQueue"
                why = (
                    _SEVERITY[exceeds_everywhere]
                    if group.flavors
                    else WaitReason.NO_MATCHING_FLAVOR
                )
                return FlavorFit(
                    None, f"couldn't assign flavors to pod set {pod_set.name}: {detail}", why
                )
        assignment = PodSetAssignment(pod_set.name, flavors, total, pod_set.count)
        for resource, quantity in total.items():
            own[(flavors[resource], resource)] += quantity
        assignments.append(assignment)
    return FlavorFit(tuple(assignments))
