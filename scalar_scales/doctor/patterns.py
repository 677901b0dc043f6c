"""``re:`` patterns from a checkpoint's config matched as ``re.match`` matches them, in time linear in the name.

compressed-tensors (``utils/match.py``, ``match_name``) and vLLM match a
config's ``re:`` targets and ``ignore`` entries with ``re.match``: Python's
backtracking engine, in which a pattern such as ``model\\.(a+)+b`` takes
time exponential in the name's length. A hostile checkpoint chooses both the
patterns and the names, so the doctor never runs them through ``re``.

Instead each pattern is read by this module's own parser of ``re``'s syntax
for str patterns, turned into a finite automaton (Thompson's construction),
and matched by walking a deterministic automaton built from it as names need
it: one step per character, whatever the pattern. The parser is the module's
own so that it depends on no private module of ``re`` (``re._parser`` and
``re._constants`` may change in any Python release), and so that reading a
hostile pattern stays cheap (``re.compile``, which the module never calls,
spends milliseconds on each wide character set).

The parser accepts what ``re.compile`` accepts of: literal characters and
escaped punctuation; ``\\a \\f \\n \\r \\t \\v \\\\``, ``\\xhh``, ``\\uhhhh``,
``\\Uhhhhhhhh``, ``\\N{name}`` and octal escapes (``\\0``, ``\\012``, ``\\123``);
``.``; character sets (``[...]``, ``[^...]``, ranges, ``\\b`` as a backspace
inside them); ``\\d \\w \\s \\D \\W \\S`` with their Unicode meaning for str
patterns; ``^ $ \\A \\Z`` (and ``\\z`` where the running Python's ``re`` has
it), ``$`` also matching before a final newline; groups ``(...)``, ``(?:...)``,
``(?P<name>...)`` and comments ``(?#...)``; alternation; the quantifiers
``* + ? {m} {m,} {,n} {m,n}`` and their lazy forms (laziness does not change
whether ``re.match`` matches); the flag DOTALL, as ``(?s)`` at the start or
``(?s:...)``/``(?-s:...)`` (and the no-op ``(?u)``). Every construct means what
it means to ``re``, and a pattern ``re.compile`` refuses is a
:class:`PatternError` with ``re``'s reason. What a finite automaton cannot
match or the parser does not take (back-references, look-arounds, atomic
groups, possessive repeats, word boundaries, conditional groups, other inline
flags) is refused with a :class:`PatternError` naming the construct, as is a
pattern nesting groups more than :data:`MAX_DEPTH` deep.
``tests/base/doctor/test_patterns.py`` holds the parser and the verdicts to
``re``'s on real module names and generated patterns.

A set of patterns shares one automaton, whose deterministic states carry the
patterns already matched, so a walk is one dictionary look-up per character.
On a V4-Flash-shaped checkpoint's 33,412 module names and an NVFP4 preset's
patterns that takes 1.07x the time of ``re.match`` of each pattern, while a
hostile ``(a+)+b`` against 22 characters takes ``re`` 250 times as long, and
four times as long again for each two more (``benchmarks/patterns.py``). A set
is not for several threads at once (the doctor matches modules after the
shards are read, in one thread).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeAlias

__all__ = ["MAX_DEPTH", "MAX_STATES", "PatternError", "PatternSet"]

MAX_STATES = 20_000
"""The most automaton states the patterns of one config may need; a config that needs more is refused."""
MAX_DFA_STATES = 50_000
"""Deterministic states kept at once; past this the cache is dropped and rebuilt (the walk stays linear)."""
MAX_DEPTH = 100
"""The deepest groups may nest in a pattern (``re`` itself runs out of stack a few hundred deep)."""

_Predicate = Callable[[str], bool]


class PatternError(ValueError):
    """A pattern that cannot be matched in bounded time, or is not a valid regular expression."""


class _BuildError(Exception):
    """An automaton too large, said without the pattern (:class:`PatternSet` names it)."""


# The syntax, as ``re`` reads a str pattern.
_SPECIAL = frozenset(".\\[{()*+?^$|")
_DIGITS = frozenset("0123456789")
_OCTAL_DIGITS = frozenset("01234567")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_FLAGS = frozenset("iLmsxau" + ("t" if sys.version_info < (3, 13) else ""))
"""The inline flags ``re`` knows (``t``, TEMPLATE, until Python 3.13)."""
_TYPE_FLAGS = frozenset("auL")
_GLOBAL_ONLY_FLAGS = frozenset("t")
_ACCEPTED_GLOBAL_FLAGS = frozenset("su")
"""The global inline flags matched: DOTALL, and UNICODE (a str pattern's default)."""
_HEX_LENGTHS = {"x": 2, "u": 4, "U": 8}
_CONTROL_ESCAPES = {r"\a": "\a", r"\f": "\f", r"\n": "\n", r"\r": "\r", r"\t": "\t", r"\v": "\v", "\\\\": "\\"}
_END_OF_STRING = frozenset({r"\Z", r"\z"} if sys.version_info >= (3, 14) else {r"\Z"})
"""``\\Z``, and its synonym ``\\z`` from Python 3.14."""
_REPEAT_LIMIT = 2**32 - 1
"""``re``'s bound on a repeat count (``MAXREPEAT`` on 64-bit builds); counts past :data:`MAX_STATES` are refused
anyway, a count past this one as ``re`` refuses it."""


def _any(ch: str) -> bool:
    return True


def _not_newline(ch: str) -> bool:
    return ch != "\n"


def _is_decimal(ch: str) -> bool:
    """``\\d`` for a str pattern: Unicode decimal digits, as sre's ``Py_UNICODE_ISDECIMAL``."""
    return ch.isdecimal()


def _is_word(ch: str) -> bool:
    """``\\w`` for a str pattern: Unicode letters, digits and numerics, and the underscore."""
    return ch.isalnum() or ch == "_"


def _is_space(ch: str) -> bool:
    """``\\s`` for a str pattern: Unicode white space (``str.isspace``), as sre's ``Py_UNICODE_ISSPACE``."""
    return ch.isspace()


_CATEGORIES: dict[str, _Predicate] = {
    r"\d": _is_decimal,
    r"\D": lambda ch: not _is_decimal(ch),
    r"\s": _is_space,
    r"\S": lambda ch: not _is_space(ch),
    r"\w": _is_word,
    r"\W": lambda ch: not _is_word(ch),
}


@dataclass(frozen=True)
class _Char:
    """One character that passes ``test``."""

    test: _Predicate


@dataclass(frozen=True)
class _At:
    """An assertion: ``begin`` (``^``, ``\\A``), ``end`` (``$``) or ``endz`` (``\\Z``)."""

    kind: str


@dataclass(frozen=True)
class _Group:
    """Alternatives, each a sequence (a group, or the whole pattern)."""

    branches: tuple[tuple[_Node, ...], ...]


@dataclass(frozen=True)
class _Repeat:
    """``body`` between ``low`` and ``high`` times (None: no bound)."""

    low: int
    high: int | None
    body: _Node


_Node: TypeAlias = "_Char | _At | _Group | _Repeat"


def _char_set(
    literals: Iterable[str], ranges: Iterable[tuple[int, int]], categories: list[_Predicate], negate: bool
) -> _Predicate:
    """A character set's test: its literals and ranges as sorted disjoint intervals (one bisection), then its
    categories; negated as a whole."""
    spans = sorted([*((ord(ch), ord(ch)) for ch in literals), *ranges])
    lows: list[int] = []
    highs: list[int] = []
    for low, high in spans:
        if highs and low <= highs[-1] + 1:
            highs[-1] = max(highs[-1], high)
        else:
            lows.append(low)
            highs.append(high)
    if not categories and len(lows) == 1 and lows[0] == highs[0]:
        return chr(lows[0]).__ne__ if negate else chr(lows[0]).__eq__

    def test(ch: str) -> bool:
        code = ord(ch)
        at = bisect_right(lows, code) - 1
        found = (at >= 0 and code <= highs[at]) or any(category(ch) for category in categories)
        return found != negate

    return test


class _Source:
    """The pattern as ``re`` tokenises it: one character, or a backslash and the character after it."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.index = 0
        self.next: str | None = None
        self._advance()

    def _advance(self) -> None:
        index = self.index
        if index >= len(self.pattern):
            self.next = None
            return
        token = self.pattern[index]
        if token == "\\":
            index += 1
            if index >= len(self.pattern):
                raise _invalid(self.pattern, "bad escape (end of pattern)", len(self.pattern) - 1)
            token += self.pattern[index]
        self.index = index + 1
        self.next = token

    def tell(self) -> int:
        return self.index - len(self.next or "")

    def seek(self, index: int) -> None:
        self.index = index
        self._advance()

    def match(self, token: str) -> bool:
        if token == self.next:
            self._advance()
            return True
        return False

    def get(self) -> str | None:
        token = self.next
        self._advance()
        return token

    def get_while(self, count: int, allowed: frozenset[str]) -> str:
        taken = []
        for _ in range(count):
            token = self.next
            if token is None or token not in allowed:
                break
            taken.append(token)
            self._advance()
        return "".join(taken)

    def get_until(self, terminator: str, what: str) -> str:
        taken: list[str] = []
        while True:
            token = self.next
            self._advance()
            if token is None:
                if not taken:
                    raise self.error(f"missing {what}")
                raise self.error(f"missing {terminator}, unterminated name", len("".join(taken)))
            if token == terminator:
                if not taken:
                    raise self.error(f"missing {what}", 1)
                return "".join(taken)
            taken.append(token)

    def error(self, message: str, offset: int = 0) -> PatternError:
        return _invalid(self.pattern, message, self.tell() - offset)


def _invalid(pattern: str, message: str, position: int | None = None) -> PatternError:
    """A pattern ``re.compile`` refuses, with ``re``'s reason (``re.error``'s wording of it)."""
    reason = message if position is None else str(re.error(message, pattern, position))
    return PatternError(f"{pattern!r} is not a regular expression ({reason})")


class _Parser:
    """A str pattern read as ``re`` reads it, into :class:`_Group`, :class:`_Repeat`, :class:`_At` and
    :class:`_Char`; a construct outside those refused by name, an invalid pattern refused with ``re``'s reason."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.source = _Source(pattern)
        self.groups = 1
        """Groups opened so far, counting group 0 (the whole match), as ``re`` numbers them."""
        self.open: set[int] = set()
        self.names: dict[str, int] = {}
        self.dotall = False
        """``.`` matches a newline too (DOTALL: ``(?s)``, or inside ``(?s:...)``)."""

    def refuse(self, what: str) -> PatternError:
        return PatternError(f"{self.pattern!r} uses {what}, which cannot be matched in bounded time")

    def parse(self) -> _Group:
        tree = self.alternatives(0)
        if self.source.next is not None:  # a ")" that closes nothing
            raise self.source.error("unbalanced parenthesis")
        return tree

    def alternatives(self, depth: int) -> _Group:
        branches: list[tuple[_Node, ...]] = []
        while True:
            branches.append(self.sequence(depth, first=depth == 0 and not branches))
            if not self.source.match("|"):
                return _Group(tuple(branches))

    def sequence(self, depth: int, first: bool) -> tuple[_Node, ...]:
        """Items up to a ``|``, a ``)`` or the end; ``first``: at the very start of the pattern, where global
        flags may stand."""
        source = self.source
        items: list[_Node] = []
        while True:
            token = source.next
            if token is None or token in ("|", ")"):
                return tuple(items)
            source.get()
            if token[0] == "\\":
                items.append(self.escape(token))
            elif token not in _SPECIAL:
                items.append(_Char(token.__eq__))
            elif token == "[":
                items.append(self.char_set())
            elif token in ("*", "+", "?", "{"):
                self.repeat(token, items)
            elif token == ".":
                items.append(_Char(_any if self.dotall else _not_newline))
            elif token == "(":
                group = self.group(depth, first, items)
                if group is not None:
                    items.append(group)
            elif token == "^":
                items.append(_At("begin"))
            else:  # "$"
                items.append(_At("end"))

    def repeat(self, token: str, items: list[_Node]) -> None:
        """The quantifier ``token`` applied to the last item; a ``{`` that starts no valid repeat is a literal."""
        source = self.source
        here = source.tell()
        low, high = (1, None) if token == "+" else (0, 1) if token == "?" else (0, None)
        if token == "{":
            if source.next == "}":
                items.append(_Char("{".__eq__))
                return
            low_digits = source.get_while(len(self.pattern), _DIGITS)
            high_digits = source.get_while(len(self.pattern), _DIGITS) if source.match(",") else low_digits
            if not source.match("}"):
                items.append(_Char("{".__eq__))
                source.seek(here)
                return
            low = self.count(low_digits) if low_digits else 0
            high = self.count(high_digits) if high_digits else None
            if high is not None and high < low:
                raise source.error("min repeat greater than max repeat", source.tell() - here)
        if not items or isinstance(items[-1], _At):
            raise source.error("nothing to repeat", source.tell() - here + len(token))
        if isinstance(items[-1], _Repeat):
            raise source.error("multiple repeat", source.tell() - here + len(token))
        if source.match("+"):
            raise self.refuse("a possessive repeat")
        source.match("?")  # lazy: re.match finds a match or not as the greedy repeat does
        items[-1] = _Repeat(low, high, items[-1])

    def count(self, digits: str) -> int:
        if len(digits.lstrip("0")) > len(str(_REPEAT_LIMIT)) or int(digits) >= _REPEAT_LIMIT:
            raise _invalid(self.pattern, "the repetition number is too large")
        return int(digits)

    def escape(self, token: str) -> _Node:
        """An escape outside a set."""
        if token in _CATEGORIES:
            return _Char(_CATEGORIES[token])
        if token == r"\A":
            return _At("begin")
        if token in _END_OF_STRING:
            return _At("endz")
        if token in (r"\b", r"\B"):
            raise self.refuse("a word boundary (\\b or \\B)")
        if token in _CONTROL_ESCAPES:
            return _Char(_CONTROL_ESCAPES[token].__eq__)
        source, kind = self.source, token[1]
        if kind in _HEX_LENGTHS or kind == "N":
            return _Char(self.code_point(token).__eq__)
        if kind == "0":
            return _Char(chr(int(token[1:] + source.get_while(2, _OCTAL_DIGITS), 8)).__eq__)
        if kind in _DIGITS:
            escape = token
            if source.next is not None and source.next in _DIGITS:
                escape += source.get() or ""
                if escape[1] in _OCTAL_DIGITS and escape[2] in _OCTAL_DIGITS and source.next in _OCTAL_DIGITS:
                    escape += source.get() or ""
                    return _Char(self.octal(escape).__eq__)
            group = int(escape[1:])
            if group >= self.groups:
                raise source.error(f"invalid group reference {group}", len(escape) - 1)
            if group in self.open:
                raise source.error("cannot refer to an open group", len(escape))
            raise self.refuse("a back-reference")
        if kind in _ASCII_LETTERS:
            raise source.error(f"bad escape {token}", len(token))
        return _Char(kind.__eq__)

    def set_member(self, token: str) -> str | _Predicate:
        """An escape inside a set: a character, or a category's test."""
        if token in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[token]
        if token == r"\b":
            return "\b"
        if token in _CATEGORIES:
            return _CATEGORIES[token]
        kind = token[1]
        if kind in _HEX_LENGTHS or kind == "N":
            return self.code_point(token)
        if kind in _OCTAL_DIGITS:
            return self.octal(token + self.source.get_while(2, _OCTAL_DIGITS))
        if kind in _DIGITS or kind in _ASCII_LETTERS:
            raise self.source.error(f"bad escape {token}", len(token))
        return kind

    def code_point(self, token: str) -> str:
        r"""``\xhh``, ``\uhhhh``, ``\Uhhhhhhhh`` or ``\N{name}``: the character."""
        source, kind = self.source, token[1]
        if kind == "N":
            if not source.match("{"):
                raise source.error("missing {")
            name = source.get_until("}", "character name")
            try:
                found = unicodedata.lookup(name)
            except KeyError:
                found = ""
            if len(found) != 1:  # unknown, or a named sequence of several characters
                raise source.error(f"undefined character name {name!r}", len(name) + len(r"\N{}"))
            return found
        digits = source.get_while(_HEX_LENGTHS[kind], _HEX_DIGITS)
        escape = token + digits
        if len(digits) != _HEX_LENGTHS[kind]:
            raise source.error(f"incomplete escape {escape}", len(escape))
        if int(digits, 16) > sys.maxunicode:
            raise source.error(f"bad escape {escape}", len(escape))
        return chr(int(digits, 16))

    def octal(self, escape: str) -> str:
        value = int(escape[1:], 8)
        if value > 0o377:
            raise self.source.error(f"octal escape value {escape} outside of range 0-0o377", len(escape))
        return chr(value)

    def char_set(self) -> _Char:
        """A set, after its ``[``: a ``]`` first (or after the ``^``) is a member, as is a ``-`` at either edge."""
        source = self.source
        here = source.tell() - 1
        negate = source.match("^")
        literals: list[str] = []
        ranges: list[tuple[int, int]] = []
        categories: list[_Predicate] = []
        members = 0

        def add(member: str | _Predicate) -> None:
            if isinstance(member, str):
                literals.append(member)
            else:
                categories.append(member)

        while True:
            token = source.get()
            if token is None:
                raise source.error("unterminated character set", source.tell() - here)
            if token == "]" and members:
                return _Char(_char_set(literals, ranges, categories, negate))
            first = self.set_member(token) if token[0] == "\\" else token
            members += 1
            if not source.match("-"):
                add(first)
                continue
            token_after = source.get()
            if token_after is None:
                raise source.error("unterminated character set", source.tell() - here)
            if token_after == "]":
                add(first)
                add("-")
                return _Char(_char_set(literals, ranges, categories, negate))
            last = self.set_member(token_after) if token_after[0] == "\\" else token_after
            if not isinstance(first, str) or not isinstance(last, str) or ord(last) < ord(first):
                range_text = f"{token}-{token_after}"
                raise source.error(f"bad character range {range_text}", len(range_text))
            ranges.append((ord(first), ord(last)))

    def group(self, depth: int, first: bool, items: list[_Node]) -> _Group | None:
        """What follows a ``(``: a group, or None for a comment or global flags."""
        source = self.source
        start = source.tell() - 1
        capture, name, dotall = True, None, self.dotall
        if source.match("?"):
            kind = source.get()
            if kind is None:
                raise source.error("unexpected end of pattern")
            if kind == "P":
                if source.match("<"):
                    name = source.get_until(">", "group name")
                    self.check_name(name)
                elif source.match("="):
                    name = source.get_until(")", "group name")
                    self.check_name(name)
                    if name not in self.names:
                        raise source.error(f"unknown group name {name!r}", len(name) + 1)
                    if self.names[name] in self.open:
                        raise source.error("cannot refer to an open group", len(name) + 1)
                    raise self.refuse("a back-reference")
                else:
                    kind = source.get()
                    if kind is None:
                        raise source.error("unexpected end of pattern")
                    raise source.error(f"unknown extension ?P{kind}", len(kind) + 2)
            elif kind == ":":
                capture = False
            elif kind == "#":
                while True:
                    if source.next is None:
                        raise source.error("missing ), unterminated comment", source.tell() - start)
                    if source.get() == ")":
                        return None
            elif kind in ("=", "!", "<"):
                if kind == "<":
                    kind = source.get()
                    if kind is None:
                        raise source.error("unexpected end of pattern")
                    if kind not in ("=", "!"):
                        raise source.error(f"unknown extension ?<{kind}", len(kind) + 2)
                raise self.refuse(
                    "a look-ahead or look-behind" if kind == "=" else "a negative look-ahead or look-behind"
                )
            elif kind == "(":
                raise self.refuse("a conditional group")
            elif kind == ">":
                raise self.refuse("an atomic group")
            elif kind in _FLAGS or kind == "-":
                added, removed, scoped = self.flags(kind)
                if not scoped:
                    if not first or items:
                        raise source.error("global flags not at the start of the expression", source.tell() - start)
                    if added - _ACCEPTED_GLOBAL_FLAGS:
                        raise self.refuse("inline flags")
                    self.dotall = self.dotall or "s" in added
                    return None
                if (added | removed) - {"s"}:  # (?i:...) and the like
                    raise self.refuse("inline flags")
                capture, dotall = False, "s" in added or (dotall and "s" not in removed)
            else:
                raise source.error(f"unknown extension ?{kind}", len(kind) + 1)
        if depth >= MAX_DEPTH:
            raise PatternError(f"{self.pattern!r} nests groups more than {MAX_DEPTH} deep")
        group = 0
        if capture:
            group, self.groups = self.groups, self.groups + 1
            if name is not None:
                if name in self.names:
                    message = f"redefinition of group name {name!r} as group {group}; was group {self.names[name]}"
                    raise source.error(message, len(name) + 1)
                self.names[name] = group
            self.open.add(group)
        outer, self.dotall = self.dotall, dotall
        body = self.alternatives(depth + 1)
        self.dotall = outer
        if not source.match(")"):
            raise source.error("missing ), unterminated subpattern", source.tell() - start)
        self.open.discard(group)
        return body

    def check_name(self, name: str) -> None:
        if not name.isidentifier():
            raise self.source.error(f"bad character in group name {name!r}", len(name) + 1)

    def flags(self, kind: str) -> tuple[frozenset[str], frozenset[str], bool]:
        """Inline flags after ``(?``: those turned on, those turned off, and whether they scope a group
        (``(?s:...)``) rather than the whole pattern (``(?s)``)."""
        source = self.source
        added: set[str] = set()
        removed: set[str] = set()
        token = kind
        if kind != "-":
            while True:
                if token == "L":
                    raise source.error("bad inline flags: cannot use 'L' flag with a str pattern")
                added.add(token)
                if token in _TYPE_FLAGS and added & _TYPE_FLAGS != {token}:
                    raise source.error("bad inline flags: flags 'a', 'u' and 'L' are incompatible")
                following = source.get()
                if following is None:
                    raise source.error("missing -, : or )")
                token = following
                if token in (")", "-", ":"):
                    break
                if token not in _FLAGS:
                    raise source.error("unknown flag" if token.isalpha() else "missing -, : or )", len(token))
        if token == ")":
            return frozenset(added), frozenset(), False
        if added & _GLOBAL_ONLY_FLAGS:
            raise source.error("bad inline flags: cannot turn on global flag", 1)
        if token == "-":
            following = source.get()
            if following is None:
                raise source.error("missing flag")
            token = following
            if token not in _FLAGS:
                raise source.error("unknown flag" if token.isalpha() else "missing flag", len(token))
            while True:
                if token in _TYPE_FLAGS:
                    raise source.error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'")
                removed.add(token)
                following = source.get()
                if following is None:
                    raise source.error("missing :")
                token = following
                if token == ":":
                    break
                if token not in _FLAGS:
                    raise source.error("unknown flag" if token.isalpha() else "missing :", len(token))
        if removed & _GLOBAL_ONLY_FLAGS:
            raise source.error("bad inline flags: cannot turn off global flag", 1)
        if added & removed:
            raise source.error("bad inline flags: flag turned on and off", 1)
        return frozenset(added), frozenset(removed), True


@dataclass
class _Nfa:
    """Thompson's automaton: per state, a character test and its next state, epsilon moves, an assertion, or
    the acceptance of pattern ``accepts``."""

    tests: list[_Predicate | None] = field(default_factory=list)
    next: list[int] = field(default_factory=list)
    epsilon: list[tuple[int, ...]] = field(default_factory=list)
    assertion: list[str | None] = field(default_factory=list)
    accepts: list[int | None] = field(default_factory=list)

    def add(
        self,
        test: _Predicate | None = None,
        epsilon: tuple[int, ...] = (),
        assertion: str | None = None,
        accepts: int | None = None,
    ) -> int:
        if len(self.tests) >= MAX_STATES:
            raise _BuildError(f"needs more than {MAX_STATES} automaton states")
        self.tests.append(test)
        self.next.append(-1)
        self.epsilon.append(epsilon)
        self.assertion.append(assertion)
        self.accepts.append(accepts)
        return len(self.tests) - 1


_Fragment = tuple[int, list[tuple[int, str]]]
"""A piece of automaton: its start state, and the dangling exits to patch (state, "next" or "epsilon")."""


class _Builder:
    """A parsed pattern's pieces of automaton, one case per kind of node."""

    def __init__(self, nfa: _Nfa):
        self.nfa = nfa

    def patch(self, exits: list[tuple[int, str]], target: int) -> None:
        for state, kind in exits:
            if kind == "next":
                self.nfa.next[state] = target
            else:
                self.nfa.epsilon[state] = (*self.nfa.epsilon[state], target)

    def empty(self) -> _Fragment:
        state = self.nfa.add()
        return state, [(state, "epsilon")]

    def chain(self, fragments: Sequence[_Fragment]) -> _Fragment:
        if not fragments:
            return self.empty()
        start, exits = fragments[0]
        for next_start, next_exits in fragments[1:]:
            self.patch(exits, next_start)
            exits = next_exits
        return start, exits

    def node(self, node: _Node) -> _Fragment:
        if isinstance(node, _Char):
            state = self.nfa.add(test=node.test)
            return state, [(state, "next")]
        if isinstance(node, _At):
            state = self.nfa.add(assertion=node.kind)
            return state, [(state, "epsilon")]
        if isinstance(node, _Repeat):
            return self.repeat(node.low, node.high, node.body)
        if len(node.branches) == 1:
            return self.chain([self.node(item) for item in node.branches[0]])
        fragments = [self.chain([self.node(item) for item in branch]) for branch in node.branches]
        split = self.nfa.add(epsilon=tuple(start for start, _ in fragments))
        return split, [exit_ for _, exits in fragments for exit_ in exits]

    def repeat(self, low: int, high: int | None, body: _Node) -> _Fragment:
        """``body`` between ``low`` and ``high`` times (None: no bound): the mandatory copies in a row, then
        optional ones, or a loop. Greedy and lazy repeats accept the same names under ``re.match``."""
        copies = low if high is None else high
        if copies > MAX_STATES:
            raise _BuildError(f"repeats a part {copies} times")
        parts: list[_Fragment] = [self.node(body) for _ in range(low)]
        exits_to_end: list[tuple[int, str]] = []
        if high is None:
            start, exits = self.node(body)
            loop = self.nfa.add(epsilon=(start,))
            self.patch(exits, loop)
            parts.append((loop, [(loop, "epsilon")]))
        else:
            for _ in range(high - low):
                start, exits = self.node(body)
                skip = self.nfa.add(epsilon=(start,))
                exits_to_end.append((skip, "epsilon"))
                parts.append((skip, exits))
        start, exits = self.chain(parts)
        return start, [*exits, *exits_to_end]


class PatternSet:
    """Patterns (without their ``re:`` prefix), each matched against a name as ``re.match(pattern, name)``.

    :meth:`matching` gives the indices of the patterns that match a name, in
    one walk of the name for all of them.
    """

    def __init__(self, patterns: Sequence[str]):
        self.patterns = list(patterns)
        self._nfa = _Nfa()
        starts = []
        for index, pattern in enumerate(self.patterns):
            builder = _Builder(self._nfa)
            try:
                start, exits = builder.node(_Parser(pattern).parse())
            except _BuildError as error:
                raise PatternError(f"{pattern!r} {error}") from None
            except RecursionError:  # not with MAX_DEPTH, unless the caller is itself deep in its stack
                raise PatternError(f"{pattern!r} nests groups too deeply") from None
            builder.patch(exits, self._nfa.add(accepts=index))
            if self._consumes_after_end(start):
                raise PatternError(f"{pattern!r} matches characters after $ or \\Z, which the doctor does not match")
            starts.append(start)
        self._starts = frozenset(starts)
        self._reset()

    def _reset(self) -> None:
        """Forget the deterministic states built so far (they are rebuilt as names need them)."""
        self._states: list[_State] = []
        self._ids: dict[_State, int] = {}
        self._moves: list[_Moves] = []
        self._start = self._state_id(self._starts, frozenset(), begin=True)

    def _consumes_after_end(self, start: int) -> bool:
        """Whether a character-consuming state follows an end assertion anywhere in the automaton from ``start``."""
        nfa = self._nfa
        seen: set[tuple[int, bool]] = set()
        stack = [(start, False)]
        while stack:
            state, after_end = stack.pop()
            if (state, after_end) in seen:
                continue
            seen.add((state, after_end))
            after_end = after_end or nfa.assertion[state] in ("end", "endz")
            if nfa.tests[state] is not None:
                if after_end:
                    return True
                stack.append((nfa.next[state], after_end))
            stack.extend((target, after_end) for target in nfa.epsilon[state])
        return False

    def _state_id(self, states: Iterable[int], found: frozenset[int], begin: bool = False) -> int:
        """The deterministic state of the automaton's ``states`` and what they reach by epsilon moves (``^``
        held only at the beginning), after ``found`` matched earlier in the name."""
        nfa = self._nfa
        reach: set[int] = set()
        at_end, before_newline, carried = set(found), set(found), set(found)
        stack: list[tuple[int, frozenset[str]]] = [(state, frozenset()) for state in states]
        seen: set[tuple[int, frozenset[str]]] = set()
        while stack:
            state, held = stack.pop()
            if (state, held) in seen:
                continue
            seen.add((state, held))
            assertion = nfa.assertion[state]
            if assertion == "begin" and not begin:
                continue
            if assertion in ("end", "endz"):
                held = held | {assertion}
            index = nfa.accepts[state]
            if index is not None:
                at_end.add(index)
                if "endz" not in held:
                    before_newline.add(index)
                if not held:
                    carried.add(index)
            if nfa.tests[state] is not None and not held:
                reach.add(state)
            stack.extend((target, held) for target in nfa.epsilon[state])
        key = _State(frozenset(reach), frozenset(carried), frozenset(at_end), frozenset(before_newline))
        identifier = self._ids.get(key)
        if identifier is None:
            identifier = self._ids[key] = len(self._states)
            self._states.append(key)
            self._moves.append(_Moves(self._step, identifier))
        return identifier

    def _step(self, state: int, ch: str) -> int:
        """The deterministic state after ``state`` on ``ch``."""
        tests, following = self._nfa.tests, self._nfa.next
        reach, carried, _, _ = self._states[state]
        return self._state_id((following[s] for s in reach if (test := tests[s]) is not None and test(ch)), carried)

    def _walk(self, name: str) -> int:
        """The deterministic state after ``name``."""
        moves, state = self._moves, self._start
        for ch in name:
            state = moves[state][ch]
        return state

    def matching(self, name: str) -> frozenset[int]:
        """The indices of the patterns that ``re.match`` would find in ``name``: in time linear in its length."""
        if len(self._states) > MAX_DFA_STATES:
            self._reset()
        found = self._states[self._walk(name)].at_end
        if name.endswith("\n"):  # $ also holds just before a final newline
            found = found | self._states[self._walk(name[:-1])].before_newline
        return found


class _State(NamedTuple):
    """A deterministic state: the automaton's character-consuming states it holds, and the patterns matched
    where the name goes on after it (``carried``), where it ends here, and where a final newline follows."""

    reach: frozenset[int]
    carried: frozenset[int]
    at_end: frozenset[int]
    before_newline: frozenset[int]


class _Moves(dict[str, int]):
    """A deterministic state's moves: the next state on each character, built the first time it is taken."""

    def __init__(self, step: Callable[[int, str], int], state: int):
        super().__init__()
        self.step, self.state = step, state

    def __missing__(self, ch: str) -> int:
        found = self[ch] = self.step(self.state, ch)
        return found
