"""README.md's "Use it in your project" section is what the adopter's test applies, and the
package index page (docs/pypi.md) shows the same two lines and job."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.acceptance.adopter_kit import REPO, readme_blocks

# Files read, no wheel built: these run in every matrix cell, the adopter's test in one.
pytestmark = [pytest.mark.acceptance]


def test_the_section_is_what_the_adopter_test_applies():
    blocks = readme_blocks()
    python = [block for block in blocks if block.lang == "python"]
    targets = [block.target for block in python]
    assert targets == [
        "mysite/settings.py",
        "mysite/urls.py",
        "mysite/settings.py",
        "billing/jobs.py",
        "python manage.py shell",
    ], targets
    # The first two blocks are the two lines: rivet in INSTALLED_APPS, and the URL include.
    assert python[0].text.strip().splitlines()[1:] == ['INSTALLED_APPS += ["rivet"]']
    assert 'urlpatterns += [path("rivet/", include("rivet.urls"))]' in python[1].text
    installs = [
        words[2]
        for block in blocks
        if block.lang == "sh"
        for words in map(shlex.split, block.text.splitlines())
        if words[:2] == ["pip", "install"]
    ]
    extras = {name for spec in installs for name in re.findall(r"[\[,](\w+)", spec)}
    assert extras == {"binary", "pool", "api", "metrics"}, installs


def test_the_index_page_shows_the_readme_s_two_lines_and_job():
    page = (REPO / "docs" / "pypi.md").read_text()
    blocks = {block.target: block.text for block in readme_blocks() if block.lang == "python"}
    assert 'INSTALLED_APPS += ["rivet"]' in page
    assert 'urlpatterns += [path("rivet/", include("rivet.urls"))]' in page
    job = blocks["billing/jobs.py"].split("\n", 1)[1]  # below its "# billing/jobs.py" line
    assert job in page, "docs/pypi.md shows README.md's job, word for word"
