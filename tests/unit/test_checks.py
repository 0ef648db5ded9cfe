"""System checks of settings.RIVET share the worker's option table: one parser per setting."""

from __future__ import annotations

from rivet.checks import check_rivet_settings


def messages(settings, **rivet) -> list[tuple[str, str]]:
    settings.RIVET = {**settings.RIVET, **rivet}
    return [(error.id, error.msg) for error in check_rivet_settings()]


def test_default_settings_pass(settings):
    assert messages(settings) == []


def test_a_bad_worker_setting_is_refused_as_the_command_would_refuse_it(settings):
    found = messages(settings, LEASE_TTL_SECS=0, CONCURRENCY=True, RETRY_BACKOFF_SECS=-1)
    assert found == [
        (
            "rivet.E002",
            "RIVET['LEASE_TTL_SECS'] must be a number of seconds > 0 and <= 86400, got 0",
        ),
        ("rivet.E002", "RIVET['CONCURRENCY'] must be an integer from 1 to 1024, got True"),
        (
            "rivet.E002",
            "RIVET['RETRY_BACKOFF_SECS'] must be a number of seconds between 0 and 86400, got -1",
        ),
    ]


def test_unknown_keys_and_bad_limits_are_named(settings):
    found = messages(settings, LEASE_TTL=5, MAX_ATTEMPTS=0, QUEUE="no spaces")
    assert ("rivet.E001", "unknown setting RIVET['LEASE_TTL']") in found
    assert ("rivet.E002", "RIVET['MAX_ATTEMPTS'] must be a positive number, got 0") in found
    assert any("RIVET['QUEUE'] must be queue names" in msg for _, msg in found)


def test_the_errors_kept_bound_is_an_integer_from_1_to_1000(settings):
    assert messages(settings, MAX_ERRORS_KEPT=1) == []
    assert messages(settings, MAX_ERRORS_KEPT=1000) == []
    for bad in (0, 1001, 2.5, "20", True, None):
        assert messages(settings, MAX_ERRORS_KEPT=bad) == [
            (
                "rivet.E002",
                f"RIVET['MAX_ERRORS_KEPT'] must be an integer from 1 to 1000, got {bad!r}",
            )
        ], bad


def test_the_aging_step_is_none_or_seconds_up_to_ten_years(settings):
    for good in (None, 0.5, 60, 315_576_000):
        assert messages(settings, PRIORITY_AGING_SECS=good) == [], good
    for bad in (0, -1, 315_576_001, "60", True):
        found = messages(settings, PRIORITY_AGING_SECS=bad)
        assert [error_id for error_id, _ in found] == ["rivet.E002"], bad
        assert found[0][1] == (
            "RIVET['PRIORITY_AGING_SECS'] must be None or a number of seconds above 0 and at "
            f"most 315576000 (ten years), got {bad!r}"
        )


def test_the_memory_store_is_refused_outside_a_test_run(settings, monkeypatch):
    from django.test import utils

    assert messages(settings, STORE="memory") == []  # pytest-django set up the test environment
    monkeypatch.delattr(utils._TestState, "saved_data")  # as in runserver or rivet_worker
    found = messages(settings, STORE="memory")
    assert [error_id for error_id, _ in found] == ["rivet.E006"]
    assert "no worker in another process can run them" in found[0][1]
    assert messages(settings, STORE="auto") == []


def test_manage_py_check_refuses_the_memory_store(tmp_path):
    """A real process outside a test run (as a worker or runserver starts) fails rivet.E006."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "memory_settings.py").write_text(
        "from chaos_project.settings import *  # noqa: F403\n"
        "RIVET = {**RIVET, 'STORE': 'memory'}  # noqa: F405\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memory_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)]),
        "DATABASE_URL": "sqlite://:memory:",
        "EFFECT_DATABASE_URL": "sqlite://:memory:",
    }
    done = subprocess.run(
        [sys.executable, str(root / "manage.py"), "check"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(rivet.E006) RIVET['STORE'] is 'memory' outside a test run" in done.stderr


def test_the_listen_url_is_none_or_a_url_libpq_reads(settings):
    assert messages(settings, LISTEN_DATABASE_URL="postgres://db-primary:5432") == []
    assert messages(settings, LISTEN_DATABASE_URL="host=db port=5432") == []
    for bad, reason in (
        (5432, "got int 5432"),
        ("", "got str ''"),
        ("postgres://db/x?nope=1", 'invalid URI query parameter: "nope"'),
    ):
        assert messages(settings, LISTEN_DATABASE_URL=bad) == [
            (
                "rivet.E002",
                f"RIVET['LISTEN_DATABASE_URL'] must be None or a PostgreSQL URL: {reason}",
            )
        ], bad


# -- rivet.W012: the request's transaction and the queue's database -------------------------


def atomic_warnings(monkeypatch, atomic: dict[str, bool]) -> list[str]:
    """rivet.W012's messages with ATOMIC_REQUESTS set as given on the tests' aliases."""
    from django.db import connections

    for alias, on in atomic.items():
        monkeypatch.setitem(connections.settings[alias], "ATOMIC_REQUESTS", on)
    return [error.msg for error in check_rivet_settings() if error.id == "rivet.W012"]


def test_no_alias_with_atomic_requests_gives_no_warning(monkeypatch):
    assert atomic_warnings(monkeypatch, {"default": False, "sqlite": False}) == []


def test_atomic_requests_on_another_alias_than_the_queue_s_is_a_warning(monkeypatch):
    """The report's setup: the request is atomic on one database, the queue lives on another."""
    (found,) = atomic_warnings(monkeypatch, {"default": False, "sqlite": True})
    assert found.startswith("ATOMIC_REQUESTS is on for 'sqlite' but not for 'default', which")
    assert "the task stays (a worker runs it) when the view raises" in found


def test_each_queue_alias_without_atomic_requests_is_named(monkeypatch, settings):
    settings.RIVET = {**settings.RIVET, "QUEUE_DATABASES": {"mail": "sqlite"}}
    (found,) = atomic_warnings(monkeypatch, {"default": True, "sqlite": False})
    assert "on for 'default' but not for 'sqlite'" in found
    assert atomic_warnings(monkeypatch, {"default": True, "sqlite": True}) == []


def test_atomic_requests_on_the_queue_s_alias_is_enough(monkeypatch):
    assert atomic_warnings(monkeypatch, {"default": True, "sqlite": False}) == []
    assert atomic_warnings(monkeypatch, {"default": True, "sqlite": True}) == []


def test_the_memory_store_has_no_transactions_to_warn_about(monkeypatch, settings):
    settings.RIVET = {**settings.RIVET, "STORE": "memory"}
    assert atomic_warnings(monkeypatch, {"default": False, "sqlite": True}) == []
