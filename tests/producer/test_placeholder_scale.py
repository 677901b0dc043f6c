"""compressed-tensors writes 1.0 for a global scale whose calibration gave NaN or Inf: the placeholder NV304
(``scalar_scales.doctor.sibling_rules``) finds among calibrated siblings. Shown on the installed release's own
``generate_gparam``, which every NVFP4 global scale it writes comes from."""

from __future__ import annotations

import math

import pytest
import torch
from compressed_tensors.quantization.utils.helpers import generate_gparam

from scalar_scales.doctor.sibling_rules import PLACEHOLDER
from scalar_scales.nvfp4 import SCALE_NUMERATOR


@pytest.mark.parametrize("amax", [0.0, math.nan], ids=["never-routed", "nan"])
def test_a_global_scale_whose_calibration_gave_nan_or_inf_is_written_as_1(amax):
    """amax 0 (an expert calibration never routed a token to) makes 2688 / amax overflow to Inf; NaN stays NaN."""
    observed = torch.tensor([amax])
    assert generate_gparam(-observed, observed).item() == PLACEHOLDER


def test_a_calibrated_global_scale_is_2688_over_its_amax():
    observed = torch.tensor([2.0])
    assert generate_gparam(-observed, observed).item() == pytest.approx(SCALE_NUMERATOR / 2.0)
