"""Text shown to a person: every character a terminal or a browser would act on or
hide, written as a visible escape instead.

Owns ``printable`` and ``escape``, shared by the CLI (kiln.cli._output) and the
dashboard (kiln.web._dashboard, which marks each escape). Control characters (ESC of
ANSI escapes, BEL, NUL), format characters (bidi overrides and isolates, zero-width
characters) and line or paragraph separators become ``\\x1b``, ``\\u202e``-style
escapes, so ``invoice_\\u202egpj.exe`` never displays as ``invoice_exe.jpg``. Names
are refused such characters at enqueue (kiln._model._validate); payloads, error text
and rows written before that rule may still hold them.
"""

from __future__ import annotations


def escape(char: str) -> str:
    """One character as a Python escape: ``\\x1b``, ``\\u202e`` or ``\\U000e0001``."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, keep: str = "") -> str:
    """``text`` with every non-printable character (``str.isprintable``) but those in
    ``keep`` (say, newlines in a traceback) written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else escape(c) for c in text)
