"""`python -m ci`."""

from __future__ import annotations

import sys

from ci.cli import main

sys.exit(main())
