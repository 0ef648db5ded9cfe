"""WSGI entry point of the effect service (``python -m effect_project serve``: waitress)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "effect_project.settings")

django_application = get_wsgi_application()

from effect_project.effects.fastpath import effects_application  # noqa: E402 (needs settings)

application = effects_application(django_application)
