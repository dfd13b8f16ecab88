"""The memory a KV cache may still take on this machine, measured once the weights are in.

On the CPU: the kernel's ``MemAvailable`` (free memory plus the page cache it can
reclaim), lowered to the headroom of this process's cgroup where one sets a limit, less
the file pages this process maps (its memory-mapped weights and libraries count as
available to the kernel, but evicting them would slow every step). On CUDA: the
device's free memory as the driver reports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CGROUP = Path("/sys/fs/cgroup")
NO_LIMIT = 1 << 60  # cgroup v1 writes ~2**63 for "no limit"


def available_memory(device: torch.device) -> int:
    """Bytes a new allocation on ``device`` may take without evicting what is in use."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    host = host_available()
    cgroup = cgroup_headroom()
    if cgroup is not None:
        host = min(host, cgroup)
    return max(host - mapped_file_bytes(), 0)


def host_available() -> int:
    """``MemAvailable`` from /proc/meminfo (psutil's reading elsewhere, else free pages)."""
    fields = _read_kib_table(Path("/proc/meminfo"))
    if "MemAvailable" in fields:
        return fields["MemAvailable"]
    try:
        import psutil
    except ImportError:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(psutil.virtual_memory().available)


def cgroup_headroom(root: Path = CGROUP) -> int | None:
    """Bytes this process's memory cgroup lets it grow by (its limit less its usage, the
    page cache it may drop counted free), or None without a limit. Reads cgroup v2
    (``memory.max``) or v1 (``memory/memory.limit_in_bytes``) as mounted for this process."""
    for limit_file, usage_file, stat_file, inactive in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        (
            "memory/memory.limit_in_bytes",
            "memory/memory.usage_in_bytes",
            "memory/memory.stat",
            "total_inactive_file",
        ),
    ):
        limit = _read_int(root / limit_file)
        usage = _read_int(root / usage_file)
        if limit is None or usage is None:
            continue
        if limit >= NO_LIMIT:
            return None
        stat = _read_table(root / stat_file)
        return max(limit - usage + stat.get(inactive, 0), 0)
    return None


def mapped_file_bytes() -> int:
    """The file pages this process has resident (``RssFile``), 0 where unknown."""
    return _read_kib_table(Path("/proc/self/status")).get("RssFile", 0)


def _read_int(path: Path) -> int | None:
    try:
        raw = path.read_text().strip()
    except OSError:
        return None
    if raw == "max":
        return NO_LIMIT
    try:
        return int(raw)
    except ValueError:
        return None


def _lines(path: Path) -> list[str]:
    """The file's lines; none where it cannot be read (no such cgroup file, not Linux)."""
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _read_table(path: Path) -> dict[str, int]:
    """``name value`` lines (cgroup ``memory.stat``)."""
    out: dict[str, int] = {}
    for line in _lines(path):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _read_kib_table(path: Path) -> dict[str, int]:
    """``Name:   123 kB`` lines (/proc/meminfo, /proc/self/status), in bytes."""
    out: dict[str, int] = {}
    for line in _lines(path):
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out
