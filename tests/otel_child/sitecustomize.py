"""Run at start-up by a child process whose PYTHONPATH starts with this folder (tests only).

With ``TEST_OTEL_SPANS`` naming a folder, the process gets the OpenTelemetry SDK as its tracer
provider, with the SDK's in-memory exporter; each span is also written, one JSON line, to
``<folder>/<pid>.jsonl``: when it starts (a process killed mid-attempt never ends its span)
and when it ends. tests/acceptance/test_tracing.py reads them back.
"""

from __future__ import annotations

import json
import os

FOLDER = os.environ.get("TEST_OTEL_SPANS")

if FOLDER:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def _write(phase: str, span) -> None:
        parent = span.parent
        line = {
            "phase": phase,
            "pid": os.getpid(),
            "name": span.name,
            "trace_id": format(span.context.trace_id, "032x"),
            "span_id": format(span.context.span_id, "016x"),
            "parent_id": None if parent is None else format(parent.span_id, "016x"),
            "attributes": dict(span.attributes or {}),
            "events": [event.name for event in getattr(span, "events", ())],
            "event_attributes": {
                event.name: dict(event.attributes or {}) for event in getattr(span, "events", ())
            },
        }
        with open(os.path.join(FOLDER, f"{os.getpid()}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")

    class FileExporter(InMemorySpanExporter):
        """The in-memory exporter, and a line per finished span."""

        def export(self, spans):
            for span in spans:
                _write("end", span)
            return super().export(spans)

    class StartLines(SpanProcessor):
        def on_start(self, span, parent_context=None) -> None:
            _write("start", span)

    _provider = TracerProvider()
    _provider.add_span_processor(StartLines())
    _provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(_provider)
