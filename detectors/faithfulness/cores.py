"""The CPU cores the sidecar may use: its CPU affinity, capped by its cgroup's CPU quota.

Torch's default is every core of the machine, which in a container with a CPU
limit means more threads than the quota allows: they are throttled in turn and
the model gets slower than with fewer threads. The quota is read from cgroup
v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), on the
process's own cgroup and every parent up to the mount (the tightest wins).
Inside a container the path in ``/proc/self/cgroup`` is often not visible;
the mount's root is then the container's own cgroup.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def allowed_cores(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """Cores in the CPU affinity, capped by the cgroup quota rounded down (at least 1):
    a thread more than the quota would only be throttled."""
    affinity = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is None:
        return affinity
    return max(1, min(affinity, math.floor(quota)))


def cgroup_cpu_quota(
    cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> float | None:
    """The tightest CPU quota in cores on this process's cgroups; None when there is none."""
    try:
        lines = proc_cgroup.read_text("utf-8").splitlines()
    except OSError:
        return None
    quotas: list[float | None] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2: "0::/path"
            quotas += [_v2_quota(d) for d in _cgroup_dirs(cgroup_root, path)]
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            for mount in (cgroup_root / controllers, cgroup_root / "cpu"):
                if mount.is_dir():
                    quotas += [_v1_quota(d) for d in _cgroup_dirs(mount, path)]
                    break
    return min((q for q in quotas if q is not None), default=None)


def _cgroup_dirs(mount: Path, path: str) -> list[Path]:
    """The cgroup's directory under ``mount`` and its parents up to the mount; the mount
    alone when the path is not visible (a container's namespaced view)."""
    directory = mount / path.strip("/")
    if not directory.is_dir():
        return [mount]
    directories = [directory]
    while directory not in (mount, directory.parent):
        directory = directory.parent
        directories.append(directory)
    return directories


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text("utf-8").split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text("utf-8"))
        period = int((directory / "cpu.cfs_period_us").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
