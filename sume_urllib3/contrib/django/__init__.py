"""Django integration: settings in ``SUME``, ``get_session()``, and ``manage.py check`` checks.

Add ``"sume_urllib3.contrib.django"`` to ``INSTALLED_APPS`` and configure one dict::

    SUME = {"API_KEY": os.environ["SUME_API_KEY"], "MAX_RETRIES": 4, "TIMEOUT": (5, 30)}

then call ``get_session()`` wherever a view or task talks to the Sume API. Every thread's
session shares one ``SumeMetrics`` (``get_session().metrics`` counts the whole process), one
retry budget, the observers of ``SUME["OBSERVERS"]`` and the fleet of ``SUME["FLEET"]``.
"""

from __future__ import annotations

try:
    import django  # noqa: F401 - fail here, naming the extra, when Django is missing
except ImportError as exc:
    raise ImportError("sume_urllib3.contrib.django needs Django: pip install 'sume-urllib3[django]'") from exc

from .sessions import close_session, get_session

__all__ = ["close_session", "get_session"]
