"""The OpenAPI schema of the API: generated without warnings, complete, with local docs."""

from __future__ import annotations

import re

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import override_settings
from django.urls import URLPattern
from rest_framework.test import APIClient

import rivet.urls
from rivet.api.errors import ERROR_CODES
from rivet.api.schema import RivetAutoSchema
from rivet.jobs import registry
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HOST_APPS_WITHOUT_SPECTACULAR = [
    app for app in django_settings.INSTALLED_APPS if not app.startswith("drf_spectacular")
]

# 503: every endpoint answers database_unavailable or not_migrated when its database fails.
OPERATIONS = {
    ("get", "/rivet/tasks/"): {"200", "400", "401", "403", "404", "503"},
    ("post", "/rivet/tasks/"): {
        "200",
        "201",
        "400",
        "401",
        "403",
        "413",
        "415",
        "422",
        "429",
        "503",
    },
    ("post", "/rivet/tasks/bulk/"): {
        "200",
        "201",
        "400",
        "401",
        "403",
        "413",
        "415",
        "422",
        "429",
        "503",
    },
    ("get", "/rivet/tasks/{task_id}/"): {"200", "400", "401", "403", "404", "503"},
    ("post", "/rivet/tasks/{task_id}/cancel/"): {"200", "400", "401", "403", "404", "503"},
    ("get", "/rivet/queues/"): {"200", "400", "401", "403", "503"},
    ("get", "/rivet/queues/{queue}/"): {"200", "400", "401", "403", "503"},
    ("post", "/rivet/queues/{queue}/sweep/"): {"200", "400", "401", "403", "503"},
    ("get", "/rivet/dead-letters/"): {"200", "400", "401", "403", "404", "503"},
    ("post", "/rivet/dead-letters/{task_id}/requeue/"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "503",
    },
    ("delete", "/rivet/dead-letters/{task_id}/"): {"204", "400", "401", "403", "404", "409", "503"},
    ("get", "/rivet/metrics/"): {"200", "400", "401", "403", "501", "503"},
    ("get", "/rivet/schedules/"): {"200", "401", "403", "503"},
    ("get", "/rivet/schedules/{name}/"): {"200", "401", "403", "404", "503"},
    ("post", "/rivet/schedules/{name}/run/"): {"200", "401", "403", "404", "503"},
    ("post", "/rivet/schedules/{name}/pause/"): {"200", "401", "403", "404", "503"},
    ("post", "/rivet/schedules/{name}/resume/"): {"200", "401", "403", "404", "503"},
}


@pytest.mark.parametrize("custom", [["--custom-settings", "rivet.api.schema.SPECTACULAR"], []])
def test_the_schema_generates_without_warnings(tmp_path, custom) -> None:
    """As rivet serves it, and as the host's own ``manage.py spectacular`` makes it."""
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out), *custom)
    assert "/rivet/tasks/bulk/" in out.read_text()


@pytest.fixture
def served() -> dict:
    client = APIClient()
    client.force_login(UserFactory(permissions=[]))  # the schema needs a user, no rivet permission
    response = client.get("/rivet/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def test_every_endpoint_and_status_is_described(served) -> None:
    found = {
        (method, path): set(operation["responses"])
        for path, methods in served["paths"].items()
        for method, operation in methods.items()
    }
    assert found == OPERATIONS


def test_every_error_code_is_in_the_schema_under_each_of_its_statuses(served) -> None:
    """In the error table of the description; and in the enum of each status an operation has."""
    schemas = served["components"]["schemas"]
    described = {status for responses in OPERATIONS.values() for status in responses}
    for code, (statuses, _) in ERROR_CODES.items():
        assert f"| `{code}` | {', '.join(map(str, statuses))} |" in served["info"]["description"]
        for status in statuses:
            if str(status) in described:
                assert code in schemas[f"Error{status}CodeEnum"]["enum"], (code, status)
    assert {"400", "401", "403", "404", "409", "413", "415", "422", "429", "503"} <= described


def test_the_docs_page_uses_assets_rivet_serves_itself() -> None:
    client = APIClient()
    client.force_login(UserFactory(permissions=[]))
    page = client.get("/rivet/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    assert "/rivet/schema/" in html
    assert "<title>rivet task queue API</title>" in html
    assets = re.findall(r'(?:href|src)="(/[^"]+)"', html)
    assert sorted(assets) == [
        "/rivet/docs/assets/favicon-32x32.png",
        "/rivet/docs/assets/swagger-ui-bundle.js",
        "/rivet/docs/assets/swagger-ui-standalone-preset.js",
        "/rivet/docs/assets/swagger-ui.css",
    ]
    client.logout()  # the files are public, like any static file
    for asset in assets:
        answer = client.get(asset)
        assert answer.status_code == 200, asset
        assert b"".join(answer.streaming_content)
        assert answer.headers["Cache-Control"] == "public, max-age=86400"
        answer.close()
    missing = client.get("/rivet/docs/assets/swagger-ui.css.map")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")


@override_settings(REST_FRAMEWORK={}, INSTALLED_APPS=HOST_APPS_WITHOUT_SPECTACULAR)
def test_schema_and_docs_need_neither_the_host_s_schema_class_nor_spectacular_s_apps() -> None:
    client = APIClient()
    client.force_login(UserFactory(permissions=[]))
    schema = client.get("/rivet/schema/?format=json")
    assert schema.status_code == 200, schema.content[:500]
    assert "/rivet/tasks/" in schema.json()["paths"]
    page = client.get("/rivet/docs/")
    assert page.status_code == 200
    assert b"/rivet/docs/assets/swagger-ui-bundle.js" in page.content


def test_every_documented_method_builds_on_rivet_s_schema_class_not_the_host_s():
    """drf-spectacular would build on REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS'] (DRF's own by
    default, which breaks every operation); rivet's decorators name RivetAutoSchema."""
    decorated = []
    for pattern in rivet.urls.urlpatterns:
        view = getattr(pattern.callback, "cls", None) if isinstance(pattern, URLPattern) else None
        for name in ("get", "post", "delete", "put", "patch"):
            method = getattr(view, name, None) if view is not None else None
            schema = getattr(method, "kwargs", {}).get("schema")
            if schema is not None:
                decorated.append((view.__name__, name))
                assert issubclass(schema, RivetAutoSchema), (view.__name__, name, schema.__mro__)
    assert len(decorated) >= 12, decorated


def test_a_request_s_kind_is_one_of_the_registered_kinds_unless_unknown_ones_are_allowed(settings):
    client = APIClient()
    client.force_login(UserFactory(permissions=[]))
    components = client.get("/rivet/schema/?format=json").json()["components"]["schemas"]
    kinds = components["EnqueueRequest"]["properties"]["kind"]
    assert kinds["enum"] == registry.names() and "noop" in kinds["enum"]
    assert "enum" not in components["Task"]["properties"]["kind"]
    settings.RIVET = {**settings.RIVET, "ALLOW_UNKNOWN_KINDS": True}
    components = client.get("/rivet/schema/?format=json").json()["components"]["schemas"]
    assert "enum" not in components["EnqueueRequest"]["properties"]["kind"]


def test_the_schema_states_the_bounds_the_server_applies(served) -> None:
    """page_size 1..1000; a bulk item is the enqueue body, kind required; keys visible ASCII."""
    schemas = served["components"]["schemas"]
    listing = served["paths"]["/rivet/tasks/"]["get"]["parameters"]
    (page_size,) = [p["schema"] for p in listing if p["name"] == "page_size"]
    assert (page_size["type"], page_size["minimum"], page_size["maximum"]) == ("integer", 1, 1000)
    items = schemas["BulkEnqueueRequest"]["properties"]["tasks"]["items"]
    assert items == {"$ref": "#/components/schemas/EnqueueRequest"}
    assert schemas["EnqueueRequest"]["required"] == ["kind"]
    key = schemas["EnqueueRequest"]["properties"]["idem_key"]
    (header,) = served["paths"]["/rivet/tasks/"]["post"]["parameters"]
    # Visible ASCII but the comma (a server joins a header sent twice with one).
    assert key["pattern"] == header["schema"]["pattern"] == "^[!-+\\--~]([ -+\\--~]*[!-+\\--~])?$"
