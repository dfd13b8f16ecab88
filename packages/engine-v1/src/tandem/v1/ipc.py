"""Names of the private IPC directory's contents, shared by the client and the children."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

PAYLOAD = "payload.pkl"


def endpoint(ipc_dir: str, name: str) -> str:
    return f"ipc://{os.path.join(ipc_dir, name)}.sock"


def write_payload(ipc_dir: str, payload: dict[str, Any]) -> None:
    path = Path(ipc_dir) / PAYLOAD
    with open(path, "wb") as f:
        pickle.dump(payload, f)


def load_payload(ipc_dir: str) -> dict[str, Any]:
    """What the client wrote into its private (0700) directory for the children."""
    with open(Path(ipc_dir) / PAYLOAD, "rb") as f:
        return pickle.load(f)
