"""XMC's nine Kueue WorkloadPriorityClasses: experiment priority × work-unit priority.

One list shared by the Actuator (which labels JobSets with a class) and kubesim's defaults
(which create the classes), so the names can never drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

PRIORITY_LEVELS: Final = ("low", "normal", "high")
_WORDS: Final[Mapping[int, str]] = {1: "low", 2: "normal", 3: "high"}

#: The class names, lowest first.
PRIORITY_CLASSES: Final[tuple[str, ...]] = tuple(
    f"xmc-priority-{experiment}-{work_unit}"
    for experiment in PRIORITY_LEVELS
    for work_unit in PRIORITY_LEVELS
)

#: Name → value: 100 for low-low up to 900 for high-high. The experiment priority
#: dominates, so a high work unit never outranks a more important experiment.
PRIORITY_CLASS_VALUES: Final[Mapping[str, int]] = {
    name: 100 * (rank + 1) for rank, name in enumerate(PRIORITY_CLASSES)
}

#: Name → description, as k8s/base/priority-classes.yaml ships them. Anything else that
#: creates the classes on a cluster XMC is deployed to (the contract suite's setup) writes
#: the same objects, so neither undoes the other.
PRIORITY_CLASS_DESCRIPTIONS: Final[Mapping[str, str]] = {
    f"xmc-priority-{experiment}-{work_unit}": (
        f"XMC: a {work_unit}-priority work unit of a {experiment}-priority experiment"
    )
    for experiment in PRIORITY_LEVELS
    for work_unit in PRIORITY_LEVELS
}


def _word(priority: int) -> str:
    # UNSPECIFIED (and any value newer than this code) is scheduled like NORMAL.
    return _WORDS.get(priority, "normal")


def priority_class_name(experiment_priority: int, work_unit_priority: int) -> str:
    """The WorkloadPriorityClass of a work unit: one of :data:`PRIORITY_CLASSES`."""
    return f"xmc-priority-{_word(experiment_priority)}-{_word(work_unit_priority)}"
