"""What else the machine did while one benchmark round ran.

A round is timed as a child process; :class:`RoundLoad` reads ``/proc/stat`` (CPU
time of the whole machine), ``/proc/loadavg`` and this process's children's rusage
before and after it, and reports the CPU time the *other* processes took during the
round, in cores (``others_cores``: 0 = quiet, 1 = another process kept a whole core
busy). On a 2-core machine a round with ``others_cores`` above about 0.2 was disturbed
(the engines run 2 threads). Linux only; elsewhere the figures are None.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Optional

#: rounds whose other processes took more than this many cores are "busy"
BUSY_CORES = 0.2


def _busy_seconds() -> Optional[float]:
    """CPU seconds all CPUs spent not idle since boot (``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal guest guest_nice
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = sum(fields[:8]) - idle  # guest time is already in user
    return busy / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class RoundLoad:
    """Machine load during one round (see the module docstring)."""

    wall_s: float = 0.0
    load1_start: Optional[float] = None
    load1_end: Optional[float] = None
    ours_cores: Optional[float] = None
    others_cores: Optional[float] = None

    @property
    def busy(self) -> bool:
        """Other processes took more than :data:`BUSY_CORES` during the round."""
        return self.others_cores is not None and self.others_cores > BUSY_CORES

    def describe(self) -> str:
        """``load 1.2→1.4, others 0.05 cores`` (n/a where unknown)."""

        def f(x: Optional[float], d: int = 2) -> str:
            return "n/a" if x is None else f"{x:.{d}f}"

        flag = " BUSY" if self.busy else ""
        return (
            f"load {f(self.load1_start, 1)}→{f(self.load1_end, 1)}, "
            f"others {f(self.others_cores)} cores{flag}"
        )


class Monitor:
    """``with Monitor() as m: run_child()``; then ``m.load`` is the :class:`RoundLoad`.

    Only work done by this process and the children it *waited for* inside the block
    counts as ours: start each timed engine as a child and wait for it in the block.
    """

    def __init__(self) -> None:
        self.load = RoundLoad()

    def __enter__(self) -> Monitor:
        self._t = time.perf_counter()
        self._busy = _busy_seconds()
        self._ours = _children_cpu() + _self_cpu()
        self.load.load1_start = os.getloadavg()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t
        busy = _busy_seconds()
        ours = _children_cpu() + _self_cpu() - self._ours
        self.load.wall_s = wall
        self.load.load1_end = os.getloadavg()[0]
        if wall > 0:
            self.load.ours_cores = ours / wall
            if busy is not None and self._busy is not None:
                self.load.others_cores = max(0.0, (busy - self._busy - ours) / wall)
