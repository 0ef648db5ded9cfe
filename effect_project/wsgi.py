"""WSGI entry point of the effect service (``gunicorn effect_project.wsgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "effect_project.settings")

application = get_wsgi_application()
