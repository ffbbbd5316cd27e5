"""Serving Prometheus metrics over HTTP, the same way in every service."""

from __future__ import annotations

from prometheus_client import start_http_server


def serve_metrics(listen: str) -> int | None:
    """Start the /metrics endpoint on ``host:port`` ('' = off); returns the bound port."""
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0")
    return int(server.server_port)
