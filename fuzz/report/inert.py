"""Text from a bundle made inert for GitHub's markdown: words and code, never HTML, a hidden comment or a mention.

Invariants: :func:`text` has no ``<``, ``>``, ``&``, ``@`` or backtick, is one line of at most :data:`MAX_FIELD`
characters; :func:`code` and :func:`block` fence content with more backticks than any run inside it."""

from __future__ import annotations

import re
from typing import Any

MAX_FIELD = 2000  # characters of one field of a bundle (a summary, a kind) in an issue
ZERO_WIDTH_SPACE = "\u200b"


def text(value: Any) -> str:
    """``value`` as one line of inert markdown text (module docstring)."""
    flat = " ".join(str(value).split())
    if len(flat) > MAX_FIELD:
        flat = flat[:MAX_FIELD] + " …"
    return (flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("@", "&#64;")
            .replace("`", "&#96;"))


def _fence_for(content: str, minimum: int) -> str:
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(minimum, longest + 1)


def code(value: Any) -> str:
    """``value`` as an inline code span that its own backticks cannot close (one line, capped)."""
    flat = " ".join(str(value).split())
    if len(flat) > MAX_FIELD:
        flat = flat[:MAX_FIELD] + " …"
    fence = _fence_for(flat, 1)
    return f"{fence} {flat} {fence}"


def block(content: str, language: str = "") -> str:
    """``content`` as a fenced code block that nothing in it can close."""
    fence = _fence_for(content, 3)
    return f"{fence}{language}\n{content if content.endswith(chr(10)) else content + chr(10)}{fence}"


def title_text(value: Any) -> str:
    """``value`` as plain title text: one line, ``@`` followed by a zero-width space, angle brackets as guillemets."""
    flat = " ".join(str(value).split())
    return flat.replace("@", "@" + ZERO_WIDTH_SPACE).replace("<", "\u2039").replace(">", "\u203a")


def capped(body: str, limit: int) -> str:
    """``body`` cut to ``limit`` characters, saying so at the end."""
    if len(body) <= limit:
        return body
    notice = "\n\n… (cut at GitHub's limit on an issue's length; the bundle holds the whole finding)\n"
    return body[: limit - len(notice)] + notice
