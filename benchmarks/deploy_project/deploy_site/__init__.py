"""The smallest Django project that calls Sume through ``get_session()``, served by gunicorn.

``benchmarks/deploy.py`` runs it; ``settings.py`` takes everything deployment-specific from the
environment, so the benchmark and a reader can run it the same way.
"""
