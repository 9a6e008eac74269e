"""Java ``.properties`` text (Kafka's ``server.properties``) as an ordered dict of strings.

The rules of ``java.util.Properties.load``, as far as a configuration file needs them:

- a logical line is one or more natural lines: a line ending in an odd number of backslashes continues on the
  next, whose leading whitespace is dropped (how Kafka's inline PEM values span lines);
- blank lines and lines whose first non-blank character is ``#`` or ``!`` are comments;
- the key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace and one ``=``/``:`` around the
  separator are skipped; the rest of the line is the value (trailing whitespace kept, as Java does);
- escapes in keys and values: ``\\t`` ``\\n`` ``\\r`` ``\\f``, ``\\uXXXX``, and ``\\`` before any other character
  stands for that character (``\\=``, ``\\:``, ``\\#``, ``\\\\``);
- a key given twice keeps its last value.

Pure: text in, dict out; :class:`PropertiesError` names the line of a malformed ``\\u`` escape.
"""

from __future__ import annotations

__all__ = ["PropertiesError", "parse_properties", "looks_like_properties"]

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """Malformed properties text."""


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of ``text`` in file order (see the module docstring for the syntax)."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        try:
            result[_unescape(key)] = _unescape(value)
        except PropertiesError as e:
            raise PropertiesError(f"line {number}: {e}") from None
    return result


def looks_like_properties(text: str) -> bool:
    """Whether ``text`` reads as a properties file rather than TOML: its first setting is ``dotted.name=...`` or
    ``name: value`` (TOML keys with dots are quoted or followed by `` = `` with a quoted/bare TOML value, and a TOML
    file may open with a ``[table]``). Used only to choose a parser for a file with neither suffix."""
    for _, line in _logical_lines(text):
        if line.startswith("["):
            return False
        key, value = _split(line)
        if "." in key:
            return True
        stripped = value.strip()
        return not (stripped[:1] in ('"', "'", "[", "{") or stripped in ("true", "false") or _is_number(stripped))
    return False


def _is_number(text: str) -> bool:
    try:
        float(text.replace("_", ""))
    except ValueError:
        return False
    return True


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first natural line number, logical line) of every setting, comments and blank lines dropped."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(_WHITESPACE)
        if not pending:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line continues
            pending.append(line[:-1])
            continue
        pending.append(line)
        lines.append((start, "".join(pending)))
        pending = []
    if pending:
        lines.append((start, "".join(pending)))
    return lines


def _split(line: str) -> tuple[str, str]:
    """(raw key, raw value) of one logical line."""
    i, n = 0, len(line)
    while i < n and line[i] not in _SEPARATORS and line[i] not in _WHITESPACE:
        i += 2 if line[i] == "\\" else 1
    key = line[:min(i, n)]
    while i < n and line[i] in _WHITESPACE:
        i += 1
    if i < n and line[i] in _SEPARATORS:
        i += 1
        while i < n and line[i] in _WHITESPACE:
            i += 1
    return key, line[i:]


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "\\" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"malformed \\uXXXX escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
