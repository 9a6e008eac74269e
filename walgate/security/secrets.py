"""Secrets out of text that is logged or answered: passwords in SQL and key-value settings replaced by ``***``.

What counts as a secret: the word after ``PASS``/``PASSWORD`` (TDengine's ``CREATE USER x PASS '...'``, ``ALTER
USER x PASS '...'``; quoted or not, a missing closing quote included), every quoted literal of a ``CREATE USER`` or
``ALTER USER`` statement (whatever its misspelt keyword), and the value of ``password=``/``token=``-like key-value
pairs. A message about a statement may quote a piece of it out of context (a parser naming the token it did
not expect): :func:`mask_secrets` given the statement as ``source`` also replaces every secret value found there.
"""

from __future__ import annotations

import re

__all__ = ["mask_secrets"]

_QUOTED_SECRET = re.compile(r"""(\bPASS(?:WORD)?\s+)('(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.|"")*"?|\S+)""", re.I)
_KEY_SECRET = re.compile(r"""((?:password|passwd|secret|token|credential)s?\s*[=:]\s*)("[^"]*"?|'[^']*'?|[^\s,;&]+)""",
                         re.I)
_BARE = 4  # secret values at least this long are masked wherever the text has them, shorter ones where quoted
_USER_STATEMENT = re.compile(r"\s*(CREATE|ALTER)\s+USER\b", re.I)
_LITERAL = re.compile(r"""'(?:[^'\\]|\\.|'')*'?|"(?:[^"\\]|\\.|"")*"?""")


def mask_secrets(text: str, source: str | None = None) -> str:
    """``text`` with every password or token value replaced by ``***``; and every secret value of ``source`` (a
    statement ``text`` talks about) wherever ``text`` quotes it."""
    source = text if source is None else source
    values = [m.group(2) for pattern in (_QUOTED_SECRET, _KEY_SECRET) for m in pattern.finditer(source)]
    if _USER_STATEMENT.match(source):
        values += [m.group(0) for m in _LITERAL.finditer(source)]
    for value in sorted({v.strip("'\"") for v in values}, key=len, reverse=True):
        if len(value) >= _BARE:
            text = text.replace(value, "***")
        elif value:  # a short one only where quoted: replacing every "ab" would garble the message
            text = text.replace(f"'{value}'", "'***'").replace(f'"{value}"', '"***"')
    text = _QUOTED_SECRET.sub(lambda m: m.group(1) + "'***'", text)
    return _KEY_SECRET.sub(lambda m: m.group(1) + "***", text)
