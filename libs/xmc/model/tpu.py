"""TPU slices as Kubernetes sees them: how many chips each pod of a slice requests.

Shared by the Actuator (the ``google.com/tpu`` request it writes) and accounting
(``xmc.model.usage``: the chips a unit holds while it runs), so the two never disagree.
"""

from __future__ import annotations

import math
from typing import Final

#: Chips on one TPU VM host. A slice whose topology has more chips spans several hosts,
#: each pod of the job then runs on one host and requests that host's chips.
TPU_CHIPS_PER_HOST: Final = 4


def tpu_chips_per_host(topology: str) -> int | None:
    """Chips each pod requests for a TPU ``topology`` such as ``2x2`` or ``4x4x4``.

    The product of the dimensions when the whole slice fits one host (≤ 4 chips), else
    :data:`TPU_CHIPS_PER_HOST`. None when the topology does not parse; the manifest then
    requests no chips and validation reports the topology selector.
    """
    dims = topology.split("x")
    if not all(d.isascii() and d.isdigit() for d in dims):
        return None
    chips = math.prod(int(d) for d in dims)
    return chips if chips <= TPU_CHIPS_PER_HOST else TPU_CHIPS_PER_HOST
