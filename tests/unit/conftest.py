"""Fixtures shared by the unit tests."""

import pytest


@pytest.fixture
def staging_mod():
    """The node helper's staging module as the node imports it (orchestrator.nodeside.staging)."""
    from orchestrator.nodeside import staging
    return staging
