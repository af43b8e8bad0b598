"""What the rendered Slurm files say about the installation: cluster name,
controllers, accounting and release, from the site's `slurm:` section unless the Profile
overrides them; and where the site's pass-through lines go.

Precedence, for each value: a Profile field that is set (the dev cluster sets its own hosts
and ports) > the site file > the greenfield default. The release: Profile.slurm_version >
site `slurm.version` > 22.05; `conf render` fills Profile.slurm_version from the installed
Slurm when the site names none (`slurm_version_for`).

A pass-through line (`slurm.extra_lines`) whose key the template also writes replaces the
template's line in place (the site's StateSaveLocation, SelectTypeParameters, ... win), except
where the Profile sets that value itself (the dev cluster's paths and ports); for the comma
lists slurm-hetero needs items of (PrologFlags, ...) the site's items are added. The site's
AccountingStorageEnforce is the template's line itself, with only what tiers need added and a
comment saying why (`accounting_enforce`). Every other line is written as given, before the
node definitions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.conf.profile import Profile
from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site.model import Site
from slurm_hetero.site.slurmlines import (
    MERGED,
    REPEATABLE,
    check_extra_line,
    include_path,
    merge_items,
    pairs,
    unquote,
)

DEFAULT_VERSION = (22, 5)
DEFAULT_CONTROLLER = "slurmctld"
DEFAULT_DBD_HOST = "slurmdbd"
DEFAULT_DBD_PORT = 6819
# slurm.conf keys the Profile also sets: a Profile value other than its default (the dev
# cluster's) wins over the site's line; at the default, the site's line wins.
PROFILE_KEYS = {
    "slurmctldport": "ctld_port", "slurmdport": "slurmd_port", "slurmuser": "slurm_user",
    "statesavelocation": "state_dir", "slurmdspooldir": "spool_dir",
    "slurmctldpidfile": "run_dir", "slurmdpidfile": "run_dir",
    "slurmctldlogfile": "log_dir", "slurmdlogfile": "log_dir",
    "authinfo": "auth_info", "accountingstoragepass": "auth_info", "mailprog": "mail_prog",
    "proctracktype": "proctrack", "taskplugin": "task_plugins",
}
# Keys whose site value `_context` already folds into the template's line (with what
# slurm-hetero must add, and why): the site's line itself is not placed again.
RESOLVED = frozenset({"accountingstorageenforce"})
# What the template writes for AccountingStorageEnforce where the site says nothing (a new
# cluster): a tier is a QoS its association was given (qos), and tiers' caps apply (limits).
ENFORCE_DEFAULT = ("associations", "limits", "qos")
# The template writes the key; a site line setting one of the others (Slurm takes only one)
# removes the template's line.
EXCLUSIVE = {"defmempercpu": ("defmempernode", "defmempergpu")}
_GLOBAL = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$")
_RECORD_KEYS = ("nodename", "partitionname")


@dataclass(frozen=True)
class SlurmView:
    """The installation as rendered: ClusterName, SlurmctldHost lines (primary first),
    AccountingStorageHost/Port, and the release the formats follow."""

    cluster_name: str
    controllers: tuple[str, ...]
    accounting_host: str
    accounting_port: int
    version: tuple[int, int]

    @property
    def primary_host(self) -> str:
        """The primary controller's host name (without its address)."""
        return self.controllers[0].split("(", 1)[0]

    @property
    def gres_prefix(self) -> str:
        """job_desc.tres_per_node spells GRES `gres:gpu:1` before 23.02, `gres/gpu:1` since."""
        return "gres:" if self.version < (23, 2) else "gres/"


def slurm_view(site: Site, profile: Profile) -> SlurmView:
    s = site.slurm
    ctld: tuple[str, ...]
    if profile.ctld_host:
        ctld = (f"{profile.ctld_host}({profile.ctld_addr})" if profile.ctld_addr else profile.ctld_host,)
    else:
        ctld = tuple(str(c) for c in s.controllers) or (DEFAULT_CONTROLLER,)
    return SlurmView(
        cluster_name=profile.cluster_name or site.cluster_name,
        controllers=ctld,
        accounting_host=profile.dbd_host or s.accounting_host or DEFAULT_DBD_HOST,
        accounting_port=profile.dbd_port or s.accounting_port or DEFAULT_DBD_PORT,
        version=profile.slurm_version or s.version or DEFAULT_VERSION,
    )


def version_text(version: tuple[int, int]) -> str:
    """(24, 11) → '24.11'; (23, 2) → '23.02'."""
    return f"{version[0]}.{version[1]:02d}"


def slurm_version_for(site: Site, detected: tuple[int, int] | None) -> tuple[tuple[int, int], str]:
    """The release `conf render` renders for, and why: the site's `slurm.version`, else the
    installed Slurm's (`detected`; None when none answered), else 22.05. Pure."""
    if site.slurm.version:
        return site.slurm.version, "the site's slurm.version"
    if detected:
        return detected, "the installed Slurm"
    return DEFAULT_VERSION, "default (no slurm.version in the site, no Slurm installed here)"


def detect_slurm_version(version: Callable[[], tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """The installed Slurm's release (`slurmctld -V`, else `sinfo --version`), None if neither
    answers. `version`: the probe (default: the project's Slurm runner)."""
    if version is None:
        from slurm_hetero.slurm.runner import Runner

        version = Runner().version
    try:
        return version()
    except (RuntimeFailure, ValueError, OSError):
        return None


def accounting_enforce(site: Site) -> tuple[str | None, list[tuple[str, str]]]:
    """(AccountingStorageEnforce as rendered, None for no line; [(item added, why)]).

    The site's own items (slurm.accounting.enforce, or an extra_lines AccountingStorageEnforce)
    are kept as they are; slurm-hetero adds only what its tiers cannot work without: limits,
    where a tier caps accelerators with GrpTRES (Slurm applies QoS limits only with limits,
    safe or all). A site that says nothing gets ENFORCE_DEFAULT."""
    items: list[str] | None = list(site.slurm.accounting_enforce) \
        if site.slurm.accounting_enforce is not None else None
    for line in site.slurm.extra_lines:
        key, problem = check_extra_line(line)
        if key == "accountingstorageenforce" and not problem:
            items = [i for i in unquote(line.split("=", 1)[1]).split(",") if i]
    if items is None:
        return ",".join(ENFORCE_DEFAULT), []
    added: list[tuple[str, str]] = []
    capped = [q.name for q in site.qos if q.grp_tres]
    if capped and not {"limits", "safe", "all"} & {i.lower() for i in items}:
        many = len(capped) > 1
        added.append(("limits", f"tier{'s' if many else ''} {', '.join(capped)} cap{'' if many else 's'} "
                      "accelerators (QoS GrpTRES), which Slurm applies only with limits"))
    value = ",".join(items + [item for item, _ in added])
    return value or None, added


def effective_profile(site: Site, profile: Profile) -> Profile:
    """The profile with the site's StateSaveLocation as its state folder (the bridge's
    snapshot lives there) unless the profile sets its own."""
    for line in site.slurm.extra_lines:
        key, problem = check_extra_line(line)
        if key == "statesavelocation" and not problem and not _profile_sets(profile, "state_dir"):
            return replace(profile, state_dir=unquote(line.split("=", 1)[1]))
    return profile


def _profile_sets(profile: Profile, name: str) -> bool:
    default = next(f.default for f in fields(Profile) if f.name == name)
    return bool(getattr(profile, name) != default)


def _key(line: str) -> str:
    return "include" if include_path(line) is not None else line.split("=", 1)[0].lower()


def place_site_lines(render: Callable[[list[str]], str], site: Site, profile: Profile) -> str:
    """slurm.conf with the site's extra_lines in place: `render(lines)` renders the template
    with `lines` written before the node definitions."""
    extra = site.slurm.extra_lines
    if not extra:
        return render([])
    written = {m.group(1).lower() for ln in render([]).splitlines() if (m := _GLOBAL.match(ln))}
    replacing: dict[str, str] = {}
    rest: list[str] = []
    keys = {_key(line) for line in extra}
    dropped = {k for k, others in EXCLUSIVE.items() if k not in keys and keys & set(others)}
    for line in extra:
        key = _key(line)
        if key in RESOLVED:
            continue
        if key in written and key not in REPEATABLE and key not in _RECORD_KEYS:
            replacing[key] = line
        else:
            rest.append(line)
    out: list[str] = []
    for line in render(rest).splitlines(keepends=True):
        m = _GLOBAL.match(line.rstrip("\n"))
        key = m.group(1).lower() if m else ""
        if m and key in dropped:
            continue
        if m and key in replacing:
            site_value = pairs(replacing.pop(key))[0][1]
            if key in MERGED:
                line = f"{m.group(1)}={merge_items(m.group(2), site_value)}\n"
            elif not (key in PROFILE_KEYS and _profile_sets(profile, PROFILE_KEYS[key])):
                line = f"{m.group(1)}={site_value}\n"
        out.append(line)
    return "".join(out)


def gres_names_kept(site: Site) -> set[str]:
    """GRES names of kept NodeName lines and kept gres.conf lines (for GresTypes)."""
    names: set[str] = set()
    for line in site.slurm.keep_nodes:
        for key, value in pairs(line):
            if key.lower() == "gres":
                names |= {item.split(":", 1)[0] for item in unquote(value).split(",") if item}
    for line in site.slurm.gres_lines:
        names |= {unquote(v) for k, v in pairs(line) if k.lower() == "name"}
    return names


def gres_coverage(site: Site) -> dict[str, NodeSet | None]:
    """GRES name → the nodes whose gres.conf lines the site's gres_lines give (None: all)."""
    out: dict[str, NodeSet | None] = {}
    for line in site.slurm.gres_lines:
        found = {k.lower(): unquote(v) for k, v in pairs(line)}
        if "name" not in found:
            continue
        name = found["name"]
        if "nodename" not in found or out.get(name, NodeSet()) is None:
            out[name] = None
        else:
            covered = out.setdefault(name, NodeSet())
            assert covered is not None
            covered.update(NodeSet(found["nodename"]))
    return out


def with_kept_gres_lines(gres_conf: str, lines: tuple[str, ...]) -> str:
    """The rendered gres.conf with the site's lines before the generated ones (a global
    `AutoDetect=` line first, as Slurm reads it)."""
    head, _, generated = gres_conf.partition("\nNodeName=")
    out = head.rstrip("\n") + "\n# Kept from the site's gres.conf (slurm.gres_lines), as written.\n"
    out += "".join(line + "\n" for line in lines)
    return out + ("# Generated from the node groups.\nNodeName=" + generated if generated else "")
