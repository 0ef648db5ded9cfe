from django.apps import AppConfig


class ChaosProjectConfig(AppConfig):
    name = "chaos_project"
    verbose_name = "rivet host project"
