"""Security headers on every response: the pages load only their own scripts and styles,
and nothing is stored by a browser or a shared cache unless its route says otherwise.

Answers under /api/, /auth/ and /console/ are the caller's own (its jobs, operations,
results, session), and so are the pages: ``Cache-Control: no-store`` is every response's
default. Only the UI's static files say otherwise (``web.UIFile``: ``no-cache``, revalidated
on each load); an event stream names its own.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():  # a response's own header wins
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
