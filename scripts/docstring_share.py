"""The share of docstring lines in gdnfuzz's product code (``fuzz/``, ``workers/``, or the directories given).

A docstring line is a line of a module's, class's or function's docstring (its quotes included); lines are
every line of each ``.py`` file, blank ones included. Prints one row a directory and the total.

    .venv/bin/python scripts/docstring_share.py [DIR ...]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def docstring_lines(source: str) -> int:
    """How many lines of ``source`` belong to docstrings."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, OWNERS) and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str):
            first = node.body[0]
            count += (first.end_lineno or first.lineno) - first.lineno + 1
    return count


def share(directory: Path) -> tuple[int, int]:
    """(docstring lines, all lines) over the ``.py`` files under ``directory``."""
    docs = total = 0
    for path in sorted(directory.rglob("*.py")):
        source = path.read_text()
        docs += docstring_lines(source)
        total += len(source.splitlines())
    return docs, total


def main() -> None:
    directories = [Path(d) for d in sys.argv[1:]] or [ROOT / "fuzz", ROOT / "workers"]
    all_docs = all_lines = 0
    for directory in directories:
        docs, lines = share(directory)
        all_docs, all_lines = all_docs + docs, all_lines + lines
        print(f"{directory.name + '/':10} {docs:6,} docstring lines of {lines:7,}  {docs / max(lines, 1):5.1%}")
    print(f"{'total':10} {all_docs:6,} docstring lines of {all_lines:7,}  {all_docs / max(all_lines, 1):5.1%}")


if __name__ == "__main__":
    main()
