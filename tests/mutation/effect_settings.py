"""effect_project's settings with the mutant RIVET_TEST_MUTATION names applied when Django
starts: the effect service of a chaos run of the mutation matrix. Never a production setting."""

from effect_project.settings import *  # noqa: F403
from effect_project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.mutation.apps.MutationConfig"]
