"""kubesim's default priority classes are exactly the ones XMC's Actuator labels with:
kubesim keeps its own copy (it imports nothing of XMC), and this holds the two together."""

from __future__ import annotations

from kubesim.defaults import PRIORITY_LEVELS, XMC_PRIORITY_CLASSES, priority_class_name
from xmc import priority_classes


def test_kubesims_priority_classes_are_xmcs() -> None:
    assert dict(XMC_PRIORITY_CLASSES) == dict(priority_classes.PRIORITY_CLASS_VALUES)
    assert list(XMC_PRIORITY_CLASSES) == list(priority_classes.PRIORITY_CLASSES)
    assert PRIORITY_LEVELS == priority_classes.PRIORITY_LEVELS


def test_every_class_the_actuator_can_pick_exists_in_kubesim() -> None:
    for experiment in range(4):
        for work_unit in range(4):
            assert priority_classes.priority_class_name(experiment, work_unit) in (
                XMC_PRIORITY_CLASSES
            )
    assert priority_class_name("high", "low") == "xmc-priority-high-low"
