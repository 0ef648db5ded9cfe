"""The chaos report: aligned label/value lines, the invariant each line proves, the verdict."""

from __future__ import annotations

from collections.abc import Mapping

from chaos_project.chaos.plan import KINDS
from chaos_project.chaos.verifier import Verdict

LABEL_WIDTH = 20
VALUE_WIDTH = 6
F2_NOTE = "proof F2 fired and was handled"


def line(label: str, value: int | str, note: str = "") -> str:
    """``label`` left-aligned, ``value`` right-aligned, then the note three spaces on."""
    text = f"{label:<{LABEL_WIDTH}}{value:>{VALUE_WIDTH}}"
    return f"{text}   {note}" if note else text


def report_lines(verdict: Verdict, chaos: Mapping[str, int] | None) -> list[str]:
    """The report, figure by figure; ``chaos`` is None when no event log was read."""
    f = verdict.figures
    failed = set(verdict.failed_codes())

    def proves(code: str, text: str | None = None) -> str:
        mark = f"<- {text or code}"
        return f"{mark}   FAILED" if code in failed else mark

    dead_note = f"({f.dead_worker_lost} worker lost, {f.dead_poison} poison"
    dead_note += f", {f.dead_other} other)" if f.dead_other else ")"
    return [
        line("tasks enqueued", f.tasks_enqueued),
        chaos_line(chaos),
        line("effects written", f.effects_written),
        line("tasks done", f.tasks_done),
        line("duplicate effects", f.duplicate_effects, proves("S1")),
        line("done without effect", f.done_without_effect, proves("S2")),
        line("tasks still pending", f.still_pending, proves("L1")),
        line("dead-lettered", f.dead_lettered, dead_note),
        line("fenced acks", f.fenced_writes, proves("F2", F2_NOTE)),
    ]


def chaos_line(chaos: Mapping[str, int] | None) -> str:
    if chaos is None:
        return line("chaos events", "-", "(no event log: verify only)")
    detail = " / ".join(f"{kind} {chaos.get(kind, 0)}" for kind in KINDS)
    return line("chaos events", sum(chaos.get(kind, 0) for kind in KINDS), f"({detail})")


def verdict_lines(verdict: Verdict) -> list[str]:
    """One line for a run that held, one line per violated invariant otherwise."""
    if verdict.ok:
        return ["every invariant held: S1, S2, L1, F2"]
    return [f"{v.code} FAILED: {v.message}" for v in verdict.violations]
