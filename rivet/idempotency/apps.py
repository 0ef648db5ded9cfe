from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "rivet.idempotency"
    label = "rivet_idempotency"
    verbose_name = "rivet idempotency keys"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rivet.idempotency import checks  # noqa: F401  (registers the system checks)
