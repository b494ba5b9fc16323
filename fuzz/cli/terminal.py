"""Where a command's human output goes: a rich console when stdout is a terminal (rich's own test; a dumb one counts
as none), plain parseable lines otherwise; rich is imported when a command runs, never when the parser is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def terminal() -> Console | None:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal and not console.is_dumb_terminal else None
