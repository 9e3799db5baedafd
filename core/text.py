"""Text that came from an input, made safe to show: the one place names are neutralised.

Kernel, op, file and run names are whatever the profiled program (or an attacker) wrote. Before
they reach a terminal line, an error line, HTML or Markdown they go through :func:`display_text`
once: control characters, NUL and Unicode bidi overrides become visible escapes, and very long
names are elided in the middle. JSON keeps the full, unaltered name.
"""

from __future__ import annotations

import re

#: Names longer than this are elided for display (a long C++ template kernel name is ~300).
MAX_SHOWN_NAME = 240
#: Error lines quote a name (a path, a source file) elided to this many characters.
MAX_ERROR_NAME = 160
#: What stands for the elided middle of a long name.
ELLIPSIS = "…"

#: Unicode bidirectional controls (embeddings, overrides, isolates, marks): they reorder text
#: so a shown name can read differently from what it is (CVE-2021-42574, "Trojan Source").
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: C0 and C1 controls, DEL, bidi controls, zero-width and line/paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f" + _BIDI + "\u200b-\u200d\u2028\u2029\ufeff]")


def _escape(match: re.Match[str]) -> str:
    """A visible escape for one unsafe character (``\\x00``, ``\\u202e``)."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def elide(text: str, limit: int = MAX_SHOWN_NAME) -> str:
    """``text`` cut to ``limit`` characters by dropping its middle, saying how long it was."""
    if len(text) <= limit:
        return text
    note = f"{ELLIPSIS}[{len(text):,} chars]{ELLIPSIS}"
    keep = max(limit - len(note), 2)
    head = keep - keep // 3
    return text[:head] + note + text[len(text) - keep // 3:]


def neutralise(text: str) -> str:
    """``text`` with control, NUL, bidi and invisible characters shown as escapes."""
    return _UNSAFE.sub(_escape, text)


def display_text(text: object, limit: int = MAX_SHOWN_NAME) -> str:
    """An input's name as shown to a person: elided first (bounded cost), then neutralised."""
    shown = elide(str(text), limit)
    return neutralise(shown)


def error_text(text: object, limit: int = MAX_ERROR_NAME) -> str:
    """Text for an error line: on one line, neutralised, at most ``limit`` characters shown."""
    return display_text(" ".join(elide(str(text), 4 * limit).split()), limit)


def python_lines(text: str) -> list[str]:
    """The lines of Python source read with universal newlines, numbered as Python numbers
    them: split at its newlines only (str.splitlines also splits at a form feed or U+2028, a
    page break PEP 8 allows, which would shift every later line)."""
    return text.removesuffix("\n").split("\n") if text else []
