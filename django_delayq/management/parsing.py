"""What django-delayq's commands share in reading their options: an option nobody defines
(a typo, ``--concurency 4``) is refused with the one it is closest to, as an unknown
queue is (``wording.closest``). argparse already takes an unambiguous prefix
(``--conc``); a typo is no prefix, so it said only "unrecognized arguments"."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_delayq.wording import closest


class SuggestingParser(CommandParser):
    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        namespace, extras = super().parse_known_args(args, namespace)
        meant = self.meant(extras)
        if meant:
            self.error(f"unrecognized arguments: {' '.join(extras)}; did you mean {meant}?")
        return namespace, extras

    def meant(self, extras: Sequence[str]) -> str | None:
        """The option closest to the first unknown one of ``extras`` (None: none is)."""
        known = [
            option
            for action in self._actions
            if action.help != argparse.SUPPRESS
            for option in action.option_strings
            if option.startswith("--")
        ]
        for extra in extras:
            if extra.startswith("-") and not extra.lstrip("-").replace(".", "").isdigit():
                return closest(extra.split("=", 1)[0], known)
        return None


class DelayQCommand(BaseCommand):
    """A django-delayq command: its parser suggests the option a typo meant."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = SuggestingParser  # made by BaseCommand, which names its class
        return parser
