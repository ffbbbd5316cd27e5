"""The JobSet manifest as the Actuator created it (issue 27; docs/decisions/0039).

Two pure steps around the stored copy:

- :func:`keep_manifest`: what the Actuator records when it settles the task that created
  a JobSet — the object as compact JSON in the builder's key order, with its size, or, past
  :data:`MAX_MANIFEST_BYTES`, the size alone. A JobSet that large is already near what an
  API server takes (kube-apiserver refuses request bodies over 3 MiB, etcd values over
  1.5 MiB), and every created execution keeps one: the bound keeps a sweep's rows small
  without ever storing half a document.
- :func:`manifest_yaml`: how the work-unit page shows a stored one, with the same rule
  as the spec view (:mod:`xmc.model.work_unit_spec`) for credentials: a literal env value
  whose *name* says it is a credential is masked; a ``valueFrom`` reference is only a
  Secret's name and key, and is shown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from xmc.model.work_unit_spec import MASK, is_secret_name

#: The longest manifest JSON (UTF-8 bytes) kept; past it only its size is.
MAX_MANIFEST_BYTES: Final = 256 * 1024


@dataclass(frozen=True)
class KeptManifest:
    """What is stored of one execution's manifest: ``text`` is None when it was longer
    than :data:`MAX_MANIFEST_BYTES`."""

    text: str | None
    size_bytes: int


def keep_manifest(manifest: Mapping[str, Any], *, limit: int = MAX_MANIFEST_BYTES) -> KeptManifest:
    """The manifest as kept: compact JSON (non-ASCII as itself), key order preserved."""
    text = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode("utf-8"))
    return KeptManifest(text if size <= limit else None, size)


def masked(value: Any) -> Any:
    """``value`` with every credential-named literal in an ``env`` list masked."""
    if isinstance(value, Mapping):
        return {
            key: _masked_env(item) if key == "env" else masked(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [masked(item) for item in value]
    return value


def _masked_env(env: Any) -> Any:
    if not isinstance(env, list):
        return masked(env)
    return [_masked_var(var) for var in env]


def _masked_var(var: Any) -> Any:
    if not isinstance(var, Mapping):
        return masked(var)
    name, value = var.get("name"), var.get("value")
    if isinstance(name, str) and isinstance(value, str) and is_secret_name(name):
        return {**var, "value": MASK}
    return masked(var)


def manifest_yaml(manifest_json: str) -> str:
    """The stored JSON as YAML in ``kubectl get -o yaml``'s layout, keys in their stored
    order, credentials masked."""
    return yaml.safe_dump(
        masked(json.loads(manifest_json)),
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=120,
    )
