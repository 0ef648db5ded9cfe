"""Views about the API rather than the queue: metrics, the schema, its docs, and not-found.

Swagger UI renders from drf-spectacular's template and drf-spectacular-sidecar's files, read
from the installed packages: the host needs neither in INSTALLED_APPS, nor staticfiles.
"""

from __future__ import annotations

import json
from pathlib import Path

import drf_spectacular
import drf_spectacular_sidecar
from django.http import FileResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.template import Context, Engine
from django.urls import reverse
from django.views.decorators.http import require_safe
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions, renderers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response

from rivet.api import schema
from rivet.api.errors import ExtraMissing, exception_handler
from rivet.api.permissions import (
    MetricsTokenAuthentication,
    RivetPermission,
    host_authenticators,
    permissions_for,
)
from rivet.api.schema import rivet_schema
from rivet.api.views import VIEW, RivetView
from rivet.errors import RivetConfigError
from rivet.extras import require
from rivet.metrics import queue_exposition
from rivet.stores import queue_stores

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusRenderer(renderers.BaseRenderer):
    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return data


class FirstRenderer(BaseContentNegotiation):
    """Prometheus asks for several formats; it gets the text format whatever it lists."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def json_errors(request, response):
    """An error keeps rivet's JSON body on a view that renders something else when it works."""
    if response.status_code >= 400:
        request.accepted_renderer = renderers.JSONRenderer()
        request.accepted_media_type = "application/json"
    return response


class MetricsView(RivetView):
    """``GET``: the queue gauges in the Prometheus text format (version 0.0.4)."""

    renderer_classes = [PrometheusRenderer]
    content_negotiation_class = FirstRenderer
    accepts_metrics_token = True

    def get_authenticators(self):
        return [MetricsTokenAuthentication(), *host_authenticators()]

    def finalize_response(self, request, response, *args, **kwargs):
        return super().finalize_response(request, json_errors(request, response), *args, **kwargs)

    @schema.metrics
    def get(self, request, *args, **kwargs) -> Response:
        try:
            require("prometheus_client", extra="metrics", feature="rivet/metrics/")
        except RivetConfigError as exc:
            raise ExtraMissing(str(exc)) from exc
        param = self.database_param()
        stores = queue_stores() if param is None else self.get_store()
        return Response(queue_exposition(stores), content_type=CONTENT_TYPE)


class FloorOnly(RivetPermission):
    """The schema and its docs: any authenticated user (they describe, they do not show)."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated)


class SchemaView(SpectacularAPIView):
    """The OpenAPI document of rivet's endpoints alone."""

    custom_settings = schema.SPECTACULAR
    schema = schema.RivetAutoSchema()

    def get_authenticators(self):
        return host_authenticators()

    def get_permissions(self):
        return [*permissions_for(self)[:-1], FloorOnly()]

    def get_exception_handler(self):
        return exception_handler

    def finalize_response(self, request, response, *args, **kwargs):
        return super().finalize_response(request, json_errors(request, response), *args, **kwargs)

    @rivet_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


#: Swagger UI's files a docs page loads, and their content types.
DOCS_ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
_SWAGGER_DIST = (
    Path(drf_spectacular_sidecar.__file__).parent / "static/drf_spectacular_sidecar/swagger-ui-dist"
)
#: drf-spectacular's own templates, whether or not the host installs its app, and rivet's script.
_TEMPLATES = Engine(
    dirs=[
        str(Path(drf_spectacular.__file__).parent / "templates"),
        str(Path(__file__).resolve().parent.parent / "templates"),
    ]
)


@require_safe
def docs_asset(request, name: str) -> HttpResponseBase:
    """One of Swagger UI's files; a long cache, as a package upgrade changes the page too."""
    if name not in DOCS_ASSETS:
        body = {"detail": f"no rivet endpoint at {request.path}", "code": "not_found"}
        return JsonResponse(body, status=404)
    response = FileResponse((_SWAGGER_DIST / name).open("rb"), content_type=DOCS_ASSETS[name])
    response["Cache-Control"] = "public, max-age=86400"
    return response


class SwaggerPageRenderer(renderers.BaseRenderer):
    """The docs page from drf-spectacular's template, with rivet's private template engine."""

    media_type = "text/html"
    format = "html"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        template = _TEMPLATES.get_template(renderer_context["view"].template_name)
        return template.render(Context(data)).encode()


class DocsView(SpectacularSwaggerView):
    """Swagger UI over the schema; its page and files come from the installed packages.

    The page is served to anyone: it holds no data, only the script that loads the schema,
    which needs a signed-in caller. A browser without a session (a host that authenticates by
    token or password alone) can only sign in from the page itself, with its Authorize button.
    """

    url_name = "rivet:schema"
    title = str(schema.SPECTACULAR["TITLE"])
    schema = schema.RivetAutoSchema()
    renderer_classes = [SwaggerPageRenderer]
    content_negotiation_class = FirstRenderer
    template_name_js = "rivet/api/docs.js"

    def get_authenticators(self):
        return host_authenticators()

    def get_permissions(self):
        return []

    def get_exception_handler(self):
        return exception_handler

    def finalize_response(self, request, response, *args, **kwargs):
        return super().finalize_response(request, json_errors(request, response), *args, **kwargs)

    def _swagger_ui_resource(self, filename: str) -> str:  # type: ignore[override]
        return reverse("rivet:docs-asset", args=[filename])

    def _swagger_ui_favicon(self) -> str:  # type: ignore[override]
        return reverse("rivet:docs-asset", args=["favicon-32x32.png"])

    @rivet_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        with patched_settings(schema.SPECTACULAR):
            response = super().get(request, *args, **kwargs)
        response.data["version"] = schema.SPECTACULAR["VERSION"]
        schemes = schema.security_schemes(host_authenticators())
        # Inside a <script>: "</" could end it early, whatever a scheme's description says.
        response.data["security_schemes"] = json.dumps(schemes).replace("</", "<\\/")
        return response


class NotFoundView(RivetView):
    """Any other path under rivet's prefix: 404 with rivet's JSON body, not an HTML page."""

    required_permission = VIEW

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        raise exceptions.NotFound(f"no rivet endpoint at {request.path}", code="not_found")

    def http_method_not_allowed(self, request, *args, **kwargs):
        raise exceptions.NotFound(f"no rivet endpoint at {request.path}", code="not_found")
