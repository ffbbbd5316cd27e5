"""kubesim against the real control plane (issue 25, point 4): every scenario of
``tests.contract.fidelity`` runs on an embedded kubesim and on the cluster of
``KUBECONFIG`` (``make test-cluster``) in the same test, and what XMC reads must agree.

A difference is either fixed in kubesim or listed in :data:`KNOWN_DIFFERENCES` with its
reason — the same rows as docs/kubesim.md's fidelity table — and a listed difference that
disappears fails too (strict), so the table never claims a gap that is gone. Each run
prints both recordings: that is the evidence the table cites.
"""

from __future__ import annotations

from typing import Final

import pytest

from tests.contract.cluster import ON_REAL_CLUSTER
from tests.contract.connect import connect
from tests.contract.fidelity import SCENARIOS, Scenario, compare, record

#: Scenario → the differences kubesim is known to have there (docs/kubesim.md, fidelity).
KNOWN_DIFFERENCES: Final[dict[str, list[str]]] = {}


@pytest.mark.real_cluster  # deselected from the plain suite; make test-cluster runs it
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_kubesim_reads_as_the_real_control_plane(scenario: Scenario) -> None:
    if not ON_REAL_CLUSTER:
        pytest.skip("needs the real control plane: make test-cluster")
    async with connect(real=False) as sim:
        on_kubesim = await record(sim, scenario, wid=1)
    async with connect(real=True) as real:
        on_real = await record(real, scenario, wid=1)
    for where, recording in (("kubesim", on_kubesim), ("real", on_real)):
        print(f"{scenario.name} on {where}: {recording.states}")
        for shot in recording.snapshots:
            print(f"    {shot}")
    assert compare(on_kubesim, on_real) == KNOWN_DIFFERENCES.get(scenario.name, [])
