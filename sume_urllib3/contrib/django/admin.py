"""The Django admin's read-only page of the pace (``admin/sume_urllib3/pace/``): for staff, the
table ``manage.py sume_status`` prints, read from the fleet of ``settings.SUME`` at each view."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse

from ...pacing import status
from .models import Pace
from .sessions import get_session


@admin.register(Pace)
class PaceAdmin(admin.ModelAdmin):  # type: ignore[misc,unused-ignore]
    """One page, no add, change or delete: the fleet's state is the library's to write."""

    def has_module_permission(self, request: Any) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: Any, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: Any) -> bool:
        return False  # else the index links to an add page, which get_urls leaves out

    def get_urls(self) -> List[Any]:
        """The page alone: no add, change, delete or history pages (there is no row to show)."""
        from django.urls import path

        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request: Any, extra_context: Optional[Dict[str, Any]] = None) -> Any:
        """The table, read now (no query: the model has no table)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        rows, error = [], ""
        try:
            session = get_session()
            if session.fleet is None:
                raise LookupError('settings.SUME["FLEET"] is None: nothing is paced')
            read = status.read_status(session.fleet, base_url=session.base_url, api_key=session._api_key)
            rows = [status._cells(row) for row in read]
        except Exception as exc:  # the page says what failed; a request is never held for it
            error = f"{type(exc).__name__}: {exc}"
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": "Pace per API key",
            "columns": status._COLUMNS, "rows": rows, "error": error, **(extra_context or {}),
        }
        return TemplateResponse(request, "sume_urllib3/pace.html", context)
