"""Who may talk to the dashboard: a request must name a host the dashboard answers to (DNS rebinding: a page on
another site that re-points its name at 127.0.0.1 sends its own name as ``Host``), and a request that writes
must not come from a page of another origin (a browser always says where a cross-site request comes from).

The Host check is Starlette's ``TrustedHostMiddleware``; the names it accepts are loopback's, the address the
dashboard is bound to (when it is one address, not all), and those given with ``--allow-host``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def host_problem(name: str) -> str | None:
    """Why ``name`` cannot be an ``--allow-host``; None when it can (a name, an address, ``*.domain`` or ``*``)."""
    if not name or name.strip() != name or "/" in name:
        return f"--allow-host: expected a host name or address, got {name!r}"
    if "*" in name[1:] or (name.startswith("*") and name != "*" and not name.startswith("*.")):
        return f"--allow-host: a wildcard may only lead, as in *.example.org, got {name!r}"
    return None


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> list[str]:
    """The host names requests may carry: loopback's, the bound address unless it is a wildcard, and ``extra``
    (``*`` accepts any: the check is off, on the user's word)."""
    names = [*LOOPBACK_NAMES, *extra]
    try:
        wildcard = ipaddress.ip_address(bound).is_unspecified
    except ValueError:
        wildcard = False  # a name, e.g. localhost
    if not wildcard:
        names.append(f"[{bound}]" if ":" in bound else bound)
    return sorted({n.lower() for n in names})


class OriginGuard:
    """Refuses (403) a request that writes (any method but GET/HEAD/OPTIONS) when its ``Origin`` names a host
    the dashboard does not answer to. A request with no Origin (curl, a script) passes to the token check."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = {h.lower().strip("[]") for h in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            origin = Headers(scope=scope).get("origin")
            if origin is not None and not self._allowed(origin):
                refusal = JSONResponse({"error": f"requests from {origin} may not act on this dashboard"}, 403)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, origin: str) -> bool:
        if "*" in self.hosts:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and (parts.hostname or "") in self.hosts
