"""Conditions, owner references and label reads shared by the simulated controllers
(Job, JobSet, Kueue) — pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item  # type: ignore[no-any-return]
    return None


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    found = condition(obj, type_)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """metav1.Condition semantics: ``lastTransitionTime`` moves only when status flips."""
    wanted = "True" if status else "False"
    result = [dict(c) for c in conditions]
    for item in result:
        if item.get("type") == type_:
            if item.get("status") != wanted:
                item["lastTransitionTime"] = now
            item.update(status=wanted, reason=reason, message=message)
            return result
    result.append(
        {
            "type": type_,
            "status": wanted,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
    )
    return result


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    return any(
        ref.get("uid") == owner_uid and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})
