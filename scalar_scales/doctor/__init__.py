"""``scalar-scales check``, the NVFP4 checkpoint doctor: the rule catalogue (:mod:`.rules`); what a config
declares of each module (:mod:`.expectations`, matched as the producer matches, :mod:`.matching` and
:mod:`.patterns`); the rules settled in each shard's job (:mod:`.shard_rules`, :mod:`.config_rules`) and once
every shard is read (:mod:`.checkpoint_rules`); and what the command prints (:mod:`.report`). docs/check.md
documents every rule, and docs/check-evidence.md what vLLM was seen to do with each."""

from scalar_scales.doctor.diagnosis import Diagnosis, diagnose
from scalar_scales.doctor.expectations import Expectations, expectations_of
from scalar_scales.doctor.matching import Kind, Matcher, module_kind
from scalar_scales.doctor.report import SHOWN_PER_RULE, CheckReport, json_number
from scalar_scales.doctor.rules import EFFECTS, RULES, SEVERITIES, Effect, Finding, Rule, Severity, selected_codes

__all__ = [
    "EFFECTS",
    "RULES",
    "SEVERITIES",
    "SHOWN_PER_RULE",
    "CheckReport",
    "Diagnosis",
    "Effect",
    "Expectations",
    "Finding",
    "Kind",
    "Matcher",
    "Rule",
    "Severity",
    "diagnose",
    "expectations_of",
    "json_number",
    "module_kind",
    "selected_codes",
]
