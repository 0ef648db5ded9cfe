from django.apps import AppConfig


class RivetConfig(AppConfig):
    name = "rivet"
    verbose_name = "rivet task queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rivet import checks  # noqa: F401  (registers the system checks)
