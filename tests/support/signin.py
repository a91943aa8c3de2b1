"""Sign a browser page in as a developer does, through ``POST /auth/dev-login``.

Dev-login is a same-origin form POST (``durable_ops.gateway.devlogin``): the page's own
request context sends it, naming the page's origin as the sign-in page's form does, and
the session cookie lands in the page's browser context. The form itself is tested in
``test_dev_login_ui``; every other test starts on the page it tests.
"""

from __future__ import annotations

from playwright.sync_api import Page


def dev_sign_in(page: Page, base_url: str, user: str, then: str = "/operations") -> None:
    """Sign in as ``user`` and open ``then``. A session the browser held already is replaced
    at once, as a sign-in on the form replaces it: no moment without one, when a tab open as
    another user would be refused (401) and leave, rather than be told of the other user."""
    signed_in = page.request.post(
        f"{base_url}/auth/dev-login",
        form={"user": user},
        headers={"Origin": base_url, "Accept": "application/json"},
        max_redirects=0,
    )
    assert signed_in.status == 303, signed_in.text()
    page.goto(f"{base_url}{then}")
