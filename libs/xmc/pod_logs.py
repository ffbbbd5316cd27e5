"""Reading containers' logs from the API server (the core ``pods/{name}/log``
subresource): a bounded tail for the Reconciler's capture and the ESS's one-shot read,
and a followed stream for the ESS's live read. Both go through the one Kubernetes client
(``xmc.kube_client``), so every failure is a classified :class:`xmc.kube.KubeError`.

Upstream (k8s.io/kubernetes v1.36.3): the parameters are ``PodLogOptions``
(staging/src/k8s.io/api/core/v1/types.go); ``tailLines`` is applied by the kubelet
before ``limitBytes``, so a tail is asked for in lines and cut to bytes here
(``xmc.model.container_logs.keep_tail``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

from xmc.kube import PODS
from xmc.kube_client import KubeClient
from xmc.model.container_logs import keep_tail

#: The log endpoint answers text/plain (upstream ``rest.ResourceStreamer``).
_TEXT: Final = "text/plain, */*"


def _log_query(container: str, *, previous: bool, follow: bool, tail_lines: int | None
               ) -> list[tuple[str, str]]:  # fmt: skip
    query = [("container", container)]
    if previous:
        query.append(("previous", "true"))
    if follow:
        query.append(("follow", "true"))
    if tail_lines is not None:
        query.append(("tailLines", str(tail_lines)))
    return query


async def read_tail(
    kube: KubeClient,
    namespace: str,
    pod: str,
    container: str,
    *,
    limit: int,
    tail_lines: int,
    previous: bool = False,
) -> tuple[bytes, bool]:
    """The container's last ``limit`` bytes (of at most ``tail_lines`` lines) and whether
    earlier output was left out. Read as it arrives and trimmed on the way, so a log far
    longer than the limit never sits in memory whole."""
    path = f"{PODS.item(namespace, pod)}/log"
    query = _log_query(container, previous=previous, follow=False, tail_lines=tail_lines)
    kept, dropped, lines = bytearray(), False, 0
    async with kube.stream(path, query, total=kube.request_timeout, accept=_TEXT) as response:
        async for chunk in response.content.iter_any():
            kept += chunk
            lines += chunk.count(b"\n")
            if len(kept) > 2 * limit:
                del kept[: len(kept) - limit]
                dropped = True
    tail, cut = keep_tail(bytes(kept), limit)
    return tail, dropped or cut or lines >= tail_lines


@contextlib.asynccontextmanager
async def follow_log(
    kube: KubeClient, namespace: str, pod: str, container: str, *, tail_lines: int
) -> AsyncIterator[AsyncIterator[bytes]]:
    """``async with follow_log(...) as chunks: async for chunk in chunks``: the last
    ``tail_lines`` lines, then new output as the container writes it, until it ends (the
    API server closes the stream) or the caller leaves the block."""
    path = f"{PODS.item(namespace, pod)}/log"
    query = _log_query(container, previous=False, follow=True, tail_lines=tail_lines)
    async with kube.stream(path, query, total=None, accept=_TEXT) as response:
        yield response.content.iter_any()
