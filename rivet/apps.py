from django.apps import AppConfig


class RivetConfig(AppConfig):
    name = "rivet"
    verbose_name = "rivet task queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from importlib import import_module

        from django.utils.module_loading import autodiscover_modules

        from rivet import checks  # noqa: F401  (registers the system checks)
        from rivet.conf import rivet_settings

        # Every installed app's jobs.py registers its kinds, as admin.py registers models.
        autodiscover_modules("jobs")
        if _uses_rivet_tasks_backend():
            import_module("rivet.backends")  # registers the kind that runs django.tasks
        for module in rivet_settings.JOB_MODULES:
            import_module(module)


def _uses_rivet_tasks_backend() -> bool:
    from django.conf import settings

    tasks = getattr(settings, "TASKS", None) or {}
    return any(cfg.get("BACKEND") == "rivet.backends.RivetBackend" for cfg in tasks.values())
