"""The API reference (docs/reference/api.md, mkdocstrings) documents every public name, field,
attribute and parameter of ``rivet.__all__`` and ``rivet.errors``, read from the source as the
site reads it (griffe, Sphinx-style docstrings). tests/acceptance/test_docs_site.py checks the
built page: what is hidden here stays hidden there."""

from __future__ import annotations

from pathlib import Path

import griffe
import pytest

import rivet

ROOT = Path(__file__).resolve().parents[2]
#: Public-looking members the page leaves out on purpose (its mkdocstrings filters).
HIDDEN = {"rivet.jobs.JobContext.for_claimed"}


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    return griffe.load("rivet", search_paths=[str(ROOT)], docstring_parser="sphinx")


def public_objects(package) -> list[griffe.Object]:
    names = [name for name in rivet.__all__ if name != "__version__"]
    found = [package[f"{rivet._EXPORTS[name].removeprefix('rivet.')}.{name}"] for name in names]
    errors = package["errors"]
    found += [
        member
        for name, member in errors.members.items()
        if not member.is_alias
        and member.is_class
        and not name.startswith("_")
        and member not in found
    ]
    return found


def undocumented_parameters(function: griffe.Function) -> list[str]:
    documented = {}
    if function.docstring is not None:
        for section in function.docstring.parse("sphinx"):
            if section.kind is griffe.DocstringSectionKind.parameters:
                documented.update({item.name: item.description for item in section.value})
    wanted = [
        parameter.name
        for parameter in function.parameters
        if parameter.name not in ("self", "cls")
        and parameter.kind
        not in (griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword)
    ]
    return [f"{function.path}({name})" for name in wanted if not documented.get(name, "").strip()]


def gaps(objects) -> list[str]:
    """Each public object, member or parameter without a description."""
    missing = []
    for obj in objects:
        if obj.is_alias:
            obj = obj.final_target
        if not (obj.docstring and obj.docstring.value.strip()):
            missing.append(obj.path)
        if obj.is_function:
            missing += undocumented_parameters(obj)
        if obj.is_class:
            for name, member in obj.members.items():
                if name.startswith("_") or member.path in HIDDEN or member.is_alias:
                    continue
                if not (member.docstring and member.docstring.value.strip()):
                    missing.append(member.path)
                if member.is_function:
                    missing += undocumented_parameters(member)
    return missing


def test_every_public_name_field_and_parameter_has_a_description(package):
    objects = public_objects(package)
    assert len(objects) >= 25
    assert gaps(objects) == []


def test_the_check_finds_what_the_report_found_missing(package, tmp_path):
    """A field or parameter without a description is named (the report's examples)."""
    (tmp_path / "sample.py").write_text(
        "from dataclasses import dataclass\n\n\n"
        "@dataclass\nclass Record:\n"
        '    """A record."""\n\n'
        "    id: int\n"
        '    """Its id."""\n'
        "    state: str\n\n"
        "    @property\n"
        "    def is_last(self) -> bool:\n"
        "        return True\n\n\n"
        "def enqueue(kind, *, delay=None, using=None):\n"
        '    """Enqueue.\n\n    :param kind: the kind.\n    :param using: the store.\n    """\n'
    )
    sample = griffe.load("sample", search_paths=[str(tmp_path)], docstring_parser="sphinx")
    assert gaps([sample["Record"], sample["enqueue"]]) == [
        "sample.Record.state",
        "sample.Record.is_last",
        "sample.enqueue(delay)",
    ]


def test_what_the_page_hides_exists(package):
    """A hidden name that is renamed or removed would leave a stale filter behind."""
    for path in HIDDEN:
        assert package[path.removeprefix("rivet.")].path == path
    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    assert '"!^for_claimed$"' in page
