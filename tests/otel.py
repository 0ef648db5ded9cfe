"""The OpenTelemetry SDK's in-memory exporter, installed once per process as the global provider.

In this process the ``spans`` fixture (tests/conftest.py) hands it out, emptied. Child processes
(workers, the effect service) get the same through ``sitecustomize`` in tests/otel_child/, which
also writes each span to a file the test reads back: see that module.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter: InMemorySpanExporter | None = None


def exporter() -> InMemorySpanExporter:
    """The exporter every span of this process ends in (the provider is set on first use)."""
    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    return _exporter


def hex_id(value: int, width: int = 32) -> str:
    return format(value, f"0{width}x")
