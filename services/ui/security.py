"""What the dashboard refuses from other sites, and the headers every answer carries.

The dashboard and the REST face act with the caller's credentials: the auth proxy's cookie
(or the dashboard's ``XMC_UI_TOKEN``) rides along with any request the browser sends, even
one a page on another site made it send. So a write must prove it came from this site.
Browsers say where a request comes from in headers a page cannot set: ``Sec-Fetch-Site``
(every current browser) and ``Origin`` (on every cross-origin and every POST request).
Clients that are not browsers (curl, the CLI, scripts) send neither and cannot be made to
act by another site, so they are let through.

The REST face also takes only ``Content-Type: application/json`` for writes
(:func:`json_content_type_refusal`): a page can send a cross-origin write without asking
the server first only as a form or with a "simple" content type, so a JSON-only write
needs a CORS preflight, which this server never grants — a second wall should the first
ever be wrong.

The decisions are pure functions of the method and headers (table-tested in
``tests/unit/test_ui_security.py``); the middlewares only apply them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from ui.gateway import UiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Methods that change nothing (RFC 9110 §9.2.1); every other method is a write.
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: ``Sec-Fetch-Site`` values that mean another site made the browser send the request.
_FOREIGN_SITES: Final = frozenset({"cross-site", "same-site"})

#: Only this server's own files: no inline script or style, no plugin, no framing, forms
#: post only here. ``img-src data:`` is for the browser's own form-control icons.
CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # For browsers older than CSP's frame-ancestors.
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # A page's URL (an experiment's filter, a notice) stays on this site.
    "Referrer-Policy": "same-origin",
    # aiohttp names itself and Python with their versions; an attacker needs neither.
    "Server": "xmc-ui",
}
#: Prefixes whose answers carry no user data and may be cached (versioned file names).
_CACHEABLE: Final = ("/static/",)


def cross_site_refusal(
    method: str, origin: str | None, fetch_site: str | None, own_origin: str
) -> str | None:
    """Why a request must be refused as sent by another site, or None to let it through.

    ``own_origin`` is ``scheme://host[:port]`` as this server sees the request. Safe
    methods always pass. A write passes when its ``Origin`` is exactly ``own_origin``
    (scheme included: ``http://`` is not ``https://``); else when the browser itself says
    ``Sec-Fetch-Site: same-origin`` (it knows the page's real origin, also behind a
    TLS-terminating proxy, where this server sees ``http``); else when it carries neither
    ``Origin`` nor a ``Sec-Fetch-Site`` naming another site (not a browser). Everything
    else — another site, a sibling subdomain, ``Origin: null`` from a sandbox or a
    ``file:`` page, a scheme downgrade — is refused.
    """
    if method.upper() in SAFE_METHODS:
        return None
    site = (fetch_site or "").strip().lower()
    if origin is not None and origin.strip().lower() == own_origin.lower():
        return None
    if site in _FOREIGN_SITES:
        return f"refused: the request was sent from another site (Sec-Fetch-Site: {site})"
    if site == "same-origin" or origin is None:
        return None
    return f"refused: the request was sent from another site (Origin {origin}, not {own_origin})"


def own_origin(request: web.Request) -> str:
    """``scheme://host[:port]`` as the request reached this server (its ``Host`` header)."""
    return f"{request.scheme}://{request.host}"


def json_content_type_refusal(method: str, content_type: str | None) -> str | None:
    """Why a REST write must be refused with 415, or None: every write (even one with no
    body) must say ``Content-Type: application/json``; parameters (charset) are fine."""
    if method.upper() in SAFE_METHODS:
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    got = f"got {content_type!r}" if content_type else "it is missing"
    return f"a REST write needs the header Content-Type: application/json; {got}"


@web.middleware
async def same_site_writes(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every write on every route (the forms and ``/v1/``) passes
    :func:`cross_site_refusal` first, before its body is read."""
    refusal = cross_site_refusal(
        request.method,
        request.headers.get("Origin"),
        request.headers.get("Sec-Fetch-Site"),
        own_origin(request),
    )
    if refusal is not None:
        raise UiError(403, refusal)
    return await handler(request)


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the headers of :data:`SECURITY_HEADERS` on every answer
    (pages, JSON, redirects, errors, static files), and ``no-store`` on every one but the
    static files: pages and JSON show one user's experiments, which a shared cache or the
    browser's history must not hand to the next person."""
    response.headers.update(SECURITY_HEADERS)
    if not request.path.startswith(_CACHEABLE):
        response.headers["Cache-Control"] = "no-store"
