"""Idempotency keys for your own DRF views: ``INSTALLED_APPS += ["rivet.idempotency"]``.

Put :func:`rivet.idempotency.decorators.idempotent` on a view method. A request carries an
``Idempotency-Key`` header; the first request with a key runs the view and stores its answer in the
same transaction as whatever the view wrote, and every later request with that key gets the stored
answer back (200, header ``idempotent-replay: true``) without running the view again. It is for DRF
views, so it needs the ``api`` extra (``pip install 'django-rivet[api]'``).
"""

from rivet.extras import require

require("rest_framework", extra="api", feature="rivet.idempotency (idempotency keys for DRF views)")
