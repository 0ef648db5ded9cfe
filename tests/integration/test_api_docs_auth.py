"""The schema's security under the host's authentication, and a docs page a browser can use.

Every rivet endpoint refuses anonymous callers, so no operation's ``security`` may hold ``{}``
(anonymous allowed), whatever the host's permissions say. The docs page is served to anyone
(it holds no data) and offers the host's schemes behind its Authorize button, so a person whose
host authenticates by token alone can sign in from the page.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SESSION = "rest_framework.authentication.SessionAuthentication"
BASIC = "rest_framework.authentication.BasicAuthentication"
TOKEN = "rest_framework.authentication.TokenAuthentication"
ALLOW_ANY = "rest_framework.permissions.AllowAny"
READ_ONLY = "rest_framework.permissions.IsAuthenticatedOrReadOnly"
SIGNED_IN = "rest_framework.permissions.IsAuthenticated"

#: Hosts' REST_FRAMEWORK settings, and the schemes each operation must then name.
HOSTS = {
    "session and basic, AllowAny": ({}, ["basicAuth", "cookieAuth"]),
    "token only": (
        {"DEFAULT_AUTHENTICATION_CLASSES": [TOKEN], "DEFAULT_PERMISSION_CLASSES": [ALLOW_ANY]},
        ["tokenAuth"],
    ),
    "read only for anonymous": (
        {
            "DEFAULT_AUTHENTICATION_CLASSES": [SESSION, TOKEN],
            "DEFAULT_PERMISSION_CLASSES": [READ_ONLY],
        },
        ["cookieAuth", "tokenAuth"],
    ),
    "signed in": (
        {"DEFAULT_AUTHENTICATION_CLASSES": [BASIC], "DEFAULT_PERMISSION_CLASSES": [SIGNED_IN]},
        ["basicAuth"],
    ),
}


def served_schema() -> dict:
    client = APIClient()
    client.force_authenticate(UserFactory(permissions=[]))
    response = client.get("/rivet/schema/?format=json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


@pytest.mark.parametrize("host", HOSTS)
def test_no_operation_lets_anonymous_callers_in(settings, host) -> None:
    changes, schemes = HOSTS[host]
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, **changes}
    served = served_schema()
    defined = served["components"]["securitySchemes"]
    operations = [
        (method, path, operation)
        for path, methods in served["paths"].items()
        for method, operation in methods.items()
    ]
    assert len(operations) >= 17
    for method, path, operation in operations:
        security = operation["security"]
        assert {} not in security, (method, path, security)
        names = sorted(name for requirement in security for name in requirement)
        expected = ["rivetMetricsToken", *schemes] if path == "/rivet/metrics/" else schemes
        assert names == sorted(expected), (method, path, security)
        assert set(names) <= set(defined), (method, path, defined)


def test_a_token_host_s_schema_tells_how_to_send_the_token(settings) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, **HOSTS["token only"][0]}
    token = served_schema()["components"]["securitySchemes"]["tokenAuth"]
    assert (token["type"], token["in"], token["name"]) == ("apiKey", "header", "Authorization")
    assert '"Token"' in token["description"]


def page_settings(html: str, name: str) -> dict:
    (found,) = re.findall(rf"^const {name} = (.*?);$", html, flags=re.MULTILINE | re.DOTALL)
    return json.loads(found)


@pytest.mark.parametrize("host", HOSTS)
def test_the_docs_page_is_served_to_anyone_and_offers_the_host_s_schemes(settings, host) -> None:
    changes, schemes = HOSTS[host]
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, **changes}
    anonymous = APIClient()
    page = anonymous.get("/rivet/docs/")
    assert page.status_code == 200, page.content[:300]
    html = page.content.decode()
    assert page_settings(html, "swaggerSettings") == {"persistAuthorization": True}
    offered = page_settings(html, "securitySchemes")
    assert sorted(offered) == sorted(schemes)
    assert offered.items() <= served_schema()["components"]["securitySchemes"].items()
    # The page holds no data: the schema itself still needs a signed-in caller.
    assert anonymous.get("/rivet/schema/?format=json").status_code in (401, 403)


@override_settings(
    REST_FRAMEWORK={"DEFAULT_AUTHENTICATION_CLASSES": [TOKEN], "DEFAULT_PERMISSION_CLASSES": []}
)
def test_the_docs_page_cannot_be_ended_early_by_a_scheme_s_text(monkeypatch) -> None:
    from rivet.api import schema

    real = schema.security_schemes
    monkeypatch.setattr(
        schema,
        "security_schemes",
        lambda authenticators: {**real(authenticators), "odd": {"description": "</script>"}},
    )
    html = APIClient().get("/rivet/docs/").content.decode()
    assert "</script>" not in html.split("const securitySchemes")[1].split(";\n")[0]
