"""Optional integrations, each needing the extra of its name (``pip install 'sume-urllib3[redis]'``)."""
