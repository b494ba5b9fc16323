"""What Ray itself prints in the campaign driver's process, kept to what a person needs.

Ray's driver prints the cluster's error messages (an actor's worker that died, say) on stdout behind a
coloured ``(raylet)`` prefix, and an ``Unhandled error`` line at ERROR level for each task result whose
error nobody asked for. The campaign reports every actor's death and restart itself (one line each,
``workers.campaign.driver``) and drops the results of a dead actor's tasks by design, so:

Invariants (:func:`quiet_ray_output`, before ``ray.init``):
- no colour codes unless the driver's stdout is a terminal (``RAY_COLOR_PREFIX=0``, read by Ray at
  each print), so a redirected log holds plain text;
- no ``Unhandled error`` lines for dropped results (``RAY_IGNORE_UNHANDLED_ERRORS``, read at each);
- a value the user set in the environment is left as it is.
"""

from __future__ import annotations

import os
import sys

QUIET_ENV = {"RAY_IGNORE_UNHANDLED_ERRORS": "1"}
PLAIN_ENV = {"RAY_COLOR_PREFIX": "0"}  # only where stdout is not a terminal


def quiet_ray_output() -> dict[str, str]:
    """Set what is unset of :data:`QUIET_ENV` (and :data:`PLAIN_ENV` off a terminal); returns what it set."""
    wanted = {**QUIET_ENV, **({} if sys.stdout.isatty() else PLAIN_ENV)}
    set_now = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(set_now)
    return set_now
