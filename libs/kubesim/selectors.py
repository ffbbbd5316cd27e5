"""Label and field selectors, as the Kubernetes API server parses and applies them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.errors import bad_request

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_EQUALITY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str
    """One of ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!exists``."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside ``(...)``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(selector: str | None) -> tuple[Requirement, ...]:
    """Equality- and set-based requirements; a malformed selector is a 400."""
    requirements = []
    for part in _split(selector or ""):
        if match := _SET.match(part):
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(Requirement(match["key"], match["op"], values))
        elif match := _EQUALITY.match(part):
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], op, frozenset({match["value"] or ""})))
        elif match := _EXISTS.match(part):
            requirements.append(Requirement(match["key"], "!exists" if match["neg"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r}")
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}


def parse_field_selector(selector: str | None) -> tuple[tuple[str, str, str], ...]:
    """``metadata.name`` and ``metadata.namespace`` with ``=``, ``==`` or ``!=``."""
    result = []
    for part in _split(selector or ""):
        match = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not match or match[1] not in _FIELDS:
            raise bad_request(f"field label not supported: {part.strip()!r}")
        result.append((match[1], "!=" if match[2] == "!=" else "=", match[3]))
    return tuple(result)


def fields_match(requirements: tuple[tuple[str, str, str], ...], obj: Mapping[str, Any]) -> bool:
    for field, op, value in requirements:
        section, name = _FIELDS[field]
        actual = obj.get(section, {}).get(name, "")
        if (actual == value) != (op == "="):
            return False
    return True
