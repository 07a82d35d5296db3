"""Optional integrations; each needs its own extra (``django``, ``prometheus``)."""
