"""Django integration: settings in ``SUME``, ``get_session()``, and ``manage.py check`` checks.

Add ``"sume_urllib3.contrib.django"`` to ``INSTALLED_APPS`` and configure one dict::

    SUME = {"API_KEY": os.environ["SUME_API_KEY"], "MAX_RETRIES": 4, "TIMEOUT": (5, 30)}

then call ``get_session()`` wherever a view or task talks to the Sume API.
"""

from __future__ import annotations

from .conf import SUME_SETTING, VALID_KEYS
from .sessions import close_session, get_session

__all__ = ["SUME_SETTING", "VALID_KEYS", "close_session", "get_session"]
