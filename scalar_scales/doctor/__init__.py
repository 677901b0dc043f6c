"""``scalar-scales check``, the NVFP4 checkpoint doctor: the rule catalogue (:mod:`.rules`), what a config's
scheme requires (:mod:`.scheme`), the rules settled in each shard's job (:mod:`.shard_rules`) and once every
shard is read (:mod:`.checkpoint_rules`), and what the command prints (:mod:`.report`). docs/check.md
documents every rule."""

from scalar_scales.doctor.diagnosis import Diagnosis, diagnose
from scalar_scales.doctor.report import SHOWN_PER_RULE, CheckReport, json_number
from scalar_scales.doctor.rules import RULES, Finding, Rule, Severity, selected_codes
from scalar_scales.doctor.scheme import Scheme, scheme_of

__all__ = [
    "RULES",
    "SHOWN_PER_RULE",
    "CheckReport",
    "Diagnosis",
    "Finding",
    "Rule",
    "Scheme",
    "Severity",
    "diagnose",
    "json_number",
    "scheme_of",
    "selected_codes",
]
