"""What the jobs of unprivileged users need from the dev cluster's machine: a local user to
run as, paths they can reach, and an interpreter they can run.

Everything a job's user executes or reads (slurm.conf and friends, the munge socket, the
TaskProlog and the container wrapper with their Python, runc's state folder) must lie
below folders that other users may search; nothing of it may be writable by them.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

from slurm_hetero.errors import RuntimeFailure

# The node side that runs as the job's user (TaskProlog, container wrapper) needs only the
# standard library (`python3 -I -S`): the distribution's interpreter, as on a real node.
# A virtual environment's may link to one users cannot run (pyenv under a 0700 /root).
NODE_PYTHON = "/usr/bin/python3"


def node_python() -> str:
    """NODE_PYTHON where it is installed, else this process's interpreter."""
    return NODE_PYTHON if os.access(NODE_PYTHON, os.X_OK) else sys.executable


def unreachable_part(path: str | os.PathLike[str]) -> Path | None:
    """The first folder on the way to `path` (itself included when a folder) that other
    users cannot search, or None when they can reach it. Symbolic links are followed, as
    exec and open follow them.

    >>> unreachable_part("/") is None
    True
    """
    p = Path(path).resolve()
    for d in [*reversed(p.parents), p]:
        try:
            st = d.stat()
        except OSError:
            return d
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return d
    return None


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The local user `name`, made if missing as a system user with no home and no login
    shell (as `replay --users local` makes its users). Root only."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        "--gid", "nogroup", name], capture_output=True, text=True, check=False)
    try:  # a second session may have made it meanwhile: then useradd failed, and that is fine
        return pwd.getpwnam(name)
    except KeyError:
        raise RuntimeFailure(f"useradd {name} failed: {r.stderr.strip()[-200:] or r.returncode}; "
                             "a user for unprivileged jobs needs root") from None
