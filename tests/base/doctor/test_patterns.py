"""``re:`` patterns from a config, matched in linear time with ``re.match``'s verdicts, or refused by name."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalar_scales.doctor import patterns as patterns_module
from scalar_scales.doctor.patterns import MAX_DEPTH, PatternError, PatternSet

MODULES = [
    *(
        f"model.layers.{layer}.mlp.experts.{expert}.{projection}"
        for layer in (0, 1, 12)
        for expert in (0, 7, 255)
        for projection in ("gate_proj", "up_proj", "down_proj")
    ),
    *(
        f"model.layers.{layer}.self_attn.{p}"
        for layer in (0, 3)
        for p in ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
    ),
    "model.layers.0.mlp.gate",
    "model.layers.0.mlp.shared_expert.gate_proj",
    "model.layers.0.mlp.shared_expert_gate",
    "model.layers.3.mlp.shared_experts.down_proj",
    "lm_head",
    "model.embed_tokens",
    "model.norm",
    "layers.7.ffn.experts.31.w1",
    "layers.7.ffn.shared_experts.w3",
    "layers.7.attn.wq_a",
    "layers.7.attn.wkv",
    "mtp.0.ffn.experts.1.w2",
    "model.layers.43.mtp_block.ffn.experts.0.w1",
    "model.mtp.layers.0.eh_proj",
    "",
    "name with spaces",
    "trailing\n",
    "x\ny",
    "é.ünï.代码",
]
"""Module names of the toy architectures (Qwen3-MoE, Qwen2-MoE, OLMoE, DeepSeek-V3 and V4), and odd ones."""

PATTERNS = [
    r".*mlp.gate$",
    r".*mtp\..*",
    r"^mtp.*",
    r".*lm_head",
    r"re:.*\.(q|k|v)_proj$"[3:],
    r".*experts\.\d+\.w[13]",
    r"model\.layers\.(0|12)\..*",
    r".*self_attn\.(?:q|k|v)_proj$",
    r".*shared_expert(_gate)?$",
    r"[a-z_]+$",
    r".*\.\w+_proj",
    r"(model\.)?layers\.\d{1,2}\.",
    r".*\n?$",
    r"\s*model",
    r".*\Z",
    r"[^.]+\.[^.]*$",
    r"lm_head",
    r"model\.(a+)+b",
    r"(x*)*y",
    r"a{0,3}b",
    r"(?:ab|a)*c",
]


def verdict(pattern: str, name: str) -> bool:
    return 0 in PatternSet([pattern]).matching(name)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_real_patterns_on_real_module_names_get_re_match_s_verdict(pattern):
    found = PatternSet([pattern])
    assert [0 in found.matching(name) for name in MODULES] == [re.match(pattern, n) is not None for n in MODULES]


def test_a_set_of_patterns_says_which_match_whatever_order_names_come_in():
    patterns = PatternSet(PATTERNS)
    for names in (MODULES, sorted(MODULES), list(reversed(MODULES))):
        for name in names:
            assert patterns.matching(name) == {i for i, p in enumerate(PATTERNS) if re.match(p, name)}, name


ATOM = st.sampled_from(
    [
        "a",
        "b",
        ".",
        r"\.",
        r"\d",
        r"\w",
        r"\s",
        "[ab]",
        "[^a]",
        "[a-c0-2]",
        "x",
        "_",
        "(a|b)",
        "(?:ab)",
        "(a|)",
        "()",
        r"\n",
    ]
)
QUANTIFIER = st.sampled_from(["", "", "*", "+", "?", "{1,2}", "{2}", "*?", "+?", "??", "{0,1}"])
PATTERN = st.builds(
    lambda anchor, parts, end: anchor + "".join(a + q for a, q in parts) + end,
    st.sampled_from(["", "^", r"\A"]),
    st.lists(st.tuples(ATOM, QUANTIFIER), min_size=1, max_size=6),
    st.sampled_from(["", "", "$", r"\Z"]),
)
NAME = st.text(alphabet="ab._x1\n ", max_size=10)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=PATTERN, names=st.lists(NAME, min_size=1, max_size=8))
def test_generated_patterns_get_re_match_s_verdict_or_are_refused(pattern, names):
    try:
        patterns = PatternSet([pattern])
    except PatternError:
        return
    for name in sorted(names):
        assert (0 in patterns.matching(name)) == (re.match(pattern, name) is not None), (pattern, name)


def test_a_pattern_that_backtracks_exponentially_is_matched_in_one_walk():
    """``re.match`` takes about 17.6 s on 28 letters and 4 times longer for every 2 more."""
    assert not verdict(r"model\.(a+)+b", "model." + "a" * 10_000)
    assert verdict(r"model\.(a+)+b", "model." + "a" * 10_000 + "b")


REFUSED = [
    (r"(a)\1", "a back-reference"),
    (r"(?P<n>a)(?P=n)", "a back-reference"),
    (r"a(?=b)", "a look-ahead or look-behind"),
    (r"(?<=a)b", "a look-ahead or look-behind"),
    (r"(?<!a)b", "a negative look-ahead or look-behind"),
    (r"a(?!b)", "a negative look-ahead or look-behind"),
    (r"(?>a+)b", "an atomic group"),
    (r"a++b", "a possessive repeat"),
    (r"a*+b", "a possessive repeat"),
    (r"a?+b", "a possessive repeat"),
    (r"a{1,2}+b", "a possessive repeat"),
    (r"\bmtp\b", "a word boundary (\\b or \\B)"),
    (r"mtp\B", "a word boundary (\\b or \\B)"),
    (r"(?i)mtp", "inline flags"),
    (r"(?m)^mtp", "inline flags"),
    (r"(?x) m t p", "inline flags"),
    (r"(?a)\w", "inline flags"),
    (r"(?si)mtp", "inline flags"),
    (r"(?i:mtp)", "inline flags"),
    (r"(?-i:mtp)", "inline flags"),
    (r"(?s-i:mtp)", "inline flags"),
    (r"(?u:mtp)", "inline flags"),
    (r"(a)?(?(1)b|c)", "a conditional group"),
    (r"(?P<n>a)?(?(n)b)", "a conditional group"),
    (r"a$b", "characters after $ or \\Z"),
    (r"a\Z.", "characters after $ or \\Z"),
    (r"(a$)+", "characters after $ or \\Z"),
    (r"a{20001}", "repeats a part 20001 times"),
    (r"(?:a{200}){200}", f"needs more than {patterns_module.MAX_STATES} automaton states"),
    ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), f"nests groups more than {MAX_DEPTH} deep"),
]
"""Patterns ``re.compile`` accepts that the module refuses, and what the refusal names."""


@pytest.mark.parametrize(("pattern", "what"), REFUSED)
def test_a_pattern_no_finite_automaton_matches_is_refused_naming_what_it_uses(pattern, what):
    re.compile(pattern)
    with pytest.raises(PatternError, match=re.escape(what)) as refused:
        PatternSet([pattern])
    assert "is not a regular expression" not in str(refused.value)


def test_an_invalid_regular_expression_is_refused_with_re_s_reason():
    with pytest.raises(PatternError, match=r"'\(a' is not a regular expression \(missing \), unterminated subpattern"):
        PatternSet(["(a"])


def test_a_pattern_too_large_for_an_automaton_is_refused():
    with pytest.raises(PatternError, match="repeats a part 100000 times"):
        PatternSet(["a{100000}"])


# The parser held to re's: every construct the module accepts, generated, and compared with re.match on names.

NAME_CHARS = "ab_x1.- ]{}\n\té\b\x1c\u2028٣²Aé😀\x00"
"""Characters the generated patterns speak of, and some that Unicode classes treat apart (an Arabic-Indic
digit: \\d; a superscript: \\w but not \\d; U+001C and U+2028: \\s; a character beyond the BMP; NUL)."""

LITERAL = st.sampled_from(
    [
        *"ab_x1é ,:}]-",
        *("\\" + c for c in ".-[](){}*+?|^$\\ #&~é"),  # escaped punctuation and escaped non-ASCII: literals
        *(r"\n", r"\t", r"\a", r"\f", r"\r", r"\v"),
        *(r"\x61", r"\x2E", r"\u00e9", r"\U00000061", r"\U0001F600", r"\u2028"),
        *(r"\0", r"\00", r"\012", r"\141", r"\177", r"\0a", r"\08"),  # octal; \0 before a letter, an 8
        r"\N{LATIN SMALL LETTER A}",
        r"\N{LATIN CAPITAL LETTER A}",
        r"\N{EM DASH}",
        r"\N{DIGIT ONE}",
    ]
)
CATEGORY = st.sampled_from([r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", "."])
SET_MEMBER = st.sampled_from(
    [
        *"ab_x1é.[$|(){}*",
        "a-c",
        "0-9",
        "x-x",
        r"\x00-\x2f",
        r"\u00e0-\u00ff",
        r"\d",
        r"\w",
        r"\s",
        r"\D",
        r"\W",
        r"\S",
        r"\b",  # a backspace in a set
        r"\n",
        r"\]",
        r"\-",
        r"\\",
        r"\^",
        r"\141",
        r"\0",
        r"\7",
        r"\x62",
        r"\N{LATIN SMALL LETTER B}",
        r"\.",
    ]
)
CHAR_SET = st.builds(
    lambda negate, first, members, last: "[" + negate + first + "".join(members) + last + "]",
    st.sampled_from(["", "^"]),
    st.sampled_from(["", "", "]", "-", "]-a", "a^", "]^"]),  # a "]" first is a member, as is a "-" at either edge
    st.lists(SET_MEMBER, min_size=1, max_size=4),
    st.sampled_from(["", "", "-"]),
)
ANCHOR = st.sampled_from(["^", "$", r"\A", r"\Z"])
LITERAL_BRACE = st.sampled_from(["{", "{}", "{a}", "{1", "{1,a}", "{,", "x{2,", "{ 1}"])
"""A ``{`` that starts no valid repeat is a literal."""
QUANTIFIERS = st.sampled_from(["*", "+", "?", "{0}", "{2}", "{1,}", "{,2}", "{0,2}", "{1,3}", "{,}", "{00}", "{02,3}"])
COMMENT = st.just("(?#a comment (with a paren)")


def quantified(atom: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda a, q, lazy: a + q + lazy if q else a,
        atom,
        st.one_of(st.just(""), st.just(""), QUANTIFIERS),
        st.sampled_from(["", "", "?"]),  # the lazy form
    )


def groups(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda opening, body: opening + body + ")",
        st.sampled_from(["(", "(?:", "(?P<g>", "(?s:", "(?-s:"]),
        inner,
    )


def alternatives(item: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    sequence = st.lists(item, max_size=4).map("".join)
    return st.lists(sequence, min_size=1, max_size=3).map("|".join)


def numbered_groups(pattern: str) -> str:
    """Each ``(?P<g>`` given a name of its own (``re`` refuses a name given twice)."""
    numbers = iter(range(len(pattern)))
    return re.sub(r"\(\?P<g>", lambda _: f"(?P<g{next(numbers)}>", pattern)


def compiles(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's FutureWarning on a "[" in a set
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


VALID_BODY = st.recursive(
    alternatives(st.one_of(quantified(st.one_of(LITERAL, CATEGORY, CHAR_SET)), ANCHOR, LITERAL_BRACE, COMMENT)),
    lambda inner: alternatives(st.one_of(quantified(groups(inner)), quantified(LITERAL), ANCHOR, COMMENT)),
    max_leaves=12,
).filter(compiles)
"""Pieces that join into a repeat of nothing ("{1" then "}") are not a pattern: re refuses them."""
VALID_PATTERN = st.builds(
    lambda flags, body: flags + body, st.sampled_from(["", "", "(?s)", "(?u)", "(?su)", "(?#c)(?s)"]), VALID_BODY
).map(numbered_groups)
"""Patterns ``re`` accepts, of every construct the module matches (group names numbered apart)."""


MATCHED_NAME_LENGTH = 12
"""Names ``re`` matches are cut to this: ``re.match`` backtracks exponentially on some generated patterns
(``(?:\t+){1,}`` took 0.4 s on 24 tabs, and twice as long for each more), and hypothesis draws long ones."""


def names_for(data: st.DataObject, compiled: re.Pattern[str]) -> list[str]:
    """Names over the characters patterns speak of, names ``re`` matches, and their prefixes (near misses)."""
    names = data.draw(st.lists(st.text(alphabet=NAME_CHARS, max_size=8), max_size=6))
    try:
        matching = data.draw(st.lists(st.from_regex(compiled).map(lambda m: m[:MATCHED_NAME_LENGTH]), max_size=3))
    except Exception:  # a pattern hypothesis cannot generate strings for
        matching = []
    return [*names, *matching, *(m[:-1] for m in matching), *(m + "x" for m in matching)]


def assert_re_verdicts(pattern: str, names: list[str]) -> None:
    compiled = re.compile(pattern)
    found = PatternSet([pattern])
    for name in sorted(names):
        assert (0 in found.matching(name)) == (compiled.match(name) is not None), (pattern, name)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(pattern=VALID_PATTERN, data=st.data())
def test_every_construct_the_module_accepts_means_what_it_means_to_re(pattern, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's FutureWarning on a "[" in a set
        compiled = re.compile(pattern)
    try:
        PatternSet([pattern])
    except PatternError as error:  # all that may refuse a pattern of these constructs: $ or \Z before more
        assert "characters after $ or \\Z" in str(error), (pattern, str(error))
        return
    assert_re_verdicts(pattern, names_for(data, compiled))


# The parser held to re's on anything: fragments, valid or not, run together.

FRAGMENTS = [
    *("a", "b", "é", "\n", " ", "-", "]", "[", "^", "$", ".", ",", "}", "{", "1", "2", "0", "|", "*", "+", "?", ")"),
    *(r"\.", r"\-", r"\]", r"\[", "\\\\", r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", r"\A", r"\Z", r"\z", r"\n"),
    *(r"\t", r"\x41", r"\x4", r"\x4g", r"\u00e9", r"\u00", r"\U0001F600", r"\U00110000", r"\0", r"\01", r"\012"),
    *(r"\101", r"\400", r"\777", r"\8", r"\12", r"\N{LATIN SMALL LETTER A}", r"\N{NOPE}", r"\N", r"\N{", r"\N{}"),
    *(r"\q", r"\é", "\\", "(", "(?:", "(?P<n>", "(?P<m>", "(?P<1>", "(?P<a\\>", "(?P", "(?P<n>)", "(?#c)", "(?#"),
    *("(?#a\\)b)", "{1}", "{,2}", "{1,}", "{0,2}", "{2,1}", "{,}", "{}", "{0}", "{00000000000001}", "{1,2}?"),
    *("*?", "+?", "??", "(?s)", "(?u)", "(?s:", "(?-s:", "(?su)", "(?s-s:", "(?-", "(?s-:", "(?", "(?<"),
    *("(?L)", "(?au)", "(?-u:", "(?P>", "(?Pa", "(?e)", "(?s", "(?-s", "(?s-"),
    *("[^]", "[]]", "[a-]", "[-a]", "[a-z]", "[z-a]", r"[\d-a]", r"[a-\d]", r"[\b]", r"[\A]", r"[\8]", r"[\777]"),
    *(r"[\x41-\x40]", r"[\0-\x7f]", r"[\N{DIGIT ONE}-9]", "a-z", r"\d-z", "z-a"),
]
"""Pieces of patterns, most of which run together are not regular expressions; none uses a refused construct."""
REFUSED_FRAGMENTS = [
    *(r"\1", r"\b", r"\B", "(?P=n)", "(?P=x)", "(?=", "(?!", "(?<=", "(?<!", "(?>", "(?(1)", "*+", "++", "?+"),
    *("(?i)", "(?x)", "(?a)", "(?t)", "(?i:", "(?-i:", "(?i-s:", "(?u:", "(?P<n>a)(?P=n)", "(a)\\1"),
]
"""Pieces that use constructs the module refuses (run together, more pieces may make one: ``(?`` and ``(1)``)."""
REFUSAL_MARKERS = {
    "a back-reference": r"\\[1-9]|\(\?P=",
    "a negative look-ahead or look-behind": r"\(\?<?!",
    "a look-ahead or look-behind": r"\(\?<?=",
    "an atomic group": r"\(\?>",
    "a possessive repeat": r"[*+?}]\+",
    "a word boundary": r"\\[bB]",
    "a conditional group": r"\(\?\(",
    "characters after $ or \\Z": r"\$|\\[Zz]",
}
"""What in a pattern's text may make each refusal (a superset: ``\\b`` may also be a backspace in a set)."""


def refusable(pattern: str) -> set[str]:
    """The refusals a pattern's text may earn: those whose marker it holds, and inline flags where a complete
    ``(?flags)`` holds more than ``s`` and ``u`` or a ``(?flags-flags:`` more than ``s``."""
    found = {what for what, marker in REFUSAL_MARKERS.items() if re.search(marker, pattern)}
    for on, off, end in re.findall(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])", pattern):
        if set(on + off) - ({"s", "u"} if end == ")" else {"s"}):
            found.add("inline flags")
    return found


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    pieces=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(REFUSED_FRAGMENTS)), min_size=1, max_size=7),
    names=st.lists(st.text(alphabet=NAME_CHARS, max_size=6), max_size=6),
)
def test_a_pattern_re_refuses_is_refused_with_re_s_reason_and_one_it_accepts_gets_its_verdict(pieces, names):
    """Accepted: re accepts it and gives the same verdicts. Refused as not a regular expression: re refuses it,
    for the same reason. Refused by name: the pattern may use what is named; where it can use nothing refused,
    re's refusal is the refusal."""
    pattern = "".join(pieces)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
            reason = None
        except re.error as error:
            reason = str(error)
        except (OverflowError, ValueError):  # a repeat count past re's bound; (?a) then (?u)
            reason = ""
    try:
        PatternSet([pattern])
    except PatternError as error:
        refusal = str(error)
    else:
        assert reason is None, (pattern, reason)
        assert_re_verdicts(pattern, names)
        return
    may_refuse = refusable(pattern)
    if "is not a regular expression" in refusal:
        assert reason is not None, (pattern, refusal)
        if reason:
            assert refusal == f"{pattern!r} is not a regular expression ({reason})", pattern
    else:
        assert any(what in refusal for what in may_refuse), (pattern, refusal)
        assert reason is None or may_refuse - {"characters after $ or \\Z"}, (pattern, refusal, reason)


REFUSED_SNIPPETS = [
    ("(x)\\1", "a back-reference"),
    ("(?P<rb>x)(?P=rb)", "a back-reference"),
    ("(?=x)", "a look-ahead or look-behind"),
    ("(?<=x)", "a look-ahead or look-behind"),
    ("(?!x)", "a negative look-ahead or look-behind"),
    ("(?<!x)", "a negative look-ahead or look-behind"),
    ("(?>x)", "an atomic group"),
    ("x*+", "a possessive repeat"),
    ("x++", "a possessive repeat"),
    ("x?+", "a possessive repeat"),
    ("x{1,2}+", "a possessive repeat"),
    ("\\b", "a word boundary (\\b or \\B)"),
    ("\\B", "a word boundary (\\b or \\B)"),
    ("(x)?(?(1)x|y)", "a conditional group"),
    ("(?i:x)", "inline flags"),
    ("(?m:x)", "inline flags"),
    ("(?-i:x)", "inline flags"),
    ("(?u:x)", "inline flags"),
]
GLOBAL_REFUSED = [
    ("(?i)", "inline flags"),
    ("(?m)", "inline flags"),
    ("(?sm)", "inline flags"),  # not (?x): it changes what the rest means (REFUSED has it)
    ("(?a)", "inline flags"),
]


PLACES = [
    "{left}{snippet}{right}",
    "(?:{left}|{snippet}){right}",
    "(?:{left}(?:{right}|{snippet})*)",
    "(?:{snippet})?{left}",
]
"""Where the snippet stands among generated parts: after one, in an alternative, in a repeated group."""


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    left=VALID_BODY,
    right=VALID_BODY,
    place=st.sampled_from(PLACES),
    snippet=st.sampled_from(REFUSED_SNIPPETS),
    global_flag=st.sampled_from([None, *GLOBAL_REFUSED]),
)
def test_a_construct_re_accepts_but_the_module_does_not_is_refused_by_name_wherever_it_stands(
    left, right, place, snippet, global_flag
):
    """The snippet among generated parts, or a refused global flag at the start of them."""
    text, what = snippet
    left, right = f"(?:{left})", f"(?:{right})"
    if global_flag is None:
        pattern = numbered_groups(place.format(left=left, right=right, snippet=text))
    else:
        (text, what), pattern = global_flag, numbered_groups(global_flag[0] + left + right)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        re.compile(pattern)
    with pytest.raises(PatternError, match=re.escape(f"uses {what}")):
        PatternSet([pattern])


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("[]a]", ["]", "a", "b"]),
        ("[^]a]", ["]", "a", "b"]),
        ("[a-]", ["a", "-", "b"]),
        ("[-a]", ["a", "-", "b"]),
        (r"[\b]", ["\b", "b", "\\"]),
        (r"[\d-]", ["1", "-", "a"]),
        ("a{", ["a{", "a"]),
        ("a{1,x}", ["a{1,x}", "a"]),
        ("a{,2}b", ["b", "aab", "aaab"]),
        ("a{,}b", ["b", "aaaab"]),
        ("a{}", ["a{}", "a"]),
        (r"\0a", ["\x00a", "a"]),
        (r"\08", ["\x008", "8"]),
        (r"\012", ["\n", "\x01"]),
        (r"[\12]", ["\n", "\x01"]),
        (r"\x41\u00e9\U0001F600", ["Aé😀", "A"]),
        (r"\N{EM DASH}\N{LATIN CAPITAL LETTER A}", ["—A", "—a", "-A"]),
        (r"\a\f\r\t\v\n", ["\a\f\r\t\v\n", "\a\f\r\t\f\n", "afrtvn"]),
        (r"[\a\f\r\t\v\n]+$", ["\a\f\r\t\v\n", "\x1c", "v"]),
        ("a(?#comment)*", ["", "aaa", "b"]),
        ("(?#c)(?s).", ["\n"]),
        ("(?s:.)(?-s:.)", ["\n\n", "\na", "a\n"]),
        ("(?s)(?-s:.)", ["\n", "a"]),
        ("a$", ["a", "a\n", "a\n\n", "ab"]),
        (r"a\Z", ["a", "a\n"]),
        (r"\Aa", ["a", "ba"]),
        ("^$", ["", "\n", "\n\n"]),
        (r"\d+", ["٣", "²", "1"]),
        (r"\w+$", ["é²٣_", "a b"]),
        (r"\s", ["\x1c", "\u2028", "\xa0", "a"]),
        (r"[\s\d]", ["\x1c", "٣", "a"]),
        (r"[^\W\d]", ["a", "1", "_", "-"]),
        ("(?P<first>a)|(?P<second>b)", ["a", "b", "c"]),
        ("a{000000000000002}", ["a", "aa"]),
    ],
)
def test_edge_cases_of_re_s_syntax_get_re_s_verdict(pattern, names):
    assert_re_verdicts(pattern, names)


@pytest.mark.parametrize(
    "pattern",
    ["a{99999999999}", "a{1,4294967295}", "a{" + "9" * 5000 + "}", "a{" + "9" * 5000 + ",}"],
)
def test_a_repeat_count_past_re_s_bound_is_refused_not_raised(pattern):
    with pytest.raises(PatternError, match="the repetition number is too large"):
        PatternSet([pattern])


def test_groups_nested_to_the_bound_are_matched_and_deeper_ones_refused():
    pattern = "(" * MAX_DEPTH + "a|b" + ")*" * MAX_DEPTH
    assert_re_verdicts(pattern, ["", "a", "ab", "c"])
    with pytest.raises(PatternError, match=f"nests groups more than {MAX_DEPTH} deep"):
        PatternSet(["(?:" * (MAX_DEPTH + 1) + ")" * (MAX_DEPTH + 1)])


def test_the_module_imports_no_private_module_of_re():
    """``re`` imports its own parser, so ``sys.modules`` cannot tell; the module's source can: it imports no
    ``re._parser``, ``re._constants``, ``re._compiler``, ``sre_*`` or ``_sre``, and reads no private name of ``re``."""
    tree = ast.parse(Path(patterns_module.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [
        f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module for a in n.names
    ]
    private = [m for m in imported if m.startswith(("re.", "sre_", "_sre")) or "._" in m]
    reads = [
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "re"
    ]
    assert "re" in imported and not private and set(reads) <= {"error"}, (private, reads)
