"""The effect service continues the caller's trace: one SERVER span per request (rivet.tracing)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from rivet import tracing
from rivet.idempotency.decorators import REPLAY_HEADER


class TraceMiddleware:
    """Each request runs in a span whose parent is the ``traceparent`` it came with, if any."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = f"{request.method} {request.path}"
        with tracing.server_span(name, request.headers, **{"http.method": request.method}) as span:
            response = self.get_response(request)
            if span is not None:
                span.set_attribute("http.status_code", response.status_code)
                replay = response.headers.get(REPLAY_HEADER, "").lower() == "true"
                span.set_attribute("effect.replay", replay)
            return response
