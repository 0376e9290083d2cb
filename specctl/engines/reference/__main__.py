"""`python -m specctl.engines.reference <sglang launch flags>`: start the reference engine."""

import sys

from specctl.engines.reference.server import main

sys.exit(main())
