"""No table: the admin's pace page needs a model to appear in the admin index (``admin.py``)."""

from __future__ import annotations

from django.db import models


class Pace(models.Model):  # type: ignore[misc,unused-ignore]
    """The fleet's pace per API key, read from the fleet (never stored: no table, no migration)."""

    key = models.CharField(primary_key=True, max_length=17)  # a fleet key id (no auto field to check)

    class Meta:
        managed = False  # no table; the app has no migrations module, so makemigrations leaves it alone
        default_permissions = ()  # staff see it read-only (admin.py), so no permission rows
        verbose_name = verbose_name_plural = "pace per API key"
