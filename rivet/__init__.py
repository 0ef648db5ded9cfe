"""rivet: a Django task queue with effectively-once side effects."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("django-rivet")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
