"""`python -m esper ...`: the same command line as `esper ...`."""

import sys

from esper.scripts.train import main

sys.exit(main())
