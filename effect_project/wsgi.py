"""WSGI entry point of the effect service (``python -m effect_project serve``: waitress)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "effect_project.settings")

application = get_wsgi_application()
