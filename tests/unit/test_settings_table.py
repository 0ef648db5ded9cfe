"""The one table of settings (rivet.settings_table) and what is derived from it: the defaults,
the system checks, the worker's flags and their --help, and the docs' tables. Then the
idempotency settings, which moved into settings.RIVET: the old names still work, with a warning.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from rivet.checks import check_rivet_settings
from rivet.conf import DEFAULTS, rivet_settings
from rivet.idempotency.checks import check_idempotency_settings
from rivet.idempotency.conf import setting
from rivet.settings_table import BY_KEY, DOC_TABLES, SETTINGS, fill_doc, plain
from rivet.worker.options import OPTIONS, OptionError, resolve

ROOT = Path(__file__).resolve().parents[2]
WORKER_KEYS = [entry for entry in SETTINGS if entry.key and entry.flag and not entry.switch]
CHECKED = [entry for entry in SETTINGS if entry.key and entry.check]


class Bad:
    """A value no checked setting accepts, and that every worker option's parser refuses."""

    def __repr__(self) -> str:
        return "<bad value>"


def found(settings, **rivet) -> list[tuple[str, str]]:
    settings.RIVET = rivet
    return [(m.id, m.msg) for m in [*check_rivet_settings(), *check_idempotency_settings()]]


def test_the_defaults_are_the_table_s_and_each_one_reaches_rivet_settings(settings):
    assert DEFAULTS == {entry.key: entry.default for entry in SETTINGS if entry.key}
    settings.RIVET = {}
    for key, default in DEFAULTS.items():
        assert getattr(rivet_settings, key) == default, key
    assert found(settings) == []


def test_every_setting_of_the_table_is_a_known_key(settings):
    """RIVET['IDEMPOTENCY_RETENTION_SECS'] was refused as unknown (rivet.E001) before the move."""
    assert [error for error in found(settings, **DEFAULTS) if error[0] == "rivet.E001"] == []


@pytest.mark.parametrize("entry", CHECKED, ids=lambda entry: entry.key)
def test_each_bad_value_is_refused_by_its_check_naming_the_key(settings, entry):
    errors = [
        error for error in found(settings, **{entry.key: Bad()}) if error[1].find(entry.key) > 0
    ]
    assert [error_id for error_id, _ in errors] == [entry.check], errors
    assert errors[0][1].startswith(f"RIVET[{entry.key!r}] "), errors


@pytest.mark.parametrize("entry", WORKER_KEYS, ids=lambda entry: entry.key)
def test_the_check_and_the_worker_refuse_a_bad_value_in_the_same_words(settings, entry):
    """From the setting, the flag and the variable: the same message, only its source differs."""
    bad = "no such value"
    (check,) = [msg for error_id, msg in found(settings, **{entry.key: bad}) if entry.key in msg]
    said = {}
    for flags, env, source in [
        ({}, {}, f"RIVET[{entry.key!r}]"),
        ({entry.dest: bad}, {}, entry.flag),
        ({}, {entry.env: bad}, entry.env),
    ]:
        with pytest.raises(OptionError) as caught:
            resolve(flags, env)
        assert str(caught.value).startswith(f"{source} must be "), caught.value
        said[source] = str(caught.value).removeprefix(source)
    assert len(set(said.values())) == 1, said
    assert check == f"RIVET[{entry.key!r}]{said[entry.flag]}"


def test_the_worker_options_are_the_table_s_entries_with_a_flag():
    assert [(o.flag, o.env, o.setting) for o in OPTIONS] == [
        (entry.flag, entry.env, entry.key) for entry in SETTINGS if entry.env
    ]


def test_the_worker_help_shows_each_option_s_help_and_variable():
    from rivet.management.commands.rivet_worker import Command

    text = " ".join(Command().create_parser("manage.py", "rivet_worker").format_help().split())
    for entry in SETTINGS:
        if entry.flag is None:
            continue
        help_text = plain(entry.help).replace("%%", "%")
        assert "](" not in help_text and "`" not in help_text, help_text
        shown = f"{help_text} [{entry.env}]" if entry.env else help_text
        assert shown in text, entry.flag


@pytest.mark.parametrize("page", sorted(DOC_TABLES))
def test_the_docs_tables_are_the_ones_the_table_draws(page):
    """python scripts/settings_docs.py --write redraws a stale one."""
    text = (ROOT / "docs" / page).read_text()
    assert fill_doc(text, DOC_TABLES[page]()) == text


def test_the_docs_settings_table_has_a_row_per_key_and_the_workers_one_a_row_per_flag():
    settings_page = DOC_TABLES["reference/settings.md"]()
    assert re.findall(r"^\| `([A-Z_]+)` \|", settings_page, flags=re.MULTILINE) == list(DEFAULTS)
    workers_page = DOC_TABLES["workers.md"]()
    flags = re.findall(r"^\| `(--[a-z-]+)", workers_page, flags=re.MULTILINE)
    assert flags == [entry.flag for entry in SETTINGS if entry.flag]


# -- the idempotency settings: RIVET keys now, the old top-level names deprecated -------------

RETENTION, BODY = "IDEMPOTENCY_RETENTION_SECS", "IDEMPOTENCY_MAX_BODY_BYTES"


def idempotency_messages() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in check_idempotency_settings()]


def test_the_idempotency_settings_are_rivet_keys(settings):
    settings.RIVET = {RETENTION: 3600, BODY: 1000}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (setting(RETENTION), setting(BODY)) == (3600, 1000)
    assert idempotency_messages() == []
    settings.RIVET = {}
    assert (setting(RETENTION), setting(BODY)) == (BY_KEY[RETENTION].default, 64 * 1024)


def test_a_bad_idempotency_setting_is_refused_by_its_old_check_id(settings):
    settings.RIVET = {RETENTION: 0, BODY: True}
    assert idempotency_messages() == [
        ("rivet_idempotency.E001", f"RIVET[{RETENTION!r}] must be a positive whole number, got 0"),
        ("rivet_idempotency.E001", f"RIVET[{BODY!r}] must be a positive whole number, got True"),
    ]


def test_the_old_name_still_works_with_a_deprecation_warning(settings):
    settings.RIVET = {}
    setattr(settings, RETENTION, 3600)
    with pytest.warns(DeprecationWarning, match=rf"settings\.{RETENTION} is deprecated: set RIVET"):
        assert setting(RETENTION) == 3600
    ((error_id, message),) = idempotency_messages()
    assert error_id == "rivet_idempotency.W001"
    assert message.startswith(f"settings.{RETENTION} is deprecated: set RIVET[{RETENTION!r}]")


def test_a_bad_value_under_the_old_name_is_refused_naming_the_old_name(settings):
    settings.RIVET = {}
    setattr(settings, BODY, -1)
    assert ("rivet_idempotency.E001", f"{BODY} must be a positive whole number, got -1") in (
        idempotency_messages()
    )


def test_both_names_set_to_different_values_are_refused(settings):
    setattr(settings, RETENTION, 3600)
    settings.RIVET = {RETENTION: 3600}
    assert [error_id for error_id, _ in idempotency_messages()] == ["rivet_idempotency.W001"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert setting(RETENTION) == 3600  # the RIVET key is read: no warning
    settings.RIVET = {RETENTION: 7200}
    ((error_id, message),) = idempotency_messages()
    assert error_id == "rivet_idempotency.E002"
    assert message == (
        f"settings.{RETENTION} (3600) and RIVET[{RETENTION!r}] (7200) are both set, "
        "to different values"
    )


def manage_py_check(tmp_path, settings_text: str):
    """``manage.py check`` in a process of its own, on the effect service's settings plus
    ``settings_text``."""
    import os
    import subprocess
    import sys

    (tmp_path / "moved_settings.py").write_text(
        f"from effect_project.settings import *  # noqa: F403\n{settings_text}"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "moved_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DATABASE_URL": "sqlite://:memory:",
        "EFFECT_DATABASE_URL": "sqlite://:memory:",
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_manage_py_check_warns_of_an_old_name_and_refuses_two_values(tmp_path):
    done = manage_py_check(tmp_path, f"RIVET = {{}}\n{RETENTION} = 3600\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(rivet_idempotency.W001) settings.{RETENTION} is deprecated" in done.stderr
    assert f"HINT: move it into settings.RIVET: RIVET = {{..., {RETENTION!r}: 3600}}" in (
        done.stderr
    )
    done = manage_py_check(tmp_path, f"RIVET = {{{RETENTION!r}: 60}}\n{RETENTION} = 3600\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(rivet_idempotency.E002)" in done.stderr
