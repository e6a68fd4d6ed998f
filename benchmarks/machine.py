"""What every benchmark report states about the machine it ran on (shared by run.py files).

The machine is shared and noisy, so a result is only readable next to the load average at
its start and end.
"""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu unknown"


def mem_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def describe(load_start: tuple, load_end: tuple) -> str:
    """``2 cores (x86_64, AMD ...), 24 GB RAM, shared with other work (load average ...)``."""
    return (f"{os.cpu_count()} cores ({platform.machine()}, {cpu_model()}), {mem_gb():.0f} GB "
            f"RAM, shared with other work (load average {load_start[0]:.1f} at start, "
            f"{load_end[0]:.1f} at end)")
