"""The web UI (SPEC §6): server-rendered page shells, static ES modules and one stylesheet.

Each ``Page`` is a path, the ES module under ``web/static/pages/`` that
fills its ``<main>``, a title and, optionally, a nav label. ``/`` is the
sign-in page when signed out and redirects to ``/operations`` when signed
in; every other page needs the session cookie and otherwise redirects to
``/``. The signed-in user reaches the scripts as ``<meta name="ops-user">``, which
each of the page's requests repeats (``auth.check_page_user``). The bell's poll
interval (``OPS_UI_UNREAD_POLL_MS``) reaches them as ``<meta name="ops-unread-poll-ms">``,
and the task registry (``model.tasks``: labels, paths, answer schemas) as the JSON
script element ``#ops-tasks``, so the page never keeps a copy of it.

An unknown address a browser navigates to (its ``Accept`` names ``text/html``)
answers a small HTML 404 page; API clients, and anything under ``/api/``, keep
the problem+json 404 (``problems.http_exception``). So does a refused
development sign-in: the browser gets the sign-in page again, saying why
(``form_refused``). ``/favicon.ico``, which browsers ask for whatever the page
links, is the UI's icon.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Receive, Scope, Send

from durable_ops.gateway.auth import session_user
from durable_ops.gateway.context import settings_of
from durable_ops.gateway.hosts import serves_dev_login
from durable_ops.gateway.modules import RouteSet
from durable_ops.gateway.openapi import endpoint
from durable_ops.gateway.problems import Problem, as_sentence, http_exception
from durable_ops.model.tasks import TASKS, Registry
from durable_ops.settings import Settings

WEB_DIR = Path(__file__).parent / "web"
STATIC_DIR = WEB_DIR / "static"
PRODUCT_NAME = "durable-ops"
DEV_LOGIN_USER = "demo"  # the development form's user until one is typed (opsctl up's)


@dataclass(frozen=True)
class Page:
    path: str
    module: str  # web/static/pages/<module>.js
    title: str
    nav_label: str | None = None


OPERATIONS_PAGE = Page("/operations", "operations", "Operations", "Operations")
JOBS_PAGE = Page("/jobs", "jobs", "Jobs", "Jobs")
CORE_PAGES: tuple[Page, ...] = (OPERATIONS_PAGE, JOBS_PAGE)


class UIFile(FileResponse):
    """A file of the UI, which browsers revalidate (ETag) on every load: no build step, no
    stale UI. It is sent whole whatever ``Range`` asks: the files are small and no page asks
    for part of one, and Starlette answers a range it cannot serve (``bytes=abc``, one past
    the end) in text/plain of its own, outside SPEC §5's problem+json. RFC 9110 lets a server
    ignore ``Range``; ``Accept-Ranges: none`` says it does."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(path, **options)
        self.headers["Cache-Control"] = "no-cache"
        self.headers["Accept-Ranges"] = "none"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(name, value) for name, value in scope["headers"] if name != b"range"]
        await super().__call__({**scope, "headers": headers}, receive, send)


class UIFiles(StaticFiles):
    """The UI's static files, each a ``UIFile``; unchanged since the browser's copy, a 304."""

    def file_response(
        self, full_path: Any, stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = UIFile(full_path, status_code=status_code, stat_result=stat_result)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


def _template(name: str) -> Template:
    return Template((WEB_DIR / name).read_text(encoding="utf-8"))


def script_json(value: object) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<`` can close it."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


class Renderer:
    def __init__(self, pages: Sequence[Page], tasks: Registry = TASKS) -> None:
        self.pages = tuple(pages)
        self._tasks = script_json(tasks.public())
        self._page = _template("page.html")
        self._header = _template("header.html")
        self._signin = _template("signin.html")
        self._devlogin = _template("devlogin.html")
        self._not_found = _template("notfound.html")

    def _nav(self, current: Page | None) -> str:
        items = []
        for page in self.pages:
            if page.nav_label is None:
                continue
            here = ' aria-current="page"' if page is current else ""
            href, label = html.escape(page.path), html.escape(page.nav_label)
            items.append(f'<li><a href="{href}"{here}>{label}</a></li>')
        return "\n".join(items)

    def render(
        self,
        settings: Settings,
        *,
        title: str,
        module: str,
        user: str | None,
        main: str = "",
        current: Page | None = None,
    ) -> str:
        header = (
            self._header.substitute(nav=self._nav(current), user=html.escape(user))
            if user is not None
            else ""
        )
        return self._page.substitute(
            title=html.escape(title),
            product=PRODUCT_NAME,
            module=html.escape(module),
            poll_ms=str(int(settings.ui_unread_poll_ms)),
            tasks=self._tasks,
            signed_in="true" if user is not None else "false",
            user_meta=html.escape(user or ""),
            header=header,
            main=main,
        )

    def signin(
        self, settings: Settings, *, dev_user: str = DEV_LOGIN_USER, dev_error: str = ""
    ) -> str:
        """The sign-in page; ``dev_error``: why the development form's last try was refused,
        shown beside it with the user it named (``dev_user``)."""
        dev = ""
        if serves_dev_login(settings):
            error = ""
            if dev_error:
                error = (
                    '<p class="form-error" id="dev-error" role="alert">'
                    f"{html.escape(dev_error)}</p>"
                )
            dev = self._devlogin.substitute(user=html.escape(dev_user), error=error)
        main = self._signin.substitute(dev_login=dev, product=PRODUCT_NAME)
        return self.render(settings, title="Sign in", module="signin", user=None, main=main)

    def not_found(self, settings: Settings) -> str:
        """The 404 page: it reads no session (a 404 needs no backend) and runs no page module."""
        main = self._not_found.substitute(product=PRODUCT_NAME)
        return self.render(settings, title="Page not found", module="", user=None, main=main)


def _renderer(request: Request) -> Renderer:
    renderer: Renderer = request.app.state.renderer
    return renderer


async def home(request: Request) -> Response:
    if await session_user(request) is not None:
        return RedirectResponse(OPERATIONS_PAGE.path, status_code=303)
    return HTMLResponse(_renderer(request).signin(settings_of(request)))


def wants_a_page(request: Request) -> bool:
    """A browser's navigation outside the API: it asks for HTML, not a problem document."""
    api = request.url.path == "/api" or request.url.path.startswith("/api/")
    return not api and "text/html" in request.headers.get("accept", "")


def form_refused(request: Request, problem: Problem, user: str) -> Response:
    """The sign-in page again, saying why the development form's sign-in as ``user`` was
    refused: a browser's answer to the form (its post navigates), with the problem's status
    and headers (``Retry-After``); an API client keeps the problem document."""
    body = _renderer(request).signin(
        settings_of(request), dev_user=user, dev_error=as_sentence(problem.detail)
    )
    return HTMLResponse(body, status_code=problem.status, headers=problem.headers)


async def not_found(request: Request, exc: Exception) -> Response:
    """The 404 of an unknown path: a page for a browser, problem+json for everyone else."""
    if not wants_a_page(request):
        return await http_exception(request, exc)
    body = _renderer(request).not_found(settings_of(request))
    return HTMLResponse(body, status_code=404)


# The exception handlers the web UI adds to the app's (``problems.EXCEPTION_HANDLERS``).
EXCEPTION_HANDLERS: Mapping[Any, Any] = {404: not_found}


async def favicon(_request: Request) -> Response:
    return UIFile(STATIC_DIR / "icon.svg", media_type="image/svg+xml")


def _page_endpoint(page: Page) -> Callable[[Request], Awaitable[Response]]:
    async def show(request: Request) -> Response:
        user = await session_user(request)
        if user is None:
            return RedirectResponse("/", status_code=303)
        body = _renderer(request).render(
            settings_of(request), title=page.title, module=page.module, user=user, current=page
        )
        return HTMLResponse(body)

    show.__name__ = f"page_{page.module}"
    return show


_HTML_RESPONSE = {
    "description": "HTML page",
    "content": {"text/html": {"schema": {"type": "string"}}},
}
_REDIRECT = {"description": "redirect", "headers": {"Location": {"schema": {"type": "string"}}}}


def web_module(pages: Sequence[Page]) -> RouteSet:
    routes: list[BaseRoute] = [Route("/", home, methods=["GET"])]
    paths: dict[str, Mapping[str, Any]] = {
        "/": {
            "get": endpoint(
                "Sign-in page (redirects to /operations when signed in)",
                "pageHome",
                "web",
                {"200": _HTML_RESPONSE, "303": _REDIRECT},
                secured=False,
            )
        }
    }
    for page in pages:
        routes.append(Route(page.path, _page_endpoint(page), methods=["GET"]))
        paths[page.path] = {
            "get": endpoint(
                f"{page.title} page (redirects to / when signed out)",
                f"page_{page.module}",
                "web",
                {"200": _HTML_RESPONSE, "303": _REDIRECT},
                secured=False,
            )
        }
    routes.append(Route("/favicon.ico", favicon, methods=["GET"]))
    paths["/favicon.ico"] = {
        "get": endpoint(
            "The web UI's icon (SVG), where browsers look for it",
            "getFavicon",
            "web",
            {"200": {"description": "the icon", "content": {"image/svg+xml": {}}}},
            secured=False,
        )
    }
    routes.append(Mount("/static", UIFiles(directory=STATIC_DIR), name="static"))
    paths["/static/{path}"] = {
        "get": {
            "summary": "Scripts, stylesheet and icons of the web UI",
            "operationId": "getStatic",
            "tags": ["web"],
            "security": [],
            "parameters": [
                {"name": "path", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": {"description": "a static file"},
                "404": {"description": "no such file"},
            },
        }
    }
    return RouteSet(routes, paths, {})
