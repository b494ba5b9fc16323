"""Where a command's human output goes: a rich console when stdout is a terminal, plain lines otherwise.

Invariant: the choice is rich's own (``Console.is_terminal``: ``TTY_COMPATIBLE``, then ``FORCE_COLOR``, then
whether stdout is a TTY; a dumb terminal counts as none), so logs, CI and pipes get plain lines that scripts
may parse, and only a person at a terminal gets tables, colours and live displays. Rich is imported when a
command runs, never when the command line is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def terminal() -> Console | None:
    """A rich console on stdout when stdout is a terminal; ``None`` when plain lines are wanted."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal and not console.is_dumb_terminal else None
