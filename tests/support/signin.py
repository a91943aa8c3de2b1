"""Sign a browser page in the way a developer does: the sign-in page's dev-login form.

Dev-login is a same-origin POST (``durable_ops.gateway.devlogin``), so a test
cannot simply open a link: it fills the form and waits for the operations page.
"""

from __future__ import annotations

from playwright.sync_api import Page


def dev_sign_in(page: Page, base_url: str, user: str, then: str = "/operations") -> None:
    """Sign in and land on ``then``, as a user who followed a link to it while signed out
    (the form's ``next``): one page load fewer than signing in and then opening it."""
    # Signed in already (cookies are shared by every port of a host), "/" would skip
    # the form: start signed out, as the old link did by replacing the session.
    page.context.clear_cookies()
    page.goto(f"{base_url}/" if then == "/operations" else f"{base_url}/?next={then}")
    page.get_by_label("User id").fill(user)
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(f"{base_url}{then}")
