"""``manage.py sume_status``: the pace the fleet of ``settings.SUME`` holds per API key."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..... import _cli
from .....pacing import LocalFleet
from ...sessions import get_session


class Command(BaseCommand):  # type: ignore[misc,unused-ignore]
    help = "Show the pace, cooldown, attempts in flight and retry budget the Sume fleet holds per API key."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="one line of JSON per reading")
        parser.add_argument(
            "--watch", metavar="S", type=_cli._interval, nargs="?", const=2.0,
            help="read again every S seconds (default 2) until interrupted",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        session = get_session()  # the fleet get_session() paces with, whatever the settings build
        fleet = session.fleet
        if fleet is None or isinstance(fleet, LocalFleet):
            kind = "no fleet (FLEET is None)" if fleet is None else "a LocalFleet, in each process's memory"
            raise CommandError(f"settings.SUME gives {kind}: nothing shared to read (see FLEET's HOST)")
        code = _cli.show_status(
            fleet, self.stdout, self.stderr, as_json=options["json"], watch=options["watch"],
            base_url=session.base_url, api_key=session._api_key,
        )
        if code:
            sys.exit(code)
