"""Text from a bundle made inert for GitHub's markdown: what a finding says reaches an issue as words and
code, never as HTML, a hidden comment or a notification.

A bundle travels: it is attached to public issues, and its fields (a summary, a kind, a policy's name,
a scenario's notes, a report, a test file) are whatever the file says. Invariants:
- :func:`text`: no ``<`` or ``>`` (so no tag, no ``<!-- -->`` comment that could hide what follows or
  fake gdnfuzz's own dedup marker), no ``&`` that would start an entity, no ``@`` that would mention
  someone, no backtick that could open a code fence (and let a later fence of ours close it), one line,
  at most :data:`MAX_FIELD` characters;
- :func:`code` and :func:`block`: a code span or fence longer than any run of backticks in the content,
  so nothing inside can close it (GitHub renders neither HTML nor mentions in code);
- :func:`title_text`: a plain-text title (GitHub does not render titles) with no mention and no angle
  brackets;
- :func:`capped`: at most ``limit`` characters, the cut said in the text.
"""

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
    """``value`` as plain title text: one line, no mention (``@`` followed by a zero-width space), no angle
    brackets (shown as single guillemets)."""
    flat = " ".join(str(value).split())
    return flat.replace("@", "@" + ZERO_WIDTH_SPACE).replace("<", "\u2039").replace(">", "\u203a")


def capped(body: str, limit: int) -> str:
    """``body`` cut to ``limit`` characters, saying so at the end."""
    if len(body) <= limit:
        return body
    notice = "\n\n… (cut at GitHub's limit on an issue's length; the bundle holds the whole finding)\n"
    return body[: limit - len(notice)] + notice
