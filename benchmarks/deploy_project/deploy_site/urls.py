"""Two routes: ``/generate`` (the measured view) and ``/ready`` (which worker answered)."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("generate", views.generate),
    path("ready", views.ready),
]
