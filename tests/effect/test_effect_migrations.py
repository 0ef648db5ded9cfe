"""effect_project's models (effects, rivet.idempotency) have all their migrations."""


def test_effect_project_has_no_missing_migrations(effect_command):
    done = effect_command("makemigrations", "--check", "--dry-run")
    assert done.returncode == 0, (
        f"run makemigrations for effect_project:\n{done.stdout}{done.stderr}"
    )
    assert "No changes detected" in done.stdout
