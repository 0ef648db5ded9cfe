from django.urls import path

from effect_project.effects import views

urlpatterns = [
    path("effects", views.EffectCreateView.as_view(), name="effect-create"),
    path("effects/<path:key>", views.EffectDetailView.as_view(), name="effect-detail"),
    path("verify", views.VerifyView.as_view(), name="verify"),
    path("health", views.HealthView.as_view(), name="health"),
]

# Every answer is JSON with a code, those Django gives before any view runs too.
handler400 = "effect_project.effects.errors.bad_request"
handler403 = "effect_project.effects.errors.permission_denied"
handler404 = "effect_project.effects.errors.not_found"
handler500 = "effect_project.effects.errors.server_error"
