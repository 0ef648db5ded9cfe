"""The OpenAPI schema of the API: generated without warnings, complete, with local docs."""

from __future__ import annotations

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from rest_framework.test import APIClient

from rivet.api.errors import ERROR_CODES
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

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
    ("get", "/rivet/tasks/{task_id}/"): {"200", "401", "403", "404", "503"},
    ("post", "/rivet/tasks/{task_id}/cancel/"): {"200", "401", "403", "404", "503"},
    ("get", "/rivet/queues/"): {"200", "401", "403", "503"},
    ("get", "/rivet/queues/{queue}/"): {"200", "400", "401", "403", "503"},
    ("post", "/rivet/queues/{queue}/sweep/"): {"200", "400", "401", "403", "503"},
    ("get", "/rivet/dead-letters/"): {"200", "400", "401", "403", "404", "503"},
    ("post", "/rivet/dead-letters/{task_id}/requeue/"): {"200", "401", "403", "404", "409", "503"},
    ("delete", "/rivet/dead-letters/{task_id}/"): {"204", "401", "403", "404", "409", "503"},
    ("get", "/rivet/metrics/"): {"200", "401", "403", "503"},
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


def test_the_docs_page_uses_assets_this_host_serves(settings) -> None:
    client = APIClient()
    client.force_login(UserFactory(permissions=[]))
    page = client.get("/rivet/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"{settings.STATIC_URL}drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    assert "/rivet/schema/" in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


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
    assert key["pattern"] == header["schema"]["pattern"] == "^[!-~]([ -~]*[!-~])?$"
