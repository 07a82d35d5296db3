"""The Django app: add ``"sume_urllib3.contrib.django"`` to ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.core.signals import setting_changed

from . import conf
from .checks import check_settings
from .sessions import on_setting_changed


class SumeConfig(AppConfig):  # type: ignore[misc,unused-ignore]
    """Registers the ``sume_urllib3`` system checks and rebuilds sessions when ``SUME`` changes."""

    name = "sume_urllib3.contrib.django"
    label = "sume_urllib3"
    verbose_name = "Sume API client"

    def ready(self) -> None:
        """Register the checks and the ``setting_changed`` receiver (idempotent)."""
        checks.register(check_settings, conf.CHECK_TAG)
        setting_changed.connect(on_setting_changed, dispatch_uid="sume_urllib3.contrib.django.sessions")
