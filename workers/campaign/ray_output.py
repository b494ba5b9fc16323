"""What Ray itself prints in the campaign driver's process: plain text when it is not a terminal.

Ray's driver prints the cluster's error messages for the job (``(raylet) A worker died or was killed
...`` when an actor's process dies) on stdout behind a prefix it colours with terminal escape codes,
whatever stdout is. Measured with ``gdnfuzz campaign ... > out.log`` and a fuzzer actor killed: one such
line, with ``ESC[33m``/``ESC[0m`` around the prefix. The campaign says the same in its own restart line;
Ray's line stays (there is no public switch for it), in plain text.

Invariant (:func:`quiet_ray_output`, before ``ray.init``): no colour codes unless the driver's stdout is a
terminal (``RAY_COLOR_PREFIX=0``, which Ray reads at each print); a value the user set is left as it is.
"""

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
