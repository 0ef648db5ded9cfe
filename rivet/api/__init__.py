"""rivet's HTTP API (Django REST framework); the producer's Python API is ``rivet.producer``.

A host serves it with ``path("rivet/", include("rivet.urls"))``; see docs/operations.md.
"""
