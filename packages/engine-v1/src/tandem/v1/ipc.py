"""Names of the private IPC directory's contents, shared by the client and the children."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

PAYLOAD = "payload-{role}.pkl"


def endpoint(ipc_dir: str, name: str) -> str:
    return f"ipc://{os.path.join(ipc_dir, name)}.sock"


def write_payload(ipc_dir: str, payload: dict[str, Any], role: str) -> None:
    """Written before the child of ``role`` starts, each child reading only its own."""
    path = Path(ipc_dir) / PAYLOAD.format(role=role)
    with open(path, "wb") as f:
        pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)


def load_payload(ipc_dir: str, role: str) -> dict[str, Any]:
    """What the client wrote into its private (0700) directory for the child of ``role``."""
    with open(Path(ipc_dir) / PAYLOAD.format(role=role), "rb") as f:
        return pickle.load(f)
