"""Kafka's ``ssl.principal.mapping.rules``: a client certificate's distinguished name -> the principal's name.

The rule list is Kafka's syntax (``SslPrincipalMapper``): rules separated by commas, each ``DEFAULT`` (the DN
itself) or ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` (lower/upper-case the result) after the
last slash; ``\\/`` and ``\\,`` are literal inside a pattern or replacement. Rules are tried in order; the first
whose pattern matches the whole DN gives the name: every match of the pattern in the DN is replaced by the
replacement (Java's ``String.replaceAll``: ``$n`` is group n — digits are taken while they name a group, a ``$n``
beyond the pattern's groups stays literal, as Kafka escapes it —, ``\\x`` is a literal x). No matching rule:
:class:`NoMatchingRule` (Kafka then fails the connection's authentication).

Pure and synchronous; patterns are Python regular expressions (Java's syntax for everything the rules in Kafka's
documentation use).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PrincipalMapper", "MappingRuleError", "NoMatchingRule"]

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(rf"\s*({_RULE})\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)


class MappingRuleError(ValueError):
    """``ssl.principal.mapping.rules`` is malformed."""


class NoMatchingRule(LookupError):
    """No rule applies to the distinguished name."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _expand(template: str, match: re.Match[str]) -> str:
    """Java's replacement syntax against ``match`` (see the module docstring)."""
    out: list[str] = []
    i, n, groups = 0, len(template), match.re.groups
    while i < n:
        ch = template[i]
        if ch == "\\" and i + 1 < n:
            out.append(template[i + 1])
            i += 2
        elif ch == "$" and i + 1 < n and template[i + 1].isdigit():
            ref, j = int(template[i + 1]), i + 2
            if ref > groups:
                out.append(template[i:j])
                i = j
                continue
            while j < n and template[j].isdigit() and ref * 10 + int(template[j]) <= groups:
                ref, j = ref * 10 + int(template[j]), j + 1
            out.append(match.group(ref) or "")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class PrincipalMapper:
    """The parsed rules; :meth:`name` maps one DN."""

    def __init__(self, rules: str) -> None:
        """Parse ``rules`` (Kafka's syntax); raises :class:`MappingRuleError` naming the bad rule."""
        self.rules = rules
        self._rules: list[_Rule] = []
        for split in _SPLITTER.finditer(rules.strip()):
            text = split.group(1)
            parsed = _PARSER.match(text)
            if parsed is None or parsed.end() != len(text):
                raise MappingRuleError(f"invalid ssl.principal.mapping.rules rule {text!r}")
            if parsed.group(1) is not None:
                self._rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as e:
                    raise MappingRuleError(f"ssl.principal.mapping.rules: bad pattern {parsed.group(2)!r}: {e}") from None
                self._rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))

    def name(self, dn: str) -> str:
        """The principal name of ``dn`` (without ``User:``); raises :class:`NoMatchingRule`."""
        for rule in self._rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
