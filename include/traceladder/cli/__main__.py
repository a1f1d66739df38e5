"""`python -m traceladder.cli`: the console script."""

import sys

from traceladder.cli.main import main

sys.exit(main())
