"""rivet's HTTP API (Django REST framework); the producer's Python API is ``rivet.producer``.

A host serves it with ``path("rivet/", include("rivet.urls"))``; see docs/http-api.md. It
needs the ``api`` extra (``pip install 'django-rivet[api]'``): without it, importing
``rivet.api`` or ``rivet.urls`` raises a RivetConfigError that says so.
"""

from rivet.extras import require

_FEATURE = "rivet's HTTP API (rivet.api, rivet.urls)"
for _module in ("rest_framework", "drf_spectacular", "drf_spectacular_sidecar"):
    require(_module, extra="api", feature=_FEATURE)
