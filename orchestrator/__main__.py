"""`python -m orchestrator` == `tune-remote`."""

import sys

from .cli import main

sys.exit(main())
