"""`python -m specctl`."""

import sys

from specctl.cli.app import main

sys.exit(main())
