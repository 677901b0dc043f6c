"""`scalar-scales-demo`, run through the installed console script as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_shows_0d_scales_and_format_version_2_beside_legacy(tmp_path):
    script = Path(sys.executable).parent / "scalar-scales-demo"
    result = subprocess.run(
        [str(script), "--scheme", "NVFP4A16", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(line.split()[:2] == ["config.json", "format_version"] and line.split()[-1] == "2" for line in lines)
    assert any("global-scale shapes (56 tensors)" in line and "[1] x56" in line and "[] x56" in line for line in lines)
    assert "global-scale values bit-identical: yes" in lines
    assert "other 125 tensors byte-identical: yes" in lines
