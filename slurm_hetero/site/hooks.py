"""The site's own node hooks (Prolog, Epilog) and how slurm-hetero's node agent joins them.

Slurm 22.05 takes ONE Prolog= (a second line replaces the first, with an error in the log;
a comma list is read as one path that does not exist, which fails every job's prolog and
drains the node). Its value may be a glob: slurmd then runs every match, one after the
other, in reverse alphabetical order (z-a, Z-A, 9-0); the first that fails stops the rest,
drains the node and requeues the job held (Epilog: drains the node). All of this was
checked on the dev cluster (shared/SLURM-FACTS.md).

So the agent never takes the site's place: it becomes one more file of a folder glob.

- The site has no hook: Slurm runs the agent's program itself (`Prolog=/usr/local/bin/...`).
- The site's hook is a folder glob (`/etc/slurm/prolog.d/*`, `.../prolog.d/*.sh`): slurm.conf
  keeps it as it is and the agent is linked into that folder as `zz-slurm-hetero` (plus the
  glob's prefix and suffix), a name that sorts first in Slurm's reverse order: the agent
  always runs, even when a site script fails after it (its epilog restores the devices).
- The site's hook is one program: slurm.conf names a folder of slurm-hetero's
  (`<conf_dir>/prolog.d/*`) holding two links, the agent's first and then `site-<name>` for
  the site's program, which runs as it did, with its exit status as it had.

The agent always exits 0 (energy/agent.py), so it never fails a job or drains a node itself;
the site's scripts keep exactly the effect their exit status had.

>>> joined("Prolog", None, "/usr/bin/agent", "/etc/slurm")
Hook(key='Prolog', value='/usr/bin/agent', links=())
>>> joined("Prolog", "/etc/slurm/prolog.d/*.sh", "/usr/bin/agent", "/etc/slurm").links
(('/etc/slurm/prolog.d/zz-slurm-hetero.sh', '/usr/bin/agent'),)
>>> h = joined("Epilog", "/opt/site/epilog", "/usr/bin/agent", "/etc/slurm")
>>> h.value, h.links[1]
('/etc/slurm/epilog.d/*', ('/etc/slurm/epilog.d/site-epilog', '/opt/site/epilog'))
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass

AGENT_ENTRY = "zz-slurm-hetero"  # sorts first in Slurm's reverse alphabetical order
_GLOB_CHARS = frozenset("*?[]")


@dataclass(frozen=True)
class Hook:
    """A slurm.conf hook as rendered: its value, and the links that must exist on every
    compute node for it (link path, target), in the order they run."""

    key: str
    value: str
    links: tuple[tuple[str, str], ...]


def glob_problem(value: str) -> str | None:
    """Why a site's Prolog/Epilog value cannot take the agent beside it, or None.

    >>> glob_problem("/etc/slurm/prolog.d/*"), glob_problem("/etc/slurm/prolog")
    (None, None)
    >>> glob_problem("/etc/*/prolog").split(":")[0]
    'the glob is in the folder part (/etc/*)'
    >>> glob_problem("/etc/slurm/prolog.d/[a-m]*").split(":")[0]
    '[a-m]*'
    """
    folder, name = posixpath.split(value)
    if not value.startswith("/") or not name:
        return "an absolute path to a program, or a folder glob such as /etc/slurm/prolog.d/*"
    if _GLOB_CHARS & set(folder):
        return (f"the glob is in the folder part ({folder}): slurm-hetero adds its agent as one more "
                "file of one folder: use FOLDER/* or FOLDER/PREFIX*SUFFIX")
    if _GLOB_CHARS & set(name) and (name.count("*") != 1 or _GLOB_CHARS - {"*"} & set(name)):
        return (f"{name}: one '*' and no '?' or '[' in the file name part (FOLDER/* or "
                "FOLDER/PREFIX*SUFFIX): slurm-hetero names its agent's file to match it")
    return None


def is_glob(value: str) -> bool:
    return bool(_GLOB_CHARS & set(value))


def joined(key: str, site: str | None, agent: str | None, conf_dir: str) -> Hook:
    """The rendered `key` (Prolog or Epilog): the agent's program `agent` joined to the
    site's value `site` (None: the site has none). `agent` None: the site's value as is."""
    if site == agent:  # a site file that names the agent itself: it runs once
        site = None
    if agent is None or site is None:
        value = site or agent or ""
        return Hook(key, value, ())
    if is_glob(site):
        folder, pattern = posixpath.split(site)
        prefix, _, suffix = pattern.partition("*")
        entry = f"{folder}/{prefix}{AGENT_ENTRY}{suffix}"
        assert fnmatch.fnmatchcase(posixpath.basename(entry), pattern)
        return Hook(key, site, ((entry, agent),))
    folder = f"{conf_dir}/{key.lower()}.d"
    return Hook(key, f"{folder}/*", ((f"{folder}/{AGENT_ENTRY}", agent),
                                     (f"{folder}/site-{posixpath.basename(site)}", site)))
