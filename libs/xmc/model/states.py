"""State enums and state sets of the contract (SPEC §3).

The numbers are the wire contract's, so these plain-Python enums can be converted to and
from the generated protobuf enums by value; the deciders in this package stay free of
protobuf imports.
"""

import enum


class WorkUnitState(enum.IntEnum):
    """`WorkUnitStatus.WorkUnitState` (SPEC §3.1)."""

    WORK_UNIT_STATE_UNSPECIFIED = 0
    INITIALIZING = 1
    SCHEDULING = 2
    STARTING = 3
    RUNNING = 4
    PARTIALLY_FAILED = 5
    STOPPING = 6
    RESTARTING = 7
    STOPPED = 8
    DESCHEDULING = 9
    COMPLETED = 10
    FAILED = 11
    SCHEDULING_PAUSED = 12


EXECUTION_TERMINAL_STATES: frozenset[WorkUnitState] = frozenset(
    {WorkUnitState.STOPPED, WorkUnitState.COMPLETED, WorkUnitState.FAILED}
)
"""A terminal execution never changes state again."""

CLUSTER_OBSERVED_STATES: frozenset[WorkUnitState] = frozenset(
    {
        WorkUnitState.SCHEDULING,
        WorkUnitState.DESCHEDULING,
        WorkUnitState.STARTING,
        WorkUnitState.RUNNING,
        WorkUnitState.PARTIALLY_FAILED,
    }
)
"""States the Reconciler derives from the JobSet; they may move among each other."""

WORK_UNIT_STATUS_RETAINING_STATES: frozenset[WorkUnitState] = frozenset(
    {WorkUnitState.STOPPED, WorkUnitState.FAILED}
)
"""`WorkUnitStatusRetainingStates`: entering them keeps the previous status messages."""

WORK_UNIT_TIME_IGNORED_STATES: frozenset[WorkUnitState] = frozenset({WorkUnitState.STOPPING})
"""`WorkUnitTimeIgnoredStates`: a user's stop must not lose to a reconciler clock running ahead."""


class Severity(enum.IntEnum):
    """`StructuredMessage.severity`; larger is worse, so comparisons order messages."""

    SEVERITY_UNSPECIFIED = 0
    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    FATAL = 50


class LaunchState(enum.IntEnum):
    """Experiment `launch_state`: whether the client is still adding work units."""

    LAUNCH_STATE_UNSPECIFIED = 0
    LAUNCHING = 1
    COMPLETED = 2
    FAILED = 3


class ActiveState(enum.IntEnum):
    """Experiment `active_state`: whether anything of the experiment may still run."""

    ACTIVE_STATE_UNSPECIFIED = 0
    ACTIVE = 1
    INACTIVE = 2


class Priority(enum.IntEnum):
    """``cloud.xmanager.v1.Priority`` of experiments and work units."""

    PRIORITY_UNSPECIFIED = 0
    LOW = 1
    NORMAL = 2
    HIGH = 3
