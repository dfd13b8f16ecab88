"""Length-prefixed JSON messages over pipes, and report (de)serialisation."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import pytest

_HEADER = struct.Struct("!I")


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one message (a JSON object) to ``fd``."""
    body = json.dumps(message, default=repr).encode()
    data = _HEADER.pack(len(body)) + body
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict[str, Any] | None:
    """Read one message from ``fd``; None at end of file."""
    head = _read_exact(fd, _HEADER.size)
    if head is None:
        return None
    body = _read_exact(fd, _HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def dump_report(config: pytest.Config, report: pytest.TestReport) -> dict[str, Any]:
    """A report as plain data, through pytest's own serialisation hook."""
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    data["user_properties"] = [[str(k), _plain(v)] for k, v in report.user_properties]
    return data


def load_report(config: pytest.Config, data: dict[str, Any]) -> pytest.TestReport:
    """The report ``dump_report`` wrote, rebuilt in this process."""
    if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason): JSON made a list
        data = {**data, "longrepr": tuple(data["longrepr"])}
    report = config.hook.pytest_report_from_serializable(config=config, data=data)
    report.user_properties = [tuple(pair) for pair in data.get("user_properties", [])]
    return report


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)
