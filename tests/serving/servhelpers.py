"""What the serving tests share besides fixtures (imported as ``servhelpers``: a module
named ``conftest`` is ambiguous once several test folders are collected together)."""

from __future__ import annotations

MAX_MODEL_LEN = 128
MODEL_NAME = "tiny"
