"""The work-unit page's "JobSet manifest" section: pure, the stored manifest in, what the
template shows out (decision 0039)."""

from __future__ import annotations

from typing import Any

from ui.views import fmt_time
from xmc.model.manifest import manifest_yaml
from xmc.model.work_unit_spec import byte_size
from xmc_api.xmc.v1.spec_pb2 import ExecutionManifest


def manifest_view(eid: str, found: ExecutionManifest | None) -> dict[str, Any]:
    """``yaml`` to show (masked, escaped by the template), or a ``note`` saying why there
    is none."""
    view: dict[str, Any] = {"eid": eid, "yaml": "", "note": "", "recorded": "", "task": ""}
    if found is None:
        view["note"] = (
            f"No manifest stored for execution {eid}: its JobSet is not created yet, its "
            "create failed, or it was created before XMC kept manifests."
        )
        return view
    view.update(recorded=fmt_time(found.record_time), task=found.task_id)
    if found.omitted:
        view["note"] = (
            f"The manifest of execution {eid} ({byte_size(found.size_bytes)}) is larger than "
            f"the {byte_size(found.max_bytes)} XMC keeps; only its size was stored."
        )
    else:
        view["yaml"] = manifest_yaml(found.manifest_json)
    return view
