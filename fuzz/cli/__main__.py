"""``python -m fuzz.cli``: the ``gdnfuzz`` command without the installed entry point."""

import sys

from fuzz.cli import main

sys.exit(main())
