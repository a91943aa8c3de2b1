"""Where the development sign-in leads (``devlogin.after_sign_in``): back to the page whose
session ended when ``next`` is a path of this site, else /operations. Never off the site:
an open redirect would hand a freshly signed-in user to any site."""

from __future__ import annotations

import pytest

from durable_ops.gateway.devlogin import AFTER_LOGIN, NEXT_MAX, after_sign_in


@pytest.mark.parametrize(
    "path", ["/jobs", "/jobs?result=op-1#job-2", "/operations#notifications", "/jobs/%2F%2Fx"]
)
def test_a_path_of_this_site_is_where_it_leads(path: str) -> None:
    assert after_sign_in(path) == path


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "jobs",
        "//evil.example/jobs",
        "/\\evil.example",
        "/jobs\\..\\x",
        "https://evil.example/",
        "javascript:alert(1)",
        "/\tjobs",
        "/jobs\n",
        "/jobs page",
        "/" + "a" * NEXT_MAX,
    ],
)
def test_anything_else_leads_to_the_operations_page(path: str) -> None:
    assert after_sign_in(path) == AFTER_LOGIN
