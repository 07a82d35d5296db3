"""MkDocs hook: the docstrings' Sphinx roles (``:class:`Policy```) read as plain code on the site.

mkdocstrings renders the docstrings' ``:param:`` fields, but leaves an inline role in front of
its code span (``:class:<code>Policy</code>``); the role is dropped here, the code span kept.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    """The page's HTML without Sphinx roles before code spans."""
    return ROLE.sub("", html)
