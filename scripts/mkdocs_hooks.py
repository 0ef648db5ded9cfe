"""MkDocs hooks (mkdocs.yml ``hooks:``): what the documentation site takes from outside docs/.

- The OpenAPI schema is generated at build time by drf-spectacular (``manage.py rivet_schema``,
  the same command and settings as the schema test) into a temporary folder, never a tracked
  file, and added to the site as ``reference/openapi.yaml``. The schema page shows it with
  Swagger UI (the mkdocs-swagger-ui-tag plugin, whose script and styles are bundled in the
  package: no CDN) and, above it, a table of every operation drawn from the same file.
- Pictures that live elsewhere in the repository (the benchmark's ``bench/throughput.png``) are
  added to the site under ``img/``. A page links them by their path in the repository
  (``../bench/throughput.png``), which GitHub shows; the link is pointed at the copy when the
  page is built.
- The settings tables of the settings page and of the workers page must be the ones
  ``rivet.settings_table`` draws (``python scripts/settings_docs.py --write`` redraws them), and
  the public API page must show every name of ``rivet.__all__``: a setting or a public name
  added without its entry fails the build (a removed one already fails mkdocstrings).
- A README section marked ``<!-- readme: TITLE -->`` ... ``<!-- /readme -->`` in a page is
  replaced by that section of README.md, its ``docs/`` links made relative to the site: one
  text, tested by tests/acceptance/test_adopter.py, shown in both places.

A build must not write into the checkout: ``make test`` ends with scripts/tree_unchanged.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_URI = "reference/openapi.yaml"
API_URI = "reference/api.md"
#: Files of the repository outside docs/ that the site shows: site path -> repository path.
OUTSIDE = {"img/bench-throughput.png": "bench/throughput.png"}
#: ``<!-- readme: TITLE -->``, a line for GitHub's readers, ``<!-- /readme -->``.
README_MARK = re.compile(
    r"^<!-- readme: (.+?) -->\n.*?^<!-- /readme -->$", re.MULTILINE | re.DOTALL
)
OPERATIONS_MARK = "<!-- openapi: operations -->"
METHODS = ("get", "post", "put", "patch", "delete")

_schema: dict[str, str] = {}


def generate_schema() -> str:
    """The OpenAPI schema as YAML, from the host project, with warnings treated as errors."""
    # The host project's settings whatever the shell says; no database is read.
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="chaos_project.settings",
        DATABASE_URL="sqlite://:memory:",
        EFFECT_DATABASE_URL="sqlite://:memory:",
    )
    with tempfile.TemporaryDirectory(prefix="rivet-schema-") as folder:
        out = Path(folder) / "openapi.yaml"
        command = [
            sys.executable, "manage.py", "rivet_schema", "--validate", "--fail-on-warn",
            "--file", str(out),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise PluginError(f"manage.py rivet_schema failed ({done.returncode}):\n{done.stderr}")
        return out.read_text()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    _schema["text"] = generate_schema()
    files.append(File.generated(config, SCHEMA_URI, content=_schema["text"]))
    for uri, source in OUTSIDE.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    markdown = README_MARK.sub(lambda mark: readme_section(mark.group(1), page), markdown)
    markdown = outside_links(markdown, page)
    if OPERATIONS_MARK in markdown:
        markdown = markdown.replace(OPERATIONS_MARK, operations_table(_schema["text"]))
    check_settings_table(markdown, page.file.src_uri)
    if page.file.src_uri == API_URI:
        check_public_api(markdown)
    return markdown


def check_settings_table(markdown: str, uri: str) -> None:
    """Fails the build when a page's settings table is not the one rivet.settings_table draws."""
    from rivet.settings_table import DOC_TABLES, fill_doc

    if uri in DOC_TABLES and fill_doc(markdown, DOC_TABLES[uri]()) != markdown:
        raise PluginError(
            f"{uri}: its settings table is not the one rivet/settings_table.py draws; "
            "run python scripts/settings_docs.py --write"
        )


def check_public_api(markdown: str) -> None:
    """Fails the build when a name of ``rivet.__all__`` is missing from the public API page.

    A name is shown by its own ``::: rivet.NAME``, or by its module's (``::: rivet.errors``).
    """
    import rivet

    shown = set(re.findall(r"^::: rivet\.(\w+)$", markdown, flags=re.MULTILINE))
    exports = rivet._EXPORTS  # the public name -> its module
    missing = [
        name
        for name in rivet.__all__
        if name != "__version__"
        and name not in shown
        and exports[name].removeprefix("rivet.") not in shown
    ]
    if missing:
        raise PluginError(f"{API_URI}: add a '::: rivet.NAME' for each of {missing}")


def outside_links(markdown: str, page: Page) -> str:
    """Links to OUTSIDE's files by their repository path, pointed at their copies in the site."""
    here = (ROOT / "docs" / page.file.src_uri).parent
    for uri, source in OUTSIDE.items():
        in_repository = os.path.relpath(ROOT / source, here)
        in_site = os.path.relpath(ROOT / "docs" / uri, here)
        markdown = markdown.replace(f"]({in_repository})", f"]({in_site})")
    return markdown


def readme_section(title: str, page: Page) -> str:
    """The body of README.md's ``## title`` section, its links made to work from ``page``."""
    text = (ROOT / "README.md").read_text()
    heading = f"\n## {title}\n"
    if heading not in text:
        raise PluginError(f"{page.file.src_uri} includes README.md's '## {title}', which is gone")
    body = text.split(heading, 1)[1].split("\n## ", 1)[0]
    up = "../" * page.file.src_uri.count("/")
    return re.sub(r"\]\(docs/", f"]({up}", body).strip("\n")


def operations_table(schema_text: str) -> str:
    """Every operation of the schema, one row each: method and path, summary, answers."""
    schema = yaml.safe_load(schema_text)
    rows = ["| operation | what it does | answers |", "| --- | --- | --- |"]
    for path, item in schema["paths"].items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            summary = operation.get("summary") or operation.get("description", "").split("\n")[0]
            statuses = ", ".join(sorted(operation.get("responses", {})))
            rows.append(f"| `{method.upper()} {path}` | {summary.strip()} | {statuses} |")
    return "\n".join(rows)
