#!/usr/bin/python
"""Apply the QoS tiers of a rendered qos.sacctmgr without disturbing what a site already has.

The rendered file says, one sacctmgr command a line, which QoS must exist, which settings
they carry and which accounts may use them. Run as written it would replace an account's
QoS list (`set QOS=...`) and report a change every time. This module reads accounting
first (`sacctmgr -P -n show qos`, `show assoc`) and then only

- adds the QoS that are missing,
- modifies the settings that differ (only the fields the file names),
- adds the tiers an account lacks with `qos+=` (the QoS it had stay), never `qos=`,
- sets an account's DefaultQOS only when asked (set_default) and only if it differs.

It never creates or removes accounts, never removes a QoS and never changes a QoS the
file does not name. Check mode reports what it would run; --diff shows before and after.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: slurm_hetero_qos
short_description: Create and update slurm-hetero's QoS tiers and add them to accounts, idempotently
description:
  - Reads the QoS and associations from slurmdbd with C(sacctmgr -P -n show), compares them
    with the lines of a rendered C(qos.sacctmgr) and runs only the sacctmgr commands that
    make a difference.
  - Accounts get the tiers with C(qos+=), so the QoS they had are kept.
options:
  script:
    description: Text of the rendered C(qos.sacctmgr). Lines it does not understand fail the task.
    type: str
    required: true
  accounts:
    description: Accounts that get the tiers. Empty means the accounts the script names.
    type: list
    elements: str
    default: []
  cluster:
    description: Cluster of those accounts' associations. Empty means the cluster the script names.
    type: str
    default: ""
  set_default:
    description: Also set each account's DefaultQOS to the script's DefaultQOS.
    type: bool
    default: false
  sacctmgr:
    description: The sacctmgr program.
    type: str
    default: sacctmgr
supports_check_mode: true
"""

RETURN = r"""
commands:
  description: The sacctmgr argv lists run (in check mode, the ones that would run).
  type: list
  returned: always
"""

# `set` keys of sacctmgr and the `format=` fields that show them, where the two differ.
FORMAT_FIELD = {
    "description": "Description",
    "maxtresperuser": "MaxTRESPU",
    "maxjobsperuser": "MaxJobsPU",
    "maxsubmitjobsperuser": "MaxSubmitPU",
    "maxtresperjob": "MaxTRES",
    "maxtresperaccount": "MaxTRESPA",
    "maxjobsperaccount": "MaxJobsPA",
    "maxsubmitjobsperaccount": "MaxSubmitPA",
    "maxwalldurationperjob": "MaxWall",
    "usagethreshold": "UsageThres",
    "minpriothreshold": "MinPrioThres",
}
LIST_KEYS = {"preempt", "flags"}  # comma lists compared as sets
# TRES lists (`cpu=636,gres/gpu:h100=4`): sacctmgr shows them in its own TRES order.
TRES_KEYS = {"grptres", "grptresmins", "grptresrunmins", "maxtres", "maxtresperjob", "maxtrespernode",
             "maxtresperuser", "maxtrespu", "maxtresperaccount", "maxtrespa", "mintres", "mintresperjob"}
SECONDS_KEYS = {"gracetime", "preemptexempttime"}  # plain numbers are seconds
MINUTES_KEYS = {"maxwall", "maxwalldurationperjob", "grpwall"}  # plain numbers are minutes
QOS_KEYS = {"qos", "qoslevel"}
DEFAULT_KEYS = {"defaultqos", "defqos"}


class ScriptError(Exception):
    pass


def split_assignment(token: str) -> tuple[str, str, str]:
    """`Key=V`, `Key+=V`, `Key-=V` -> (key, operator, value)."""
    if "=" not in token:
        raise ScriptError(f"expected Key=Value, got {token!r}")
    key, value = token.split("=", 1)
    op = "="
    if key.endswith(("+", "-")):
        key, op = key[:-1], key[-1] + "="
    if not key:
        raise ScriptError(f"expected Key=Value, got {token!r}")
    return key, op, value


def parse_script(text: str) -> dict:
    """The desired state of a qos.sacctmgr: {'qos': {name: {Key: value}}, 'accounts': [...],
    'cluster': str, 'default': str}."""
    qos: dict[str, dict[str, str]] = {}
    accounts: list[str] = []
    cluster = default = ""
    tiers_for_accounts: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            argv = shlex.split(line, comments=True)
        except ValueError as e:
            raise ScriptError(f"line {number}: {e}") from e
        if not argv:
            continue
        try:
            if argv[0].rsplit("/", 1)[-1] != "sacctmgr":
                raise ScriptError("not a sacctmgr command")
            words = [w for w in argv[1:] if not w.startswith("-")]
            if len(words) < 3:
                raise ScriptError("too short")
            verb, entity = words[0].lower(), words[1].lower()
            if verb in ("add", "create") and entity == "qos":
                names = [n for n in words[2].split(",") if n]
                settings = dict(_set(words[3:]))
                for name in names:
                    qos.setdefault(name, {}).update(settings)
            elif verb in ("modify", "update") and entity in ("qos", "account"):
                where, settings = _where_set(words[2:])
                if entity == "qos":
                    if set(where) != {"name"}:
                        raise ScriptError("modify qos: only `where name=NAME` is understood")
                    for name in where["name"].split(","):
                        qos.setdefault(name, {}).update(dict(_set(settings)))
                else:
                    if not set(where) <= {"name", "cluster"} or "name" not in where:
                        raise ScriptError("modify account: only `where name=A [cluster=C]` is understood")
                    accounts += [a for a in where["name"].split(",") if a and a not in accounts]
                    cluster = where.get("cluster", cluster)
                    for key, value in _set(settings):
                        if key.lower() in QOS_KEYS:
                            tiers_for_accounts += [q for q in value.split(",") if q]
                        elif key.lower() in DEFAULT_KEYS:
                            default = value
                        else:
                            raise ScriptError(f"modify account: only QOS and DefaultQOS are understood, "
                                              f"not {key}")
            else:
                raise ScriptError(f"`{verb} {entity}` is not one of: add qos, modify qos, modify account")
        except ScriptError as e:
            raise ScriptError(f"line {number}: {e}: {line.strip()}") from e
    return {"qos": qos, "accounts": accounts, "cluster": cluster, "default": default,
            "tiers": tiers_for_accounts or list(qos)}


def _where_set(words: list[str]) -> tuple[dict[str, str], list[str]]:
    lowered = [w.lower() for w in words]
    if "set" not in lowered:
        raise ScriptError("expected `where ... set ...`")
    at = lowered.index("set")
    cond = words[1:at] if lowered and lowered[0] == "where" else words[:at]
    where = {}
    for token in cond:
        key, op, value = split_assignment(token)
        if op != "=":
            raise ScriptError(f"unexpected {op} in the where clause")
        where[key.lower()] = value
    return where, words[at + 1:]


def _set(words: list[str]) -> list[tuple[str, str]]:
    out = []
    for token in words:
        key, op, value = split_assignment(token)
        if op != "=" and key.lower() not in QOS_KEYS:
            raise ScriptError(f"{key}{op}: only plain = is understood for QoS settings")
        out.append((key, value))
    return out


def seconds(value: str, plain_unit: int) -> str:
    """Slurm time text ([D-]HH:MM:SS, MM:SS, N) as a number of seconds, for comparing."""
    v = value.strip()
    if v in ("", "-1", "UNLIMITED", "INFINITE", "Partition_Limit"):
        return ""
    days = 0
    if "-" in v:
        d, v = v.split("-", 1)
        days = int(d)
    parts = [int(p) for p in v.split(":")]
    if len(parts) == 1 and days == 0:
        return str(parts[0] * plain_unit)
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return str(((days * 24 + h) * 60 + m) * 60 + s)


def normalize(key: str, value: str) -> object:
    k, v = key.lower(), value.strip()
    if v == "-1":
        v = ""
    if k in LIST_KEYS or k in TRES_KEYS:
        return frozenset(x.lower() for x in v.split(",") if x)
    try:
        if k in SECONDS_KEYS:
            return seconds(v, 1)
        if k in MINUTES_KEYS:
            return seconds(v, 60)
    except ValueError:
        return v.lower()
    try:
        return float(v)
    except ValueError:
        return v.lower()


def same(key: str, have: str, want: str) -> bool:
    a, b = normalize(key, have), normalize(key, want)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


class Sacctmgr:
    def __init__(self, module: AnsibleModule, program: str) -> None:
        self.module, self.program = module, program

    def show(self, *args: str) -> list[list[str]]:
        argv = [self.program, "-P", "-n", "show", *args]
        rc, out, err = self.module.run_command(argv)
        if rc != 0 or "Unknown field" in err or "Unknown field" in out:
            self.module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()}", argv=argv)
        return [row.split("|") for row in out.splitlines() if row.strip()]

    def run(self, argv: list[str]) -> None:
        rc, out, err = self.module.run_command([self.program, "-i", *argv])
        if rc != 0:
            self.module.fail_json(msg=f"sacctmgr -i {' '.join(argv)} failed (rc {rc}): "
                                      f"{(err or out).strip()}", argv=argv)


def read_qos(sacctmgr: Sacctmgr, keys: list[str]) -> dict[str, dict[str, str]]:
    """{qos name: {setting key as the script spells it: value as sacctmgr shows it}}."""
    fields = [FORMAT_FIELD.get(k.lower(), k) for k in keys]
    rows = sacctmgr.show("qos", "format=" + ",".join(["Name", *fields]))
    return {row[0]: {k: row[i + 1] if i + 1 < len(row) else "" for i, k in enumerate(keys)} for row in rows}


def read_accounts(module: AnsibleModule, sacctmgr: Sacctmgr, accounts: list[str],
                  cluster: str) -> dict[str, tuple[list[str], str]]:
    """{account: (its QoS list, its DefaultQOS)}, from the account's own association."""
    where_cluster = [f"cluster={cluster}"] if cluster else []
    out = {}
    for account in accounts:
        rows = sacctmgr.show("assoc", "where", f"account={account}", *where_cluster,
                             "format=Cluster,Account,User,Partition,QOS,DefaultQOS")
        rows = [r for r in rows if len(r) >= 6 and r[1] == account and r[2] == "" and r[3] == ""]
        if len(rows) != 1:
            where = f" on cluster {cluster}" if cluster else ""
            module.fail_json(msg=(f"account {account}{where}: found {len(rows)} account associations, need "
                                  "exactly one: create the account first (sacctmgr add account), name the "
                                  "cluster (slurm_hetero_qos_cluster), or choose other accounts "
                                  "(slurm_hetero_qos_accounts); this role never creates accounts"))
        out[account] = ([q for q in rows[0][4].split(",") if q], rows[0][5])
    return out


def plan(desired: dict, qos_rows: dict[str, dict[str, str]], assoc: dict[str, tuple[list[str], str]],
         accounts: list[str], cluster: str, set_default: bool) -> list[list[str]]:
    """The sacctmgr argv lists (without the program and -i) that bring accounting to `desired`."""
    commands: list[list[str]] = []
    for name, settings in desired["qos"].items():
        have = qos_rows.get(name)
        if have is None:
            commands.append(["add", "qos", name])
            changes = settings
        else:
            changes = {k: v for k, v in settings.items() if not same(k, have.get(k, ""), v)}
        if changes:
            commands.append(["modify", "qos", "where", f"name={name}", "set",
                             *(f"{k}={v}" for k, v in changes.items())])
    where_cluster = [f"cluster={cluster}"] if cluster else []
    for account in accounts:
        have_qos, have_default = assoc[account]
        missing = [q for q in desired["tiers"] if q not in have_qos]
        sets = [f"qos+={','.join(missing)}"] if missing else []
        if set_default and desired["default"] and have_default != desired["default"]:
            sets.append(f"DefaultQOS={desired['default']}")
        if sets:
            commands.append(["modify", "account", "where", f"name={account}", *where_cluster, "set", *sets])
    return commands


def describe(qos_rows: dict[str, dict[str, str]], assoc: dict[str, tuple[list[str], str]],
             desired: dict) -> str:
    lines = []
    for name in desired["qos"]:
        row = qos_rows.get(name)
        if row is None:
            lines.append(f"qos {name}: (absent)")
        else:
            lines.append(f"qos {name}: " + " ".join(f"{k}={row.get(k, '')}" for k in desired["qos"][name]))
    for account, (qos, default) in assoc.items():
        lines.append(f"account {account}: QOS={','.join(sorted(qos))} DefaultQOS={default}")
    return "\n".join(lines) + "\n"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "script": {"type": "str", "required": True},
            "accounts": {"type": "list", "elements": "str", "default": []},
            "cluster": {"type": "str", "default": ""},
            "set_default": {"type": "bool", "default": False},
            "sacctmgr": {"type": "str", "default": "sacctmgr"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        desired = parse_script(p["script"])
    except ScriptError as e:
        module.fail_json(msg=f"qos.sacctmgr {e}; the role applies only `add qos`, "
                             "`modify qos where name=...` and "
                             "`modify account where name=... set QOS=... DefaultQOS=...` lines")
    accounts = p["accounts"] or desired["accounts"]
    cluster = p["cluster"] or desired["cluster"]
    sacctmgr = Sacctmgr(module, p["sacctmgr"])

    keys: list[str] = []
    for settings in desired["qos"].values():
        keys += [k for k in settings if k not in keys]
    qos_rows = read_qos(sacctmgr, keys)
    assoc = read_accounts(module, sacctmgr, accounts, cluster)

    commands = plan(desired, qos_rows, assoc, accounts, cluster, p["set_default"])
    result = {"changed": bool(commands), "commands": [[p["sacctmgr"], "-i", *c] for c in commands]}
    before = describe(qos_rows, assoc, desired)
    if commands and not module.check_mode:
        for argv in commands:
            sacctmgr.run(argv)
        qos_rows = read_qos(sacctmgr, keys)
        assoc = read_accounts(module, sacctmgr, accounts, cluster)
        left = plan(desired, qos_rows, assoc, accounts, cluster, p["set_default"])
        if left:
            module.fail_json(msg="sacctmgr accepted the changes but accounting still differs: "
                                 + "; ".join(" ".join(c) for c in left), **result)
        after = describe(qos_rows, assoc, desired)
    else:
        after = before
        if commands:
            after += "would run:\n" + "".join(f"  {shlex.join(c)}\n" for c in result["commands"])
    if module._diff:
        result["diff"] = {"before": before, "after": after,
                          "before_header": "accounting (sacctmgr show)", "after_header": "accounting"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
