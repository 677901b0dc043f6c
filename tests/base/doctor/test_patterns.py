"""``re:`` patterns from a config, matched in linear time with ``re.match``'s verdicts, or refused by name."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalar_scales.doctor.patterns import PatternError, PatternSet

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


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"(a)\1", "a back-reference"),
        (r"a(?=b)", "a look-ahead or look-behind"),
        (r"(?<!a)b", "a negative look-ahead or look-behind"),
        (r"(?>a+)b", "an atomic group"),
        (r"a++b", "a possessive repeat"),
        (r"\bmtp\b", "a word boundary (\\b or \\B)"),
        (r"(?i)mtp", "inline flags"),
        (r"(?i:mtp)", "inline flags"),
        (r"(a)?(?(1)b|c)", "a conditional group"),
        (r"a$b", "characters after $ or \\Z"),
    ],
)
def test_a_pattern_no_finite_automaton_matches_is_refused_naming_what_it_uses(pattern, what):
    with pytest.raises(PatternError, match=re.escape(what)):
        PatternSet([pattern])


def test_an_invalid_regular_expression_is_refused_with_re_s_reason():
    with pytest.raises(PatternError, match=r"'\(a' is not a regular expression \(missing \), unterminated subpattern"):
        PatternSet(["(a"])


def test_a_pattern_too_large_for_an_automaton_is_refused():
    with pytest.raises(PatternError, match="repeats a part 100000 times"):
        PatternSet(["a{100000}"])


def test_a_pattern_set_travels_between_processes_as_its_patterns():
    import pickle

    patterns = pickle.loads(pickle.dumps(PatternSet(PATTERNS)))
    assert patterns.patterns == PATTERNS and patterns.matching("lm_head") == {
        i for i, p in enumerate(PATTERNS) if re.match(p, "lm_head")
    }
