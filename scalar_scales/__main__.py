import sys

from scalar_scales.cli import main

sys.exit(main())
