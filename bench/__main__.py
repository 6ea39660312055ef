"""`python -m bench`: run every local benchmark, print one table, write JSON (see bench.runner)."""

import sys

from bench.runner import main

sys.exit(main())
