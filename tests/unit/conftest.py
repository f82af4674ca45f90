"""Fixtures shared by the unit tests."""

import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parents[2] / "orchestrator" / "nodeside"


@pytest.fixture
def staging_mod(monkeypatch):
    """The node helper's staging module as the node imports it (a top-level module beside its siblings)."""
    monkeypatch.syspath_prepend(str(HELPERS))
    for name in ("staging", "files", "common"):
        sys.modules.pop(name, None)
    import staging
    return staging
