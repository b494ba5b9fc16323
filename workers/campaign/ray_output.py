"""What Ray prints in the campaign driver's process: plain text when stdout is not a terminal.

Invariant (:func:`quiet_ray_output`, before ``ray.init``): no colour codes unless stdout is a terminal
(``RAY_COLOR_PREFIX=0``); a value the user set is left as it is."""

from __future__ import annotations

import os
import sys

PLAIN_ENV = {"RAY_COLOR_PREFIX": "0"}


def quiet_ray_output() -> dict[str, str]:
    """Set what is unset of :data:`PLAIN_ENV` where stdout is not a terminal; returns what it set."""
    wanted = {} if sys.stdout.isatty() else PLAIN_ENV
    set_now = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(set_now)
    return set_now
