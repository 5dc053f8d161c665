"""What else the machine did while one benchmark round ran.

A round is timed as a child process; :class:`RoundLoad` reads ``/proc/stat`` (CPU
time of the whole machine), ``/proc/loadavg`` and this process's children's rusage
before and after it, and reports the CPU time the *other* processes took during the
round, in cores (``others_cores``: 0 = quiet, 1 = another process kept a whole core
busy). On a 2-core machine a round with ``others_cores`` above about 0.2 was disturbed
(the engines run 2 threads); the limit is ``Monitor(max_others)``. The three other
processes that took the most CPU during the round (``/proc/[pid]/stat`` before and
after; processes that started and ended inside the round are in ``others_cores`` but
not named) are kept in ``others_top``. Linux only; elsewhere the figures are None.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
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


def _proc_cpu() -> dict[int, tuple[str, float]]:
    """``pid -> (command name, CPU seconds so far)`` of every process but this one."""
    out: dict[int, tuple[str, float]] = {}
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return out
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        fields = text[text.rfind(")") + 2 :].split()
        try:  # utime, stime: fields 14 and 15 of the line, 12 and 13 after "pid (comm) "
            out[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)
        except (IndexError, ValueError):
            continue
    return out


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
    max_others: float = BUSY_CORES
    others_top: list[tuple[str, float]] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """Other processes took more than ``max_others`` cores during the round."""
        return self.others_cores is not None and self.others_cores > self.max_others

    def describe(self) -> str:
        """``load 1.2→1.4, others 0.05 cores`` (n/a where unknown)."""

        def f(x: Optional[float], d: int = 2) -> str:
            return "n/a" if x is None else f"{x:.{d}f}"

        flag = " BUSY" if self.busy else ""
        top = ", ".join(f"{n} {c:.2f}" for n, c in self.others_top if c >= 0.01)
        return (
            f"load {f(self.load1_start, 1)}→{f(self.load1_end, 1)}, "
            f"others {f(self.others_cores)} cores{flag}" + (f" ({top})" if top else "")
        )


class Monitor:
    """``with Monitor() as m: run_child()``; then ``m.load`` is the :class:`RoundLoad`.

    Only work done by this process and the children it *waited for* inside the block
    counts as ours: start each timed engine as a child and wait for it in the block.
    """

    def __init__(self, max_others: float = BUSY_CORES) -> None:
        self.load = RoundLoad(max_others=max_others)

    def __enter__(self) -> Monitor:
        self._t = time.perf_counter()
        self._busy = _busy_seconds()
        self._ours = _children_cpu() + _self_cpu()
        self._procs = _proc_cpu()
        self.load.load1_start = os.getloadavg()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t
        busy = _busy_seconds()
        ours = _children_cpu() + _self_cpu() - self._ours
        self.load.wall_s = wall
        self.load.load1_end = os.getloadavg()[0]
        procs = _proc_cpu()
        if wall > 0:
            used = [(n, (c - self._procs[p][1]) / wall) for p, (n, c) in procs.items()
                    if p in self._procs and self._procs[p][0] == n]  # fmt: skip
            self.load.others_top = sorted(used, key=lambda x: -x[1])[:3]
            self.load.ours_cores = ours / wall
            if busy is not None and self._busy is not None:
                self.load.others_cores = max(0.0, (busy - self._busy - ours) / wall)
