"""Engine v0's own unit tests: they run under engine v0 only (``--engines v1`` drops them)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.engines("v0")
