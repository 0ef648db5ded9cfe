"""The chaos report: aligned label/value lines, the invariant each line proves, the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    dead_note += f", {f.dead_cancelled} cancelled" if f.dead_cancelled else ""
    dead_note += f", {f.dead_other} other)" if f.dead_other else ")"
    lines = [
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
    h = verdict.history
    if h is not None:
        lines += [
            line(
                "history",
                h.changes,
                f"(task changes: {h.claims} claims, {h.heartbeats} heartbeats, {h.requeues} "
                f"requeues, {h.operator_sweeps} sweep burials; {h.effect_requests} effect "
                "requests)",
            ),
            line("overlapping leases", h.overlapping.n, proves("H1", "H1 leases never overlap")),
            line("claims too early", h.early.n, proves("H2", "H2 nothing runs early")),
            line("claims past bound", h.over_attempts.n, proves("H3", "H3 attempts bounded")),
            line(
                "requeued not dead",
                h.requeued_not_dead.n,
                proves(
                    "H3", f"H3 only a dead task is requeued ({h.operator_requeues} by an operator)"
                ),
            ),
            line("epochs not growing", h.epochs_back.n, proves("H4", "H4 epochs only grow")),
            line(
                "stale decisions",
                h.stale_decisions.n,
                proves("F2", "F2 no decision applied under a lost lease (history)"),
            ),
            line(
                "done no success",
                h.bad_answers.n,
                proves("H5", "H5 each done task's effect answer was a success"),
            ),
            line(
                "dead not designed",
                h.dead_not_designed.n,
                proves("D1", "D1 no task died with attempts left unless designed or cancelled"),
            ),
        ]
    t = verdict.ticks
    if t is not None:
        lines += [
            line(
                "schedule ticks",
                t.tick_tasks,
                f"({t.schedules} one-second schedules; {t.due} ticks due in "
                f"{t.window_secs:.0f} s of chaos)",
            ),
            line("ticks fired twice", t.fired_twice + t.not_due, proves("T1")),
            line("due ticks missing", t.missing, proves("T2")),
        ]
    return lines


def chaos_line(chaos: Mapping[str, int] | None) -> str:
    if chaos is None:
        return line("chaos events", "-", "(no event log: verify only)")
    detail = " / ".join(f"{kind} {chaos.get(kind, 0)}" for kind in KINDS)
    return line("chaos events", sum(chaos.get(kind, 0) for kind in KINDS), f"({detail})")


def verdict_lines(verdict: Verdict) -> list[str]:
    """One line for a run that held, one line per violated invariant otherwise."""
    if verdict.ok:
        return ["every invariant held: " + ", ".join(invariant_codes(verdict))]
    return [f"{v.code} FAILED: {v.message}" for v in verdict.violations]


def invariant_codes(verdict: Verdict) -> list[str]:
    """The invariants the verdict judged: T1 and T2 only with schedules."""
    codes = ["S1", "S2", "L1", "F2", "C1"]
    if verdict.history is not None:
        codes += ["H1", "H2", "H3", "H4", "H5", "D1"]
    return codes + ["T1", "T2"] if verdict.ticks is not None else codes


def run_summary(
    *,
    seed: int,
    verdict: Verdict,
    chaos: Mapping[str, int],
    outcome: Any,
    armed: tuple[int, int],
    wall_secs: float,
    faults: tuple[str, ...] = (),
    planned: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """One run as plain data: the campaign's table row and the --json document."""
    f = verdict.figures
    zombies = outcome.zombie_counts()
    return {
        "seed": seed,
        "ok": verdict.ok,
        "failed": verdict.failed_codes(),
        "violations": [f"{v.code}: {v.message}" for v in verdict.violations],
        "events": {kind: chaos.get(kind, 0) for kind in KINDS},
        "planned": dict(planned) if planned is not None else None,
        "not_carried_out": dict(outcome.not_carried_out),
        "zombies": zombies,
        "zombie_verdicts": [z.record() for z in outcome.zombies],
        "failpoints": {"armed": armed[0], "reached": armed[1]},
        "S1": f.duplicate_effects,
        "S2": f.done_without_effect,
        "L1": f.still_pending,
        "F2": f.fenced_writes,
        "C1": f.done_cancelled,
        **tick_summary(verdict),
        **history_summary(verdict),
        "cancels": dict(getattr(outcome, "cancels", {})),
        "requeues": dict(getattr(outcome, "requeues", {})),
        "requeue_asks": dict(getattr(outcome, "requeue_asks", {})),
        "sweeps": dict(getattr(outcome, "sweeps", {})),
        "effect_faults": dict(getattr(outcome, "effect_faults", {})),
        "figures": {
            "tasks_enqueued": f.tasks_enqueued,
            "effects_written": f.effects_written,
            "tasks_done": f.tasks_done,
            "dead_lettered": f.dead_lettered,
            "dead_worker_lost": f.dead_worker_lost,
            "dead_handler_error": f.dead_poison,
            "dead_cancelled": f.dead_cancelled,
            "dead_other": f.dead_other,
            "dead_not_designed": f.dead_not_designed,
        },
        "faults": list(faults),
        "wall_secs": round(wall_secs, 1),
    }


def history_summary(verdict: Verdict) -> dict[str, Any]:
    """H1-H5, D1 and the history's size for the summary; nothing without a history."""
    h = verdict.history
    if h is None:
        return {}
    return {
        "H1": h.overlapping.n,
        "H2": h.early.n,
        "H3": h.over_attempts.n + h.requeued_not_dead.n,
        "H4": h.epochs_back.n,
        "H5": h.bad_answers.n,
        "D1": h.dead_not_designed.n,
        "F2_history": h.stale_decisions.n,
        "history": {
            "changes": h.changes,
            "claims": h.claims,
            "heartbeats": h.heartbeats,
            "requeues": h.requeues,
            "operator_requeues": h.operator_requeues,
            "requeued_not_dead": h.requeued_not_dead.n,
            "operator_sweeps": h.operator_sweeps,
            "effect_requests": h.effect_requests,
        },
    }


def tick_summary(verdict: Verdict) -> dict[str, Any]:
    """T1, T2 and the schedules' figures for the summary; nothing without schedules."""
    t = verdict.ticks
    if t is None:
        return {}
    return {
        "T1": t.fired_twice + t.not_due,
        "T2": t.missing,
        "schedules": {
            "schedules": t.schedules,
            "tick_tasks": t.tick_tasks,
            "due": t.due,
            "fired_twice": t.fired_twice,
            "not_due": t.not_due,
            "missing": t.missing,
            "window_secs": round(t.window_secs, 1),
        },
    }


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """What the run did beyond the report: zombie verdicts, failpoints, events not carried out."""
    z = summary["zombies"]
    fp = summary["failpoints"]
    missed = summary["not_carried_out"]
    lines = [
        f"zombies: {z['fenced'] + z['unfenced']} bit (another worker claimed their task while "
        f"they slept): {z['fenced']} fenced, {z['unfenced']} not fenced; {z['not bitten']} "
        "could not be made to bite (tried again)"
        + (
            f"; {z['could not write']} woke while the database was unreachable (their writes "
            "failed: not tested)"
            if z.get("could not write")
            else ""
        ),
        f"failpoints: {fp['armed']} workers armed, {fp['reached']} reached after_effect_before_ack",
    ]
    cancels = summary.get("cancels")
    if cancels:
        detail = ", ".join(f"{n} {what}" for what, n in cancels.items() if n)
        lines.append(
            f"operator cancels: {sum(cancels.values())} ({detail or 'none'}); "
            f"{summary.get('C1', 0)} of the cancelled tasks ended done   <- C1"
        )
    requeues = summary.get("requeues")
    if requeues:
        detail = ", ".join(f"{n} {what}" for what, n in requeues.items())
        lines.append(f"operator requeues: {sum(requeues.values())} ({detail})")
    asked = summary.get("requeue_asks")
    if asked:
        accepted = asked.get("accepted", 0)
        detail = ", ".join(f"{n} {what}" for what, n in asked.items() if what != "accepted")
        lines.append(
            f"operator requeues of tasks seen not dead: {sum(asked.values()) - accepted} "
            f"({detail}), {accepted} accepted by the store (the history judges each: a task "
            "that was still not dead)   <- H3"
        )
    sweeps = summary.get("sweeps")
    if sweeps:
        lines.append(
            f"operator sweeps: {sweeps.get('sweeps', 0)} ({sweeps.get('after a cancel mark', 0)} "
            f"right after a cancel marked a leased task), {sweeps.get('buried', 0)} task(s) "
            "buried (the history judges each: no live lease)   <- H1"
        )
    effect_faults = summary.get("effect_faults")
    if effect_faults:
        detail = " / ".join(f"{what} {n}" for what, n in effect_faults.items())
        lines.append(f"effect faults (recording proxy, during the chaos): {detail}")
    figures = summary.get("figures", {})
    if "dead_not_designed" in figures:
        lines.append(
            f"dead tasks not designed to die (plain chaos tasks, not cancelled): "
            f"{figures['dead_not_designed']} of {figures.get('dead_lettered', 0)} dead"
            + (
                f"; {summary['D1']} of them with attempts left in their life   <- D1"
                if "D1" in summary
                else ""
            )
        )
    planned = summary.get("planned")
    if planned:
        lines.append(planned_line(planned, missed))
    if any(missed.values()):
        detail = " / ".join(f"{kind} {missed.get(kind, 0)}" for kind in KINDS)
        lines.append(f"events not carried out (no worker to break before the end): {detail}")
    return lines


def planned_line(planned: Mapping[str, int], missed: Mapping[str, int]) -> str:
    """Planned events against those carried out, by kind, and the share carried out."""
    total = sum(planned.values())
    done = {kind: planned.get(kind, 0) - missed.get(kind, 0) for kind in KINDS}
    share = 100.0 * sum(done.values()) / total if total else 100.0
    detail = " / ".join(f"{kind} {done[kind]} of {planned.get(kind, 0)}" for kind in KINDS)
    return f"planned events: {sum(done.values())} of {total} carried out ({share:.0f} %): {detail}"
