"""``re:`` patterns from a checkpoint's config matched as ``re.match`` matches them, in time linear in the name.

compressed-tensors (``utils/match.py``, ``match_name``) and vLLM match a
config's ``re:`` targets and ``ignore`` entries with ``re.match``: Python's
backtracking engine, in which a pattern such as ``model\\.(a+)+b`` takes
time exponential in the name's length. A hostile checkpoint chooses both the
patterns and the names, so the doctor never runs them through ``re``.

Instead each pattern is parsed by Python's own regular-expression parser
(``re._parser``, so the syntax and every construct's meaning are ``re``'s),
turned into a finite automaton (Thompson's construction), and matched by
walking a deterministic automaton built from it as names need it: one step
per character, whatever the pattern. What a finite automaton cannot match
(back-references, look-arounds, atomic groups, possessive repeats, word
boundaries, inline flags but DOTALL) is refused with a :class:`PatternError`
naming the construct. ``tests/base/doctor/test_patterns.py`` holds the verdicts to
``re.match``'s on real module names and generated patterns.

A set of patterns shares one automaton, and names that share a prefix with
the name before them (the header lists a model's modules in order) resume
the walk where that prefix ends. A set may be used from several threads (a
Hub check reads shards in threads): one walk at a time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from re import _constants as sre_constants  # Python 3.11 and later, as pyproject requires
from re import _parser as sre_parse

__all__ = ["MAX_STATES", "PatternError", "PatternSet"]

MAX_STATES = 20_000
"""The most automaton states the patterns of one config may need; a config that needs more is refused."""
MAX_DFA_STATES = 50_000
"""Deterministic states kept at once; past this the cache is dropped and rebuilt (the walk stays linear)."""

_Predicate = Callable[[str], bool]
_END, _BEFORE_FINAL_NEWLINE, _MIDDLE = 0, 1, 2
"""Where in the name a position is, for ``$`` (end, or just before a final newline) and ``\\Z`` (end only)."""


class PatternError(ValueError):
    """A pattern that cannot be matched in bounded time, or is not a valid regular expression."""


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
            raise PatternError(f"needs more than {MAX_STATES} automaton states")
        self.tests.append(test)
        self.next.append(-1)
        self.epsilon.append(epsilon)
        self.assertion.append(assertion)
        self.accepts.append(accepts)
        return len(self.tests) - 1


_Fragment = tuple[int, list[tuple[int, str]]]
"""A piece of automaton: its start state, and the dangling exits to patch (state, "next" or "epsilon")."""


class _Builder:
    def __init__(self, nfa: _Nfa, pattern: str, dotall: bool):
        self.nfa = nfa
        self.pattern = pattern
        self.dotall = dotall
        """``.`` matches a newline too (DOTALL: ``(?s)``, or inside ``(?s:...)``)."""

    def refuse(self, what: str) -> PatternError:
        return PatternError(f"uses {what}, which cannot be matched in bounded time")

    def patch(self, exits: list[tuple[int, str]], target: int) -> None:
        for state, kind in exits:
            if kind == "next":
                self.nfa.next[state] = target
            else:
                self.nfa.epsilon[state] = (*self.nfa.epsilon[state], target)

    def empty(self) -> _Fragment:
        state = self.nfa.add()
        return state, [(state, "epsilon")]

    def sequence(self, items: Sequence[tuple[object, object]]) -> _Fragment:
        fragments = [self.item(op, av) for op, av in items]
        if not fragments:
            return self.empty()
        start, exits = fragments[0]
        for next_start, next_exits in fragments[1:]:
            self.patch(exits, next_start)
            exits = next_exits
        return start, exits

    def char(self, test: _Predicate) -> _Fragment:
        state = self.nfa.add(test=test)
        return state, [(state, "next")]

    def item(self, op: object, av: object) -> _Fragment:
        """One construct of re's parser (one case each)."""
        c = sre_constants
        if op is c.LITERAL:
            ch = chr(av)  # type: ignore[arg-type]
            return self.char(ch.__eq__)
        if op is c.NOT_LITERAL:
            ch = chr(av)  # type: ignore[arg-type]
            return self.char(ch.__ne__)
        if op is c.ANY:
            return self.char(_any if self.dotall else "\n".__ne__)
        if op is c.IN:
            return self.char(self.char_set(av))  # type: ignore[arg-type]
        if op is c.CATEGORY:
            return self.char(self.category(av))
        if op is c.AT:
            kinds = {c.AT_BEGINNING: "begin", c.AT_BEGINNING_STRING: "begin", c.AT_END: "end", c.AT_END_STRING: "endz"}
            if av not in kinds:
                raise self.refuse("a word boundary (\\b or \\B)" if "BOUNDARY" in str(av) else f"the assertion {av}")
            state = self.nfa.add(assertion=kinds[av])  # type: ignore[index]
            return state, [(state, "epsilon")]
        if op is c.SUBPATTERN:
            _, add_flags, del_flags, body = av  # type: ignore[misc]
            if (add_flags | del_flags) & ~c.SRE_FLAG_DOTALL:  # (?i:...) and the like
                raise self.refuse("inline flags")
            outer = self.dotall
            self.dotall = bool(add_flags & c.SRE_FLAG_DOTALL) or (outer and not del_flags & c.SRE_FLAG_DOTALL)
            try:
                return self.sequence(body)
            finally:
                self.dotall = outer
        if op is c.BRANCH:
            _, branches = av  # type: ignore[misc]
            fragments = [self.sequence(branch) for branch in branches]
            split = self.nfa.add(epsilon=tuple(start for start, _ in fragments))
            return split, [exit_ for _, exits in fragments for exit_ in exits]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            low, high, body = av  # type: ignore[misc]
            return self.repeat(low, high, body)
        names = {
            c.GROUPREF: "a back-reference",
            c.GROUPREF_EXISTS: "a conditional group",
            c.ASSERT: "a look-ahead or look-behind",
            c.ASSERT_NOT: "a negative look-ahead or look-behind",
        }
        names.update(
            {
                getattr(c, n): d
                for n, d in (("ATOMIC_GROUP", "an atomic group"), ("POSSESSIVE_REPEAT", "a possessive repeat"))
                if hasattr(c, n)
            }
        )
        raise self.refuse(names.get(op, f"the construct {op}"))

    def repeat(self, low: int, high: int, body: object) -> _Fragment:
        """``body`` between ``low`` and ``high`` times (``MAXREPEAT``: no bound): the mandatory copies in a row,
        then optional ones, or a loop. Greedy and lazy repeats accept the same names under ``re.match``."""
        unbounded = high is sre_constants.MAXREPEAT
        copies = low if unbounded else high
        if copies > MAX_STATES:
            raise PatternError(f"repeats a part {copies} times")
        parts: list[_Fragment] = [self.sequence(body) for _ in range(low)]  # type: ignore[arg-type]
        exits_to_end: list[tuple[int, str]] = []
        if unbounded:
            start, exits = self.sequence(body)  # type: ignore[arg-type]
            loop = self.nfa.add(epsilon=(start,))
            self.patch(exits, loop)
            parts.append((loop, [(loop, "epsilon")]))
        else:
            for _ in range(high - low):
                start, exits = self.sequence(body)  # type: ignore[arg-type]
                skip = self.nfa.add(epsilon=(start,))
                exits_to_end.append((skip, "epsilon"))
                parts.append((skip, exits))
        if not parts:
            return self.empty()
        start, exits = parts[0]
        for next_start, next_exits in parts[1:]:
            self.patch(exits, next_start)
            exits = next_exits
        return start, [*exits, *exits_to_end]

    def char_set(self, items: Iterable[tuple[object, object]]) -> _Predicate:
        c = sre_constants
        negate, literals, ranges, categories = False, set(), [], []
        for op, av in items:
            if op is c.NEGATE:
                negate = True
            elif op is c.LITERAL:
                literals.add(chr(av))  # type: ignore[arg-type]
            elif op is c.RANGE:
                low, high = av  # type: ignore[misc]
                ranges.append((low, high))
            elif op is c.CATEGORY:
                categories.append(self.category(av))
            else:
                raise self.refuse(f"the set member {op}")
        frozen = frozenset(literals)

        def test(ch: str) -> bool:
            found = (
                ch in frozen
                or any(low <= ord(ch) <= high for low, high in ranges)
                or any(category(ch) for category in categories)
            )
            return found != negate

        return test

    def category(self, av: object) -> _Predicate:
        c = sre_constants
        word = _is_word
        tests = {
            c.CATEGORY_DIGIT: str.isdecimal,
            c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
            c.CATEGORY_SPACE: _is_space,
            c.CATEGORY_NOT_SPACE: lambda ch: not _is_space(ch),
            c.CATEGORY_WORD: word,
            c.CATEGORY_NOT_WORD: lambda ch: not word(ch),
        }
        if av not in tests:
            raise self.refuse(f"the category {av}")
        return tests[av]  # type: ignore[index]


def _any(ch: str) -> bool:
    return True


def _is_word(ch: str) -> bool:
    """``\\w`` for a str pattern: Unicode letters, digits and numerics, and the underscore."""
    return ch.isalnum() or ch == "_"


def _is_space(ch: str) -> bool:
    """``\\s`` for a str pattern: Unicode white space (``str.isspace``), as sre's ``Py_UNICODE_ISSPACE``."""
    return ch.isspace()


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
            try:
                parsed = sre_parse.parse(pattern)
            except re.error as error:
                raise PatternError(f"{pattern!r} is not a regular expression ({error})") from None
            flags = parsed.state.flags
            if flags & ~(sre_constants.SRE_FLAG_UNICODE | sre_constants.SRE_FLAG_DOTALL):
                raise PatternError(f"{pattern!r} uses inline flags, which cannot be matched in bounded time")
            builder = _Builder(self._nfa, pattern, dotall=bool(flags & sre_constants.SRE_FLAG_DOTALL))
            try:
                start, exits = builder.sequence(list(parsed))
            except PatternError as error:
                raise PatternError(f"{pattern!r} {error}") from None
            builder.patch(exits, self._nfa.add(accepts=index))
            if self._consumes_after_end(start):
                raise PatternError(f"{pattern!r} matches characters after $ or \\Z, which the doctor does not match")
            starts.append(start)
        self._start_states = tuple(starts)
        self._walk = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        """Forget the deterministic states built so far (they are rebuilt as names need them)."""
        self._dfa: dict[tuple[int, str], int] = {}
        self._closures: list[tuple[frozenset[int], frozenset[int], tuple[frozenset[int], ...]]] = []
        self._ids: dict[tuple[object, ...], int] = {}
        start = self._closure_id(frozenset(self._start_states), begin=True)
        self._previous: tuple[str, list[int], list[frozenset[int]]] = ("", [start], [frozenset()])

    def _consumes_after_end(self, start: int) -> bool:
        """Whether a character-consuming state follows an end assertion anywhere in the automaton from ``start``."""
        nfa, seen, stack = self._nfa, set(), [(start, False)]
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

    def _closure(self, states: Iterable[int], begin: bool) -> tuple[frozenset[int], tuple[frozenset[int], ...]]:
        """The states reachable by epsilon moves, with ``^`` held only at the beginning, and what they accept
        at the end, just before a final newline, and in the middle of a name."""
        nfa = self._nfa
        reach: set[int] = set()
        accepted: list[set[int]] = [set(), set(), set()]
        stack = [(state, frozenset()) for state in states]
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
            if nfa.accepts[state] is not None:
                index = nfa.accepts[state]
                accepted[_END].add(index)
                if "endz" not in held:
                    accepted[_BEFORE_FINAL_NEWLINE].add(index)
                if not held:
                    accepted[_MIDDLE].add(index)
            if nfa.tests[state] is not None and not held:
                reach.add(state)
            stack.extend((target, held) for target in nfa.epsilon[state])
        return frozenset(reach), tuple(frozenset(a) for a in accepted)

    def _closure_id(self, states: frozenset[int], begin: bool = False) -> int:
        reach, accepted = self._closure(states, begin)
        key = (reach, accepted, begin)
        identifier = self._ids.get(key)
        if identifier is None:
            self._closures.append((reach, accepted[_MIDDLE], accepted))
            identifier = self._ids[key] = len(self._closures) - 1
        return identifier

    def _step(self, state: int, ch: str) -> int:
        found = self._dfa.get((state, ch))
        if found is not None:
            return found
        nfa = self._nfa
        reach = self._closures[state][0]
        following = frozenset(nfa.next[s] for s in reach if nfa.tests[s](ch))  # type: ignore[misc]
        found = self._closure_id(following)
        self._dfa[(state, ch)] = found
        return found

    def matching(self, name: str) -> frozenset[int]:
        """The indices of the patterns that ``re.match`` would find in ``name``: in time linear in its length."""
        with self._walk:
            return self._matching(name)

    def _matching(self, name: str) -> frozenset[int]:
        if len(self._closures) > MAX_DFA_STATES:
            self._reset()
        previous, states, accepted = self._previous
        shared = 0
        limit = min(len(previous), len(name))
        while shared < limit and previous[shared] == name[shared]:
            shared += 1
        del states[shared + 1 :], accepted[shared + 1 :]
        state, found = states[-1], accepted[-1]
        dfa, closures, step = self._dfa, self._closures, self._step
        for ch in name[shared:]:
            middle = closures[state][1]
            if middle:
                found = found | middle
            following = dfa.get((state, ch))
            state = step(state, ch) if following is None else following
            states.append(state)
            accepted.append(found)
        self._previous = (name, states, accepted)
        closure = self._closures[state][2]
        result = found | closure[_END]
        if name.endswith("\n") and len(states) >= 2:
            result = result | self._closures[states[-2]][2][_BEFORE_FINAL_NEWLINE]
        return result

    def match(self, index: int, name: str) -> bool:
        return index in self.matching(name)

    def __reduce__(self) -> tuple[type, tuple[list[str]]]:
        """Rebuilt from its patterns: its automaton is built again where it is used (a worker process)."""
        return (type(self), (self.patterns,))
