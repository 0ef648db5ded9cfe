"""scripts/find_postgres.py, the parts that need no server: URLs, .env, choosing sources, usage.

Its real runs (a server that answers, a throwaway cluster, nothing to be had) are in
tests/integration/test_find_postgres.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find_postgres.py"


@pytest.fixture(scope="module")
def fp():
    spec = importlib.util.spec_from_file_location("find_postgres_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_password_never_appears_in_a_message(fp):
    url = "postgres://app:s3cr%40t@db.example:5433/rivet?sslmode=require"
    assert fp.masked(url) == "postgres://app:***@db.example:5433/rivet?sslmode=require"
    assert fp.masked("postgres://app@db:5432/rivet") == "postgres://app@db:5432/rivet"


def test_the_probe_asks_the_maintenance_database_with_libpq_options_only(fp):
    url = "postgis://app:pw@db:5433/rivet?sslmode=require&conn_max_age=60"
    assert fp.maintenance_url(url) == "postgresql://app:pw@db:5433/postgres?sslmode=require"


def test_database_names_are_read_and_replaced_quoted(fp):
    url = "postgres://app@db:5432/rivet%20ci"
    assert fp.db_name(url) == "rivet ci"
    assert fp.with_db_name(url, "rivet ci_effect") == "postgres://app@db:5432/rivet%20ci_effect"
    assert fp.db_name("postgres://app@db:5432") == "rivet"


def test_only_postgres_schemes_are_postgres_urls(fp):
    assert fp.is_postgres_url("postgresql://db/x") and fp.is_postgres_url("POSTGRES://db/x")
    assert not fp.is_postgres_url("sqlite:///tmp/x.sqlite3")
    assert not fp.is_postgres_url("")


def test_dotenv_lines_with_export_quotes_and_comments(fp, tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "# a comment\nexport DATABASE_URL='postgres://a@h/x'\nEMPTY=\nnot a pair\nB=\"2\"\n"
    )
    assert fp.read_dotenv(dotenv) == {"DATABASE_URL": "postgres://a@h/x", "EMPTY": "", "B": "2"}
    assert fp.read_dotenv(tmp_path / "missing") == {}


def test_an_explicit_effect_database_is_kept_only_beside_the_callers_own_server(fp, monkeypatch):
    monkeypatch.setenv("EFFECT_DATABASE_URL", "postgres://a@h:5432/mine_fx")
    assert fp.effect_url_for("environment", "postgres://a@h:5432/mine") == (
        "postgres://a@h:5432/mine_fx"
    )
    # A server this script started has no such database: it derives one beside DATABASE_URL's.
    assert fp.effect_url_for("initdb", "postgres://p@127.0.0.1:5999/mine") == (
        "postgres://p@127.0.0.1:5999/mine_effect"
    )


def test_discovery_sources_are_named_or_refused(fp, monkeypatch):
    monkeypatch.delenv("RIVET_PG_DISCOVERY", raising=False)
    assert fp.enabled_sources() == ["url", "docker", "initdb"]
    monkeypatch.setenv("RIVET_PG_DISCOVERY", "url, initdb")
    assert fp.enabled_sources() == ["url", "initdb"]
    monkeypatch.setenv("RIVET_PG_DISCOVERY", "url,podman")
    with pytest.raises(ValueError, match="unknown source 'podman'"):
        fp.enabled_sources()


def test_usage_errors_exit_2_and_say_what_is_missing(fp, monkeypatch, capsys):
    assert fp.main([]) == 2
    assert fp.main(["start"]) == 2
    assert "unknown subcommand 'start'" in capsys.readouterr().err
    assert fp.main(["run", "--"]) == 2
    assert "nothing to run" in capsys.readouterr().err
    monkeypatch.setenv("RIVET_PG_DISCOVERY", "podman")
    assert fp.main(["run", "--", "true"]) == 2
    assert "unknown source 'podman'" in capsys.readouterr().err
