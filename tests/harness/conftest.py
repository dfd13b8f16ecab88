"""Shared fixtures for the harness's own tests: every run is a pytest subprocess in a tmp dir."""

from __future__ import annotations

import pytest
from hx_support import INI


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester dir with the harness configured (engine var DEMO_ENGINE, watching ``demo``)."""
    pytester.makefile(".ini", pytest=INI.format(extra=""))
    pytester.syspathinsert()
    return pytester
