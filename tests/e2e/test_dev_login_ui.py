"""The development sign-in form in a real browser, when it is refused: a page that says
why, never the raw problem+json the throttled form used to show. Signing in again leads
back to the page whose session ended, and never off the site."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Page, Route, expect

from durable_ops.gateway.limits import Throttle
from tests.support.gateway import LiveGateway, token
from tests.support.signin import dev_sign_in

pytestmark = pytest.mark.browser


class _Seconds:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_throttled_dev_sign_in_shows_when_to_try_again(
    page: Page, ui_gateway: LiveGateway
) -> None:
    seconds = _Seconds()
    # One attempt, then one more every 6 s: the second sign-in in a row is refused.
    ui_gateway.app.state.sign_in_throttle = Throttle(1, 6.0, clock=seconds)
    dev_sign_in(page, ui_gateway.url, "ada")

    # Off the signed-in page first: its next poll, answered 401 once the cookie is gone,
    # would send it to /?expired=1 in the middle of the navigation below.
    page.goto("about:blank")
    page.context.clear_cookies()
    page.goto(ui_gateway.url + "/")
    page.get_by_label("User id").fill("ada")
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(ui_gateway.url + "/auth/dev-login")
    expect(page.get_by_role("alert")).to_have_text(
        "Too many sign-in attempts; try again in 6 seconds."
    )
    expect(page.get_by_label("User id")).to_have_value("ada")
    assert "urn:durable-ops:problem" not in page.content()

    # Once the wait is over, the same form signs in.
    seconds.now += 6
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(ui_gateway.url + "/operations")
    expect(page.locator("header .user")).to_have_text("ada")


def test_signing_in_again_leads_back_to_the_page_and_never_off_the_site(
    page: Page, ui_gateway: LiveGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`next` is where the tab was when its session ended; one that would lead to another
    site (an open redirect) leads to /operations, by either form."""
    url = ui_gateway.url
    # A dozen sign-ins from one address: more than the burst a real client gets.
    monkeypatch.setattr(ui_gateway.app.state, "sign_in_throttle", Throttle(100, 6.0))
    # Never leave loopback, whatever the page does: a redirect off the site fails the wait.
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
    page.goto(f"{url}/?{urlencode({'expired': '1', 'next': '/jobs?result=x#add-cv'})}")
    expect(page.locator("#signin-notice")).to_have_text(
        "Your session ended. Sign in again to go back to the page you were on."
    )
    page.get_by_label("Token", exact=True).fill(token("ada"))
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"{url}/jobs?result=x#add-cv")

    # The last three pass the rule as written and became "//evil.example/…" once the URL
    # parser removed their dot segments (an attacker's test found them).
    plain = ("//evil.example/jobs", "https://evil.example/", "/\\evil.example", "/")
    dotted = ("/.//evil.example/phish", "/..//evil.example/", "/%2e%2e//evil.example/")
    for elsewhere in (*plain, *dotted):
        page.goto("about:blank")
        page.context.clear_cookies()
        page.goto(f"{url}/?{urlencode({'next': elsewhere})}")
        page.get_by_label("Token", exact=True).fill(token("ada"))
        page.get_by_role("button", name="Sign in", exact=True).click()
        page.wait_for_url(f"{url}/operations")

    # The development form is redirected by the gateway, which checks `next` again.
    page.goto("about:blank")
    page.context.clear_cookies()
    page.goto(f"{url}/?next=%2Fjobs")
    page.get_by_label("User id").fill("ada")
    page.get_by_role("button", name="Sign in as this user").click()
    page.wait_for_url(f"{url}/jobs")
    for elsewhere in ("//evil.example/", "/\\evil.example", "https://evil.example/"):
        answer = page.request.post(
            f"{url}/auth/dev-login?{urlencode({'next': elsewhere})}",
            form={"user": "ada"},
            headers={"Origin": url},
            max_redirects=0,
        )
        assert (answer.status, answer.headers["location"]) == (303, "/operations"), elsewhere


def test_a_form_sent_before_the_page_has_started_cannot_leak_the_token(
    page: Page, ui_gateway: LiveGateway
) -> None:
    """The page's module loads after the page: until then its buttons are disabled, or a
    quick click would send the form as a plain GET, the pasted token in the address bar
    and the server's log (CI caught the click winning that race)."""
    held: list[Route] = []
    page.route(re.compile(r"/static/pages/signin\.js"), lambda route: held.append(route))
    page.goto(f"{ui_gateway.url}/?next=%2Fjobs", wait_until="domcontentloaded")
    page.get_by_label("Token", exact=True).fill(token("ada"))
    expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_disabled()
    expect(page.get_by_role("button", name="Sign in as this user")).to_be_disabled()

    while not held:
        page.wait_for_timeout(20)
    held[0].continue_()
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"{ui_gateway.url}/jobs")
