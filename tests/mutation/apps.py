"""The test-only app that applies a mutant when Django starts (tests.mutation.settings)."""

from __future__ import annotations

import sys

from django.apps import AppConfig


class MutationConfig(AppConfig):
    name = "tests.mutation"
    label = "rivet_mutation"

    def ready(self) -> None:
        from tests.mutation import apply_from_environment

        mutation = apply_from_environment()
        sys.stderr.write(f"MUTANT {mutation.name}: {mutation.what} removed\n")
