"""Swagger UI in a real browser, on a host that authenticates by token alone.

A browser holds no token, so the page is all a person has: it opens without credentials,
offers the token scheme behind Authorize, loads the operations once the token is given, keeps
it across a reload (persistAuthorization), and "Try it out" sends it.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from tests.factories import UserFactory

pytestmark = [pytest.mark.acceptance, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TOKEN = "4f1c0d2e-docs-page-token"


class OneToken(TokenAuthentication):
    """DRF's token scheme (``Authorization: Token <key>``) with one key, so the test needs no
    ``rest_framework.authtoken`` table; the schema names it as it names TokenAuthentication."""

    def authenticate_credentials(self, key):
        if key != TOKEN:
            raise exceptions.AuthenticationFailed("Invalid token.")
        user = get_user_model().objects.get(username="token-holder")
        return (user, key)


def test_a_person_authorizes_with_a_token_in_the_page(
    live_server, in_browser, settings, screenshot_dir
):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_AUTHENTICATION_CLASSES": [f"{__name__}.OneToken"],
    }
    UserFactory(username="token-holder", permissions=["rivet.view_task"])
    docs = f"{live_server.url}/rivet/docs/"

    def steps(page):
        seen = {}
        page.goto(docs)
        page.wait_for_selector("button.authorize")
        seen["before"] = page.locator(".opblock").count()
        seen["description"] = page.locator(".info .description").inner_text()
        page.screenshot(path=screenshot_dir / "api-docs-sign-in.png", full_page=True)
        page.click("button.authorize")
        page.fill(".auth-container input[type=text]", f"Token {TOKEN}")
        page.click(".auth-btn-wrapper button.authorize")
        page.click("button.btn-done")
        page.wait_for_selector(".opblock")
        seen["after"] = page.locator(".opblock").count()
        page.reload()
        page.wait_for_selector(".opblock")
        seen["reloaded"] = page.locator(".opblock").count()
        queues = page.locator(".opblock-get", has=page.locator('[data-path="/rivet/queues/"]'))
        queues.locator(".opblock-summary").click()
        queues.locator("button.try-out__btn").click()
        queues.locator("button.execute").click()
        status = queues.locator(".live-responses-table .response .response-col_status").first
        seen["tried"] = status.inner_text().strip()
        page.screenshot(path=screenshot_dir / "api-docs-authorized.png", full_page=True)
        return seen

    seen = in_browser(steps)

    assert seen["before"] == 0
    assert "Authorize" in seen["description"]
    assert seen["after"] >= 17
    assert seen["reloaded"] == seen["after"]
    assert seen["tried"] == "200"
