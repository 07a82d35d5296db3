"""Pacing."""
