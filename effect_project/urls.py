from django.urls import path

from effect_project.effects import views

urlpatterns = [
    path("effects", views.EffectCreateView.as_view(), name="effect-create"),
    path("effects/<path:key>", views.EffectDetailView.as_view(), name="effect-detail"),
    path("verify", views.VerifyView.as_view(), name="verify"),
    path("health", views.HealthView.as_view(), name="health"),
]

handler500 = "effect_project.effects.errors.server_error"
