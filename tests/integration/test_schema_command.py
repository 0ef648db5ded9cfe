"""``manage.py rivet_schema`` writes the schema in a host that never installed drf-spectacular's
app, where drf-spectacular's own ``spectacular`` command does not exist."""

from __future__ import annotations

import json

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command, get_commands
from django.test import override_settings
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

WITHOUT_SPECTACULAR = [
    app for app in django_settings.INSTALLED_APPS if not app.startswith("drf_spectacular")
]


@override_settings(INSTALLED_APPS=WITHOUT_SPECTACULAR, REST_FRAMEWORK={})
def test_the_command_writes_what_rivet_serves_where_spectacular_s_app_is_not_installed(tmp_path):
    assert "spectacular" not in get_commands()  # the command docs/http-api.md once named
    out = tmp_path / "openapi.json"
    call_command(
        "rivet_schema", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", out
    )
    written = json.loads(out.read_text())
    client = APIClient()
    client.force_authenticate(UserFactory(permissions=[]))
    served = client.get("/rivet/schema/?format=json").json()
    assert written["paths"] == served["paths"]
    assert written["info"]["title"] == "rivet task queue API"
    assert all(path.startswith("/rivet/") for path in written["paths"])
