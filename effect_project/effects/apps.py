from django.apps import AppConfig


class EffectsConfig(AppConfig):
    name = "effect_project.effects"
    label = "effects"
    verbose_name = "effects"
    default_auto_field = "django.db.models.BigAutoField"
