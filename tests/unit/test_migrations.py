"""The one migration check: no model of either project changed without its migration.

``makemigrations --check --dry-run`` runs once per project, as its own ``manage.py`` would, on an
in-memory SQLite database (it reads models, not tables, so it needs no server): the host project
(rivet and chaos_project) and the effect service (its effects and rivet.idempotency). Together
they cover every app that ships migrations. ``make lint`` runs this same test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROJECTS = {
    "chaos_project": "rivet and chaos_project",
    "effect_project": "effect_project.effects and rivet.idempotency",
}


def makemigrations_check(settings_module: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RIVET_")}
    env.update(
        DJANGO_SETTINGS_MODULE=settings_module,
        DATABASE_URL="sqlite://:memory:",
        EFFECT_DATABASE_URL="sqlite://:memory:",
        RIVET_READ_DOTENV="0",
    )
    return subprocess.run(
        [sys.executable, "-m", "django", "makemigrations", "--check", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("project", sorted(PROJECTS))
def test_every_model_change_has_its_migration(project):
    done = makemigrations_check(f"{project}.settings")
    assert done.returncode == 0, (
        f"makemigrations --check exited {done.returncode} for {project} ({PROJECTS[project]}): "
        f"a model changed without a migration; run `DJANGO_SETTINGS_MODULE={project}.settings "
        f"python -m django makemigrations`.\n{done.stdout}{done.stderr}"
    )
    assert "No changes detected" in done.stdout
