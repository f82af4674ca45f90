"""Text clean-up shared by the helper modules (and, later, the laptop): ANSI escapes."""

import re

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text):
    return ANSI_RE.sub("", text)
