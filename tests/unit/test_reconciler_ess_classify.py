"""Which failed ESS calls the Reconciler sends again (``reconciler.ess_client.classify``)."""

from __future__ import annotations

import grpc
import pytest

from reconciler.ess_client import EssRejected, EssUnavailable, classify

C = grpc.StatusCode


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        pytest.param(C.UNAVAILABLE, EssUnavailable, id="down or draining"),
        pytest.param(C.CANCELLED, EssUnavailable, id="a stopping ESS dropped the call"),
        pytest.param(C.DEADLINE_EXCEEDED, EssUnavailable, id="too slow"),
        pytest.param(C.INVALID_ARGUMENT, EssRejected, id="a verdict on the request"),
        pytest.param(C.INTERNAL, EssRejected, id="retried in place, not put back"),
    ],
)
def test_a_failed_call_is_unavailable_or_rejected(code: grpc.StatusCode, kind: type) -> None:
    error = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="x")
    assert type(classify(error)) is kind
