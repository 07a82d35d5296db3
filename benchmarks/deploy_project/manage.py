#!/usr/bin/env python
"""``python manage.py check`` validates the deployment's ``SUME`` (tag ``sume_urllib3``)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deploy_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
