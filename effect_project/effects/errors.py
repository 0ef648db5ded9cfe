"""The effect service answers in JSON even when something breaks: 503 for its database, 500 else.

A client must never have to parse an HTML error page: rivet's effect client reads a 5xx as
"unavailable, retry" and shows the ``detail`` in its error.
"""

from __future__ import annotations

from django.db import DatabaseError
from django.http import JsonResponse
from rest_framework.response import Response
from rest_framework.views import exception_handler

from rivet.dberrors import explain


def json_exception_handler(exc, context):
    """DRF's handler, a stable ``code`` beside every ``detail``, and a 503 for the database."""
    response = exception_handler(exc, context)
    if response is None and isinstance(exc, DatabaseError):
        detail = explain(exc, "default", "EFFECT_DATABASE_URL")
        return Response({"detail": detail, "code": "database_unavailable"}, status=503)
    if response is not None and isinstance(response.data, dict) and "code" not in response.data:
        detail = response.data.get("detail")
        response.data["code"] = str(getattr(detail, "code", None) or exc.default_code)
    return response


def server_error(request, *args, **kwargs):
    """handler500: the same JSON shape as every other error of the service."""
    return JsonResponse({"detail": "internal error", "code": "server_error"}, status=500)


def bad_request(request, exception=None, *args, **kwargs):
    """handler400 (a Host not in ALLOWED_HOSTS, a malformed request Django refuses)."""
    detail = str(exception) if exception is not None and str(exception) else "bad request"
    return JsonResponse({"detail": detail, "code": "bad_request"}, status=400)


def permission_denied(request, *args, **kwargs):
    """handler403."""
    return JsonResponse({"detail": "permission denied", "code": "permission_denied"}, status=403)


def not_found(request, *args, **kwargs):
    """handler404: a path the service does not serve, answered as every other error is."""
    return JsonResponse(
        {
            "detail": f"no such path: {request.path}; the service serves POST /effects, "
            "GET /effects/<key>, GET /verify and GET /health",
            "code": "not_found",
        },
        status=404,
    )
