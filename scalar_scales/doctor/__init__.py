"""``scalar-scales check``, the NVFP4 checkpoint doctor: the rules, each one object with its one function
(:mod:`.rules`), in one catalogue (:mod:`.catalogue`: scale rules :mod:`.scale_rules` and
:mod:`.sibling_rules`, module rules :mod:`.module_rules`, index rules :mod:`.index_rules`, config rules
:mod:`.config_rules`) over what they look at (:mod:`.view`); what a config declares of each module
(:mod:`.expectations`, matched as the producer matches, :mod:`.matching` and :mod:`.patterns`); every rule
applied (:mod:`.diagnosis`); the settings a configuration file gives (:mod:`.settings`); what the command prints
(:mod:`.report`, in each output format), and each rule's reference (:mod:`.reference`, docs/rules.md).
docs/check.md says how the rules are applied, and
docs/check-evidence.md what vLLM was seen to do with each."""

from scalar_scales.doctor.catalogue import RULES, selected_codes
from scalar_scales.doctor.diagnosis import Diagnosis, diagnose
from scalar_scales.doctor.expectations import Expectations, expectations_of
from scalar_scales.doctor.matching import Kind, Matcher, module_kind
from scalar_scales.doctor.reference import reference_document, rule_data, rule_reference
from scalar_scales.doctor.report import (
    FORMATS_TAKING,
    OUTPUT_FORMATS,
    SHOWN_PER_RULE,
    CheckReport,
    OutputFormat,
    json_number,
    render,
)
from scalar_scales.doctor.rules import (
    EFFECTS,
    SEVERITIES,
    CheckpointRule,
    Effect,
    Finding,
    Rule,
    Severity,
    ShardRule,
)
from scalar_scales.doctor.view import CheckpointView, ShardView

__all__ = [
    "EFFECTS",
    "FORMATS_TAKING",
    "OUTPUT_FORMATS",
    "RULES",
    "SEVERITIES",
    "SHOWN_PER_RULE",
    "CheckReport",
    "CheckpointRule",
    "CheckpointView",
    "Diagnosis",
    "Effect",
    "Expectations",
    "Finding",
    "Kind",
    "Matcher",
    "OutputFormat",
    "Rule",
    "Severity",
    "ShardRule",
    "ShardView",
    "diagnose",
    "expectations_of",
    "json_number",
    "module_kind",
    "reference_document",
    "render",
    "rule_data",
    "rule_reference",
    "selected_codes",
]
