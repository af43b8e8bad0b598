"""`slurm-hetero conf diff`: what a render would change in a live configuration folder.

The rendered files are compared with the files of the same names where the Ansible role
installs them (a render writes only those: other files there are neither shown nor
touched): the Slurm side in the configuration folder (/etc/slurm), the systemd units in the
units folder (/etc/systemd/system) and the Prometheus scrape jobs, target lists and rules
in Prometheus's folder (/etc/prometheus) (`install_places`). A file the render would create
is diffed against nothing; a file whose mode would change says so the way git does (`old
mode` / `new mode`). Nothing is written. A unit or a Prometheus file not installed at all is
listed apart and is no change: the role installs each only on the hosts, and with the
options, that turn it on (the node exporter on compute nodes, the rules on the Prometheus
server, ...), so one host has some of them at most.

A rendered file is laid out anew, so `file_setting_changes` also says, setting by setting,
which value changes: slurm.conf's (`setting_changes`) and why, from the rendered file's own
comment on that setting (`# Key: ...`, e.g. AccountingStorageEnforce's added items), else
from what slurm-hetero writes itself (site/slurmlines.py); a unit's, per `[Section] Key`
(`unit_setting_changes`); a Prometheus file's, per path through its YAML, list items named
by their job_name / alert / record / name (`yaml_setting_changes`).
"""

from __future__ import annotations

import difflib
import json
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurm_hetero.conf.monitoring import HOSTS as MONITORING_HOSTS
from slurm_hetero.errors import InputError
from slurm_hetero.site.slurmlines import (
    ADDED_WHY,
    OWNED_FIELDS,
    OWNED_REASONS,
    LineError,
    include_path,
    pairs,
)

MAX_LIVE_BYTES = 64 << 20  # a job_submit.lua with a compiled model is a few MiB
# Where the Ansible role installs what is not a Slurm file (its defaults slurm_hetero_systemd_dir
# and slurm_hetero_prometheus_dir; tasks/files.yml and tasks/prometheus.yml).
UNITS_DIR = Path("/etc/systemd/system")
PROMETHEUS_DIR = Path("/etc/prometheus")


@dataclass(frozen=True)
class ConfDiff:
    """The unified diff (text), the names of the files a render would change, and the paths
    of the files of `places` that are not installed (no change: see the module's note)."""

    text: str
    changed: tuple[str, ...]
    not_installed: tuple[str, ...] = ()


def install_places(files: Iterable[str], units_dir: str | os.PathLike[str] = UNITS_DIR,
                   prometheus_dir: str | os.PathLike[str] = PROMETHEUS_DIR) -> dict[str, Path]:
    """{name: folder} of the rendered files the role installs outside the Slurm folder: the
    systemd units (every `.service`) and the Prometheus server's files.

    >>> install_places(["slurm.conf", "hetero-bridge.service", "hetero-rules.yml"], "/u", "/p")
    {'hetero-bridge.service': PosixPath('/u'), 'hetero-rules.yml': PosixPath('/p')}
    """
    out = {}
    for name in files:
        if name.endswith(".service"):
            out[name] = Path(units_dir)
        elif MONITORING_HOSTS.get(name) == "prometheus":
            out[name] = Path(prometheus_dir)
    return out


def _live(path: Path) -> tuple[str | None, int | None]:
    """(text, mode) of a live file; (None, None) when there is none."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file (a render would replace it)")
    if st.st_size > MAX_LIVE_BYTES:
        raise InputError(f"{path}: {st.st_size} bytes is more than a Slurm config file "
                         f"(at most {MAX_LIVE_BYTES >> 20} MiB)")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    return raw.decode("utf-8", errors="replace"), stat.S_IMODE(st.st_mode)


def diff_files(files: dict[str, str], against: str | os.PathLike[str],
               modes: dict[str, int] | None = None, places: Mapping[str, Path] | None = None) -> ConfDiff:
    """Unified diff of `files` ({name: text}, as render_site returns them) against the
    files in `against`, or in `places[name]` for those installed elsewhere (a missing one of
    those: not installed, no change); `modes`: the modes a render gives (default 0644)."""
    live_dir = Path(against)
    if not live_dir.is_dir():
        raise InputError(f"--against {live_dir}: not a folder (the live Slurm configuration, "
                         "e.g. /etc/slurm)")
    places = places or {}
    out: list[str] = []
    changed: list[str] = []
    missing: list[str] = []
    for name, text in files.items():
        path = places.get(name, live_dir) / name
        old, old_mode = _live(path)
        if old is None and name in places:
            missing.append(str(path))
            continue
        new_mode = (modes or {}).get(name, 0o644)
        header: list[str] = []
        if old is None:
            header.append(f"new file mode {new_mode:o}\n")
        elif old_mode != new_mode:
            header += [f"old mode {old_mode:o}\n", f"new mode {new_mode:o}\n"]
        body = list(difflib.unified_diff(
            (old or "").splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=str(path) if old is not None else "/dev/null", tofile=f"rendered/{name}"))
        if not body and not header:
            continue
        changed.append(name)
        out.append(f"diff {path} rendered/{name}\n")
        out += header
        for line in body:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return ConfDiff("".join(out), tuple(changed), tuple(missing))


# Slurm's own value of settings a live file may leave unset (as `scontrol show config` printed
# them on 22.05.8): rendering that value changes nothing, and the summary says so.
SLURM_DEFAULT_VALUES = {
    "jobrequeue": "1", "schedulertype": "sched/backfill", "jobacctgatherfrequency": "30",
    "slurmctlddebug": "info", "slurmddebug": "info", "slurmctldport": "6817", "slurmdport": "6818",
    "slurmduser": "root", "proctracktype": "proctrack/cgroup", "mpidefault": "none",
    "jobcomptype": "jobcomp/none", "returntoservice": "0",
}
# Record lines (nodes, partitions, ...) and Include: not settings of their own.
_RECORDS = frozenset({"nodename", "partitionname", "nodeset", "downnodes", "frontendname"})


def _settings(lines: list[str]) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """({lower key: (Key, value)}, {lower key: why}) of slurm.conf lines: repeated keys
    (SlurmctldHost) joined in order; `why` from `# Key: ...` comments right above a line."""
    out: dict[str, tuple[str, str]] = {}
    why: dict[str, str] = {}
    comments: list[str] = []
    for raw in lines:
        line = raw.strip()
        if line.startswith("#"):
            comments.append(line.lstrip("#").strip())
            continue
        text = line.split("#", 1)[0].strip()
        if not text or include_path(text) is not None:
            comments = []
            continue
        try:
            found = pairs(text)
        except LineError:
            comments = []
            continue
        key, value = found[0]
        low = key.lower()
        if low not in _RECORDS:
            said = [c.split(":", 1)[1].strip() for c in comments if c.lower().startswith(low + ":")]
            if said:
                why[low] = " ".join(said)
            seen = out.get(low)
            out[low] = (key, f"{seen[1]} {value}" if seen and low == "slurmctldhost" else value)
        comments = []
    return out, why


def setting_changes(rendered: str, live: str) -> list[str]:
    """`Key: old -> new (why)` for each slurm.conf setting whose value a render changes
    (`(not set)` for one only one side has), in the rendered file's order."""
    new, why = _settings(rendered.splitlines())
    old, _ = _settings(live.splitlines())
    out = []
    for low in [*new, *(k for k in old if k not in new)]:
        before, after = old.get(low), new.get(low)
        if before is not None and after is not None and before[1] == after[1]:
            continue
        key = (after or before or ("", ""))[0]
        if before is None and after is not None and SLURM_DEFAULT_VALUES.get(low) == after[1].lower():
            out.append(f"{key}: (not set) -> {after[1]} (Slurm's default: no change)")
            continue
        reason = why.get(low) or OWNED_REASONS.get(low) or ADDED_WHY.get(low) or (
            f"slurm-hetero writes it from {OWNED_FIELDS[low]}" if low in OWNED_FIELDS else "")
        out.append(f"{key}: {before[1] if before else '(not set)'} -> {after[1] if after else '(not set)'}"
                   + (f" ({reason})" if reason else ""))
    return out


# ---- systemd units and Prometheus files, setting by setting ---------------------------------

def _unit_settings(text: str) -> dict[str, tuple[str, list[str]]]:
    """{lower "[Section] Key": (as written, values)} of a systemd unit: a repeated key adds
    to the list and an empty assignment empties it (systemd.syntax(7)); continuation lines
    (a trailing backslash) are joined, comments (`#`, `;`) and blank lines skipped."""
    out: dict[str, tuple[str, list[str]]] = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#", ";")) or not (line or pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, eq, value = line.partition("=")
        if not eq:
            continue
        name = f"[{section}] {key.strip()}"
        values = out.setdefault(name.lower(), (name, []))[1]
        if value.strip():
            values.append(" ".join(value.split()))  # runs of blanks: one (a joined line's too)
        else:
            values.clear()
    return out


def _changes(new: Mapping[str, tuple[str, str]], old: Mapping[str, tuple[str, str]]) -> list[str]:
    """`Name: old -> new` for each key whose value differs, in the rendered file's order,
    then the keys only the live file has; `(not set)` for a side without the key."""
    out = []
    for low in [*new, *(k for k in old if k not in new)]:
        before, after = old.get(low), new.get(low)
        if before is not None and after is not None and before[1] == after[1]:
            continue
        name = (after or before or ("", ""))[0]
        out.append(f"{name}: {before[1] if before else '(not set)'} -> {after[1] if after else '(not set)'}")
    return out


def unit_setting_changes(rendered: str, live: str) -> list[str]:
    """`[Section] Key: old -> new` for each setting of a systemd unit a render changes
    (a repeated key's values joined with ` ; `).

    >>> for line in unit_setting_changes("[Service]\\nUser=x\\nExecStart=/bin/a --port 9410\\n",
    ...                                  "[Service]\\nExecStart=/bin/a --port 9100\\nNice=5\\n"):
    ...     print(line)
    [Service] User: (not set) -> x
    [Service] ExecStart: /bin/a --port 9100 -> /bin/a --port 9410
    [Service] Nice: 5 -> (not set)
    """
    def flat(text: str) -> dict[str, tuple[str, str]]:
        return {low: (name, " ; ".join(values)) for low, (name, values) in _unit_settings(text).items()
                if values}
    return _changes(flat(rendered), flat(live))


_ITEM_NAMES = ("job_name", "alert", "record", "name")  # what names an item of a Prometheus list


def _item_name(item: Any) -> str | None:
    if isinstance(item, dict):
        for key in _ITEM_NAMES:
            if isinstance(item.get(key), str):
                return str(item[key])
    return None


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return " ".join(value.split())  # a multi-line PromQL expression on one line
    return json.dumps(value, sort_keys=True, default=str)


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    """{path: value}: mappings by key, lists of mappings by each item's name (a second item
    of one name gets `#2`) or, unnamed, by position; other lists are one value."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{path}.{k}" if path else str(k), out)
        return
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        seen: Counter[str] = Counter()
        for i, item in enumerate(value):
            name = _item_name(item)
            if name is None:
                label = str(i)
            else:
                seen[name] += 1
                label = name if seen[name] == 1 else f"{name}#{seen[name]}"
            _flatten(item, f"{path}[{label}]", out)
        return
    out[path or "(whole file)"] = value


def _list_change(before: list[Any], after: list[Any]) -> str:
    """What a list of plain values (targets, file names) gains and loses, not both lists."""
    old, new = [_scalar(v) for v in before], [_scalar(v) for v in after]
    added = [v for v in new if v not in old]
    removed = [v for v in old if v not in new]
    words = [f"adds {', '.join(added)}"] if added else []
    words += [f"removes {', '.join(removed)}"] if removed else []
    return "; ".join(words) or "the same items in another order"


def yaml_setting_changes(rendered: str, live: str) -> list[str]:
    """`path: old -> new` for each value of a Prometheus file (scrape jobs, rules, a file_sd
    target list: YAML or JSON) a render changes, `path: adds ...; removes ...` for a list of
    plain values; InputError when one side is not YAML.

    >>> yaml_setting_changes("groups:\\n- name: g\\n  rules:\\n  - alert: A\\n    for: 5m\\n",
    ...                      "groups:\\n- name: g\\n  rules:\\n  - alert: A\\n    for: 1m\\n")
    ['groups[g].rules[A].for: 1m -> 5m']
    >>> yaml_setting_changes('[{"targets": ["a:1", "b:1"]}]', '[{"targets": ["a:1", "c:1"]}]')
    ['[0].targets: adds b:1; removes c:1']
    """
    def flat(text: str, which: str) -> dict[str, Any]:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise InputError(f"the {which} file is not YAML: {str(e).splitlines()[0]}") from None
        out: dict[str, Any] = {}
        if data is not None:
            _flatten(data, "", out)
        return out

    new, old = flat(rendered, "rendered"), flat(live, "installed")
    out = []
    for path in [*new, *(p for p in old if p not in new)]:
        missing = object()
        before, after = old.get(path, missing), new.get(path, missing)
        if before is not missing and after is not missing and _scalar(before) == _scalar(after):
            continue  # the same, or but for layout (a PromQL expression's line breaks)
        if isinstance(before, list) and isinstance(after, list):
            out.append(f"{path}: {_list_change(before, after)}")
            continue
        out.append(f"{path}: {'(not set)' if before is missing else _scalar(before)} -> "
                   f"{'(not set)' if after is missing else _scalar(after)}")
    return out


def file_setting_changes(name: str, rendered: str, live: str) -> list[str]:
    """Setting by setting, what a render changes in the installed file `name`: slurm.conf,
    a systemd unit or a Prometheus file; [] for a file read as text only (gres.conf, Lua,
    ...). InputError when the installed file cannot be read as its kind."""
    compare: Callable[[str, str], list[str]] | None = None
    if name == "slurm.conf":
        compare = setting_changes
    elif name.endswith(".service"):
        compare = unit_setting_changes
    elif MONITORING_HOSTS.get(name) == "prometheus":
        compare = yaml_setting_changes
    return compare(rendered, live) if compare else []
