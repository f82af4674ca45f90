"""`python -m orchestrator` == `tune-remote`."""

from .cli import console_main

console_main()
