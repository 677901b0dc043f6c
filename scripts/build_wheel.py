"""Build the project's wheel once, for every test that installs or inspects it.

    python scripts/build_wheel.py OUT

Writes OUT/scalar_scales-<version>-py3-none-any.whl (and removes any other scalar_scales wheel there), built with
this interpreter's pip and setuptools (``pip wheel --no-deps --no-build-isolation``) from a copy of the project's
files as git would take them, committed or not (``scalar_scales_testkit.publishing.build_wheel``). The test
command gives OUT to the tests as ``$SCALAR_SCALES_WHEEL``: tests/base/test_wheel.py inspects and installs it, and
tests/publishing/test_action.py installs it through the Action's ``package`` input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scalar_scales_testkit.publishing import build_wheel

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write the wheel into")
    print(build_wheel(parser.parse_args().out))
