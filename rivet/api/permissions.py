"""Who may call rivet's HTTP API: the host's DRF settings, above a floor they cannot lower.

A rivet view checks the host's ``DEFAULT_PERMISSION_CLASSES`` (read at request time) and
then :class:`RivetPermission`: an authenticated user holding the view's model permission. A
host that sets ``AllowAny`` globally therefore still refuses anonymous callers here (401 or
403, as the host's authentication classes decide), and a host that is stricter stays stricter.

The metrics endpoint also accepts ``Authorization: Bearer <RIVET['METRICS_TOKEN']>`` when that
setting is set, so Prometheus can scrape without a user account.
"""

from __future__ import annotations

import hmac

from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.settings import api_settings

from rivet.conf import rivet_settings

#: The token's stand-in for request.auth, so permissions can tell a token scrape apart.
METRICS_TOKEN_AUTH = "rivet-metrics-token"


class RivetPermission(permissions.BasePermission):
    """The floor: an authenticated user with the view's ``required_permission``."""

    message = "This rivet endpoint needs the permission {perm}."

    def has_permission(self, request, view) -> bool:
        if getattr(request, "auth", None) == METRICS_TOKEN_AUTH:
            return getattr(view, "accepts_metrics_token", False)
        user = request.user
        if not (user and user.is_authenticated):
            return False
        perm = getattr(view, "required_permission", None)
        if perm is None or user.has_perm(perm):
            return True
        # DRF reads the message from the permission instance.
        self.message = self.message.format(perm=perm)
        return False


def host_authenticators() -> list[authentication.BaseAuthentication]:
    """The host's authentication classes, read at request time as the permissions are (DRF's
    and drf-spectacular's views read them once, when they are imported)."""
    return [cls() for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES]


def permissions_for(view) -> list[permissions.BasePermission]:
    """The host's default permission classes, then rivet's floor."""
    host = [cls() for cls in api_settings.DEFAULT_PERMISSION_CLASSES]
    return [*host, RivetPermission()]


class _MetricsScraper:
    """The principal of a request that showed the metrics token."""

    is_authenticated = True
    is_active = True
    pk = None
    username = "rivet-metrics-token"

    def has_perm(self, perm: str, obj=None) -> bool:
        return False


class MetricsTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer <token>`` for rivet/metrics/, when RIVET['METRICS_TOKEN'] is set."""

    keyword = "Bearer"

    def authenticate(self, request):
        token = rivet_settings.METRICS_TOKEN
        header = authentication.get_authorization_header(request).split()
        if not token or not header or header[0].decode(errors="replace") != self.keyword:
            return None
        given = header[1] if len(header) == 2 else b""
        if not hmac.compare_digest(given, token.encode()):
            raise exceptions.AuthenticationFailed("wrong metrics token")
        return (_MetricsScraper(), METRICS_TOKEN_AUTH)

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="rivet-metrics"'


class EnqueueThrottle(throttling.ScopedRateThrottle):
    """The ``rivet-enqueue`` scope: off until the host sets a rate for it.

    DRF's ScopedRateThrottle refuses to start when its scope has no rate; this one lets every
    request through instead, so a host opts in with one line in ``DEFAULT_THROTTLE_RATES``.
    """

    def allow_request(self, request, view) -> bool:
        scope = getattr(view, self.scope_attr, None)
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if not scope or scope not in rates:
            return True
        self.THROTTLE_RATES = rates  # read now, not when DRF's class was defined
        return super().allow_request(request, view)
