"""`python -m esper ...`: the same command line as `esper ...`."""

import sys

from esper.scripts.cli import main

sys.exit(main())
