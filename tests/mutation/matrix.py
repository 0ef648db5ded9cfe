"""``make mutation``: every store mutant against the conformance suite and every mutant the
chaos harness can run (PostgreSQL, the effect service, the handler) through a quick chaos run
on three seeds; prints the table docs/chaos.md shows, with what caught each.

    python -m tests.mutation.matrix [--seeds 1,2,3] [--only NAME,...] [--out PATH] [--chaos-only]

The chaos harness runs on PostgreSQL only, so a SQLite or memory-store mutant has conformance
rows alone; the effect service's and the handler's have chaos rows alone (the conformance suite
is the store's). Exit status 1 when any mutant passed a harness it is run through: a row
nothing catches.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.mutation import CHAOS_STORES, CONFORMANCE_STORES, ENV, MUTATIONS

ROOT = Path(__file__).resolve().parents[2]
QUICK_RUN = ("--tasks", "500", "--workers", "4", "--duration-secs", "15")


def conformance(names: list[str], report: Path) -> dict[str, list[str]]:
    """{mutant: the conformance checks it failed}, from one pytest run of every row."""
    env = {**os.environ, "RIVET_MUTATION_MATRIX": "1", "RIVET_MUTATION_REPORT": str(report)}
    selected = " or ".join(f"[{name}]" for name in names)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", selected,
         "tests/integration/test_mutation_conformance.py"],
        cwd=ROOT, env=env, check=False,
    )  # fmt: skip
    found: dict[str, list[str]] = {}
    for line in report.read_text().splitlines() if report.exists() else []:
        row = json.loads(line)
        found[row["mutant"]] = row["conformance"]
    return found


def chaos(name: str, seed: int, workdir: Path, tries: int = 3) -> dict:
    """One quick chaos run of the mutant: its summary (failed invariants, zombie verdicts).

    A run that could not be carried out (no JSON: e.g. the server refused a connection, "too
    many clients", on a shared machine) is tried again; it is not a verdict.
    """
    for _ in range(tries):
        summary = _chaos_once(name, seed, workdir)
        if "error" not in summary:
            return summary
    return summary


def _chaos_once(name: str, seed: int, workdir: Path) -> dict:
    out = workdir / f"{name}-{seed}.json"
    env = {**os.environ, ENV: name, "DJANGO_SETTINGS_MODULE": "tests.mutation.settings"}
    extra: list[str] = ["--own-effect-service"]
    service = None
    if MUTATIONS[name].store == "effect":  # the effect service runs the mutant, not the workers
        service, url = _effect_service(name, workdir)
        extra = ["--effect-url", url]
        env = {k: v for k, v in os.environ.items() if k not in (ENV, "DJANGO_SETTINGS_MODULE")}
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "rivet_chaos", *QUICK_RUN, "--seed", str(seed),
             "--json", str(out), *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        if service is not None:
            service.terminate()
            service.wait(timeout=30)
    (workdir / f"{name}-{seed}.log").write_text(done.stdout + done.stderr)
    if not out.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"seed": seed, "error": last[:200]}
    return json.loads(out.read_text())


def _effect_service(name: str, workdir: Path) -> tuple[subprocess.Popen, str]:
    """The effect service with the mutant applied (tests.mutation.effect_service), answering."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, ENV: name, "RIVET_READ_DOTENV": "0"}
    log = (workdir / f"{name}-effect-service.log").open("ab")
    service = subprocess.Popen(
        [sys.executable, "-m", "tests.mutation.effect_service", "serve", "--bind",
         f"127.0.0.1:{port}", "--threads", "16"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1.0):
                return service, url
        except OSError:  # not answering yet (URLError, a refused or reset connection)
            if service.poll() is not None:
                break
            time.sleep(0.1)
    service.kill()
    raise RuntimeError(f"the mutant effect service did not answer (log: {log.name})")


def caught_by(summary: dict) -> str:
    """The invariants a run failed, F2 split into its parts: per task, or a stale write applied."""
    if "error" in summary:
        return f"error ({summary['error']})"
    parts = []
    for text in summary.get("violations", []):
        code = text.split(":", 1)[0]
        if code == "F2" and "finished by a write naming another epoch" in text:
            parts.append("F2 stale write applied")
        elif code == "F2" and "applied under an epoch the task no longer held" in text:
            parts.append("F2 stale decision (history)")
        elif code == "F2" and "zombie(s) woke" in text:
            parts.append("F2 per task")
        elif code == "F2":
            parts.append("F2 nothing fenced")
        else:
            parts.append(code)
    return ", ".join(dict.fromkeys(parts)) or "held"


def table(rows: list[tuple[str, str, list[str], list[str]]]) -> list[str]:
    lines = [
        "| mutant | guard removed | conformance checks failed | chaos, three quick-run seeds |",
        "|---|---|---|---|",
    ]
    for name, what, checks, runs in rows:
        shown = ", ".join(f"`{c}`" for c in checks[:3]) + (
            f" (+{len(checks) - 3})" if len(checks) > 3 else ""
        )
        found = f"{len(checks)}: {shown or 'none'}"
        if MUTATIONS[name].store not in CONFORMANCE_STORES:
            found = "n/a (not a store)"
        lines.append(f"| {name} | {what} | {found} | {'; '.join(runs)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--only", default="", help="comma-separated mutants (default: all)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--chaos-only", action="store_true", help="skip the conformance rows (run elsewhere)"
    )
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(MUTATIONS)
    seeds = [int(s) for s in args.seeds.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="rivet-mutation-"))
    print(f"mutation matrix: {len(names)} mutant(s), seeds {seeds}; runs in {workdir}")
    stores = [n for n in names if MUTATIONS[n].store in CONFORMANCE_STORES]
    if args.chaos_only:
        stores = []
    checks = conformance(stores, workdir / "conformance.jsonl") if stores else {}
    rows, missed = [], []
    for name in names:
        mutation = MUTATIONS[name]
        if name in stores and not checks.get(name):
            missed.append(f"{name}: conformance")
        runs = ["n/a (the chaos harness runs on PostgreSQL)"]
        if mutation.store in CHAOS_STORES:
            runs = []
            for seed in seeds:
                verdict = caught_by(chaos(name, seed, workdir))
                print(f"  {name} seed {seed}: {verdict}", flush=True)
                runs.append(f"{seed}: {verdict}")
                if verdict == "held" or verdict.startswith("error"):
                    missed.append(f"{name}: chaos seed {seed} {verdict}")
        rows.append((name, mutation.what, checks.get(name, []), runs))
    lines = table(rows)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    if missed:
        print("NOT CAUGHT: " + "; ".join(missed))
        return 1
    print("every mutant was caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
