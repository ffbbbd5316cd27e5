"""Read-modify-write callbacks for ``ObjectStore.update`` shared by the controllers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]


def set_status(status: Obj) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj["status"] = status

    return mutate


def set_suspend(value: bool) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj.setdefault("spec", {})["suspend"] = value

    return mutate
