"""chaos_project's settings with one guard of a SQL store removed (RIVET_TEST_MUTATION names
it): the chaos run of the mutation matrix. Never a production setting."""

from chaos_project.settings import *  # noqa: F403
from chaos_project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.mutation.apps.MutationConfig"]
