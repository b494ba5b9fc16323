"""``python -m gdnfuzz``: the ``gdnfuzz`` command (``fuzz.cli.main``) as a module.

A top-level module rather than a package: the import names ``fuzz`` and ``workers`` stay as they are
(the layout is fixed), and the distribution's name becomes importable as well, with nothing else in it.
"""

import sys

from fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
