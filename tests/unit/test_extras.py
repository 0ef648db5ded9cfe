"""A feature used without its extra says which extra to install (rivet.extras)."""

import os
import subprocess
import sys

import pytest

from rivet.errors import RivetConfigError
from rivet.extras import require

#: Run in a fresh interpreter where ``missing`` cannot be imported (as if not installed), with
#: settings of a host that installed rivet alone (tests.settings needs every extra).
SCRIPT = """
import sys
for name in {missing!r}:
    sys.modules[name] = None
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
        "django.contrib.sessions", "django.contrib.messages", "rivet",
    ],
    DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}},
    USE_TZ=True,
    # The admin's template and middleware checks: this host serves no pages.
    SILENCED_SYSTEM_CHECKS=["admin.E403", "admin.E408", "admin.E409", "admin.E410"],
)
django.setup()
{body}
"""


def without(missing: list[str], body: str, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.pop("RIVET_METRICS_PORT", None)
    env.update(environ)
    code = SCRIPT.format(missing=missing, body=body)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_require_returns_the_module_when_it_is_there():
    assert require("json", extra="x", feature="y").__name__ == "json"


def test_require_names_the_extra_when_the_module_is_missing():
    with pytest.raises(RivetConfigError) as raised:
        require("rivet_no_such_module", extra="api", feature="rivet's HTTP API")
    message = str(raised.value)
    assert "rivet's HTTP API needs the Python package 'rivet_no_such_module'" in message
    assert "pip install 'django-rivet[api]'" in message


@pytest.mark.parametrize(
    ("missing", "statement", "extra"),
    [
        (["rest_framework"], "import rivet.api", "api"),
        (["rest_framework"], "import rivet.idempotency.decorators", "api"),
        (
            ["prometheus_client"],
            "import rivet.metrics; rivet.metrics.queue_exposition('x')",
            "metrics",
        ),
    ],
)
def test_a_feature_without_its_extra_is_a_config_error_naming_it(missing, statement, extra):
    done = without(
        missing,
        "from rivet.errors import RivetConfigError\n"
        f"try:\n    {statement}\nexcept RivetConfigError as exc:\n    print(exc)\n"
        "else:\n    print('no error')\n",
    )
    assert done.returncode == 0, done.stderr
    assert f"pip install 'django-rivet[{extra}]'" in done.stdout, done.stdout


@pytest.mark.parametrize(
    "missing, statement",
    [
        (
            ["environ"],
            "from effect_project.dbconfig import database_from_url as f; f('sqlite://:memory:')",
        ),
    ],
)
def test_a_repository_feature_without_its_group_names_the_dependency_group(missing, statement):
    done = without(
        missing,
        "from rivet.errors import RivetConfigError\n"
        f"try:\n    {statement}\nexcept RivetConfigError as exc:\n    print(exc)\n"
        "else:\n    print('no error')\n",
    )
    assert done.returncode == 0, done.stderr
    assert "install the repository's 'effect' dependency group: pip install --group effect" in (
        done.stdout
    ), done.stdout


URLCONF_BODY = """
import sys, types
from django.conf import settings
from django.core import checks
from django.test import Client
from django.urls import include, path
conf = types.ModuleType("hosturls")
conf.urlpatterns = [path("rivet/", include("rivet.urls"))]
sys.modules["hosturls"] = conf
settings.ROOT_URLCONF = "hosturls"
settings.ALLOWED_HOSTS = ["testserver"]
for issue in checks.run_checks(tags=["urls"]):
    print(issue.id, issue.level, issue.msg, issue.hint)
answer = Client().get("/rivet/tasks/")
print(answer.status_code, answer.json())
"""


def test_rivet_urls_without_the_api_extra_imports_is_a_check_error_and_answers_501():
    done = without(["rest_framework", "drf_spectacular", "drf_spectacular_sidecar"], URLCONF_BODY)
    assert done.returncode == 0, done.stderr
    check, answer = done.stdout.strip().splitlines()
    assert check.startswith("rivet.E010 40 rivet.urls is in the URLconf, but rivet's HTTP API ")
    assert check.endswith("pip install 'django-rivet[api]', or remove include('rivet.urls')")
    assert answer.startswith("501 {'detail': \"rivet's HTTP API (rivet.api, rivet.urls) needs")
    assert "'code': 'extra_missing'" in answer


CHECK_ONLY = URLCONF_BODY.split("answer =")[0]


def test_rivet_urls_without_the_metrics_extra_is_silent_when_metrics_are_not_asked_for():
    """Every command (migrate included) runs the checks: no warning about an unused extra."""
    done = without(["prometheus_client"], CHECK_ONLY + "print('end')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "end"


@pytest.mark.parametrize(
    ("setting", "environ", "start"),
    [
        ("settings.RIVET = {'METRICS_TOKEN': 's3cret'}\n", {}, "RIVET['METRICS_TOKEN'] is set"),
        ("", {"RIVET_METRICS_PORT": "9100"}, "RIVET_METRICS_PORT asks rivet_worker"),
    ],
)
def test_metrics_asked_for_without_the_metrics_extra_is_a_check_warning(setting, environ, start):
    body = CHECK_ONLY.replace("settings.ALLOWED_HOSTS", setting + "settings.ALLOWED_HOSTS")
    done = without(["prometheus_client"], body, **environ)
    assert done.returncode == 0, done.stderr
    check = done.stdout.strip().splitlines()[0]
    assert check.startswith(f"rivet.W011 30 {start}"), check
    assert "the 'metrics' extra (prometheus_client) is not installed" in check
    assert "pip install 'django-rivet[metrics]'" in check


def test_a_host_without_rivet_urls_hears_nothing_of_the_http_extras():
    body = URLCONF_BODY.replace('[path("rivet/", include("rivet.urls"))]', "[]").split("answer =")[
        0
    ]
    done = without(["rest_framework", "prometheus_client"], body + "print('end')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "end"


def test_the_core_imports_without_any_extra():
    done = without(
        ["rest_framework", "drf_spectacular", "prometheus_client", "urllib3", "environ"],
        "import rivet, rivet.admin, rivet.producer, rivet.worker, rivet.backends\n"
        "from rivet.management.commands import rivet_worker, rivet_enqueue, rivet_dlq\n"
        "print('ok')\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_worker_with_a_metrics_port_but_no_prometheus_client_exits_2_naming_the_extra():
    done = without(
        ["prometheus_client"],
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(\n"
        "    ['manage.py', 'rivet_worker', '--once', '--metrics-port', '19999']\n"
        ")\n",
    )
    assert done.returncode == 2, done.stderr
    assert "--metrics-port needs the Python package 'prometheus_client'" in done.stderr
    assert "pip install 'django-rivet[metrics]'" in done.stderr
