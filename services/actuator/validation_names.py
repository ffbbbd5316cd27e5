"""Kubernetes names, labels and annotations, as the API server validates them
(apimachinery's ``IsDNS1035Label``, ``IsDNS1123Label``, ``IsQualifiedName``,
``IsValidLabelValue``), and the JobSet's type and metadata: the naming half of
``actuator.validation``. Pure; every problem starts with its field path."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from xmc import labels
from xmc.kjson import as_mapping

DNS_1035_LABEL: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
MAX_LABEL: Final = 63
_MAX_SUBDOMAIN: Final = 253


def check_type(jobset: Mapping[str, Any]) -> list[str]:
    problems = []
    if jobset.get("apiVersion") != labels.JOBSET_API_VERSION:
        problems.append(f"apiVersion: must be {labels.JOBSET_API_VERSION}")
    if jobset.get("kind") != labels.JOBSET_KIND:
        problems.append(f"kind: must be {labels.JOBSET_KIND}")
    return problems


def check_metadata(metadata: Mapping[str, Any]) -> list[str]:
    problems = dns_label(metadata.get("name"), "metadata.name", DNS_1035_LABEL)
    problems += dns_label(metadata.get("namespace"), "metadata.namespace", DNS_1123_LABEL)
    jobset_labels = as_mapping(metadata.get("labels"))
    problems += check_labels(jobset_labels, "metadata.labels")
    problems += check_annotations(as_mapping(metadata.get("annotations")), "metadata.annotations")
    queue = jobset_labels.get(labels.QUEUE_NAME)
    if not queue:
        problems.append(
            f"metadata.labels[{labels.QUEUE_NAME}]: required; Kueue admits only queued JobSets"
        )
    elif problem := labels.queue_name_problem(str(queue)):
        problems.append(f"metadata.labels[{labels.QUEUE_NAME}]: {problem}")
    eid = jobset_labels.get(labels.EXECUTION_ID)
    if not (isinstance(eid, str) and eid.isascii() and eid.isdigit() and int(eid) > 0):
        problems.append(f"metadata.labels[{labels.EXECUTION_ID}]: must be a positive integer")
    return problems


def dns_label(value: object, where: str, pattern: re.Pattern[str]) -> list[str]:
    if not isinstance(value, str) or not value:
        return [f"{where}: required"]
    if len(value) > MAX_LABEL or not pattern.match(value):
        kind = "DNS-1035" if pattern is DNS_1035_LABEL else "DNS-1123"
        return [f"{where}: {value!r} is not a {kind} label of at most {MAX_LABEL} characters"]
    return []


def _qualified_name_problem(key: object) -> str | None:
    if not isinstance(key, str):
        return "is not a string"
    prefix, _, name = key.rpartition("/")
    if "/" in key and (
        not prefix or len(prefix) > _MAX_SUBDOMAIN or not _DNS_1123_SUBDOMAIN.match(prefix)
    ):
        return "prefix is not a DNS-1123 subdomain"
    if not name or len(name) > MAX_LABEL or not _LABEL_NAME.match(name):
        return f"name must be 1-{MAX_LABEL} alphanumerics, '-', '_' or '.'"
    return None


def check_labels(values: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    for key, value in values.items():
        if (problem := _qualified_name_problem(key)) is not None:
            problems.append(f"{where}[{key}]: key {problem}")
        if not isinstance(value, str) or (
            value and (len(value) > MAX_LABEL or not _LABEL_NAME.match(value))
        ):
            problems.append(
                f"{where}[{key}]: value {value!r} is not a label value "
                f"(at most {MAX_LABEL} alphanumerics, '-', '_' or '.')"
            )
    return problems


def check_annotations(values: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    for key, value in values.items():
        if (problem := _qualified_name_problem(key)) is not None:
            problems.append(f"{where}[{key}]: key {problem}")
        if not isinstance(value, str):
            problems.append(f"{where}[{key}]: value must be a string")
    return problems
