"""`scontrol show job [-d] ID`: argv, and a parser that user text cannot steer.

On 22.05 `scontrol` has no structured output, and several fields of the record are the
user's to write (JobName, Comment, WorkDir, StdOut/StdErr/StdIn, Command, ...), embedded
newlines included. A comment such as `x\\n     Nodes=npu-01 CPU_IDs=0 Mem=1 GRES=npu:8(IDX:0-7)`
adds a line that looks exactly like one of slurmctld's detail lines, and `x JobState=RUNNING`
adds a key to a line. What user text can never do is *remove* slurmctld's own text, so:

- a key is read only where it starts a token (after the line's indent or a space), and
  only if it occurs exactly once: a second occurrence means user text imitates it, and the
  record is `AmbiguousRecord` (callers fail closed: no devices, no policy, "cannot tell");
- a detail line counts only in slurmctld's exact shape (five spaces, `Nodes= CPU_IDs= Mem=
  GRES=`, nothing after), and a node must be covered by exactly one such line;
- `JobName` is the rest of the first line (it is printed last there), so it never yields
  keys.

Privileged code should prefer what slurmd hands it (the Prolog's SLURM_JOB_GPUS,
SLURM_JOB_USER, ...) and use this only for what slurmd does not give (plugin-less GRES
such as `npu`, the bridge's admin comment).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.slurm import hostlist

_DETAIL = re.compile(r"^     Nodes=(\S+) CPU_IDs=\S+ Mem=\d+ GRES=(\S*)$")
_GRES_ITEM = re.compile(r"^([A-Za-z0-9_-]+)(?::[A-Za-z0-9_.-]+)*:\d+\(IDX:([0-9,\-]+)\)$")
# Line 1 is slurmctld's: `JobId=N`, then an array task's or a heterogeneous job
# component's ids, then JobName (printed last, so user text never precedes a key).
# Groups: 1 JobId, 2 ArrayJobId, 3 ArrayTaskId, 4 HetJobId, 5 HetJobOffset, 6 JobName.
_FIRST = re.compile(r"^JobId=(\d+) (?:ArrayJobId=(\d+) ArrayTaskId=(\S+) (?:ArrayTaskThrottle=\d+ )?"
                    r"|HetJobId=(\d+) HetJobOffset=(\d+) )?JobName=(.*)$")
# Keys printed on a line of their own whose value runs to the end of the line (may hold spaces).
LINE_KEYS = frozenset({"AdminComment", "Comment", "SystemComment", "WorkDir", "Command",
                       "StdErr", "StdIn", "StdOut", "Reason"})
MAX_IDX = 4096  # indices above this are not devices of any node


class AmbiguousRecord(RuntimeFailure):
    """slurmctld's text cannot be told apart from user text imitating it."""


def show_job_argv(job_id: str | int, detail: bool = False) -> list[str]:
    """`scontrol show job [-d] ID`; ID may name a heterogeneous job's component (`L+K`)
    or an array's task (`A_T`)."""
    job = str(job_id)
    if not re.fullmatch(r"\d+([+_]\d+)?", job):
        raise ValueError(f"job id {job!r} is not a number")
    return ["scontrol", "show", "job", *(["-d"] if detail else []), job]


def array_tasks_argv(array_id: str | int) -> list[str]:
    """`squeue` lines `JOBID TASK` for every task of an array: two numeric fields
    slurmctld writes, nothing a user can."""
    return ["squeue", "-h", "-t", "all", "-j", _job(array_id), "-o", "%A %K"]


def parse_array_task(text: str, job_id: str | int) -> str | None:
    """The array task index that job `job_id` is, from `array_tasks_argv` output; None
    when it is no single running/ended task (the array's pending rest).

    >>> parse_array_task("12 0\\n9 3\\n14 2-5%2\\n", 9)
    '3'
    """
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == str(job_id) and parts[1].isdigit():
            return parts[1]
    return None


def show_one_job(out: Callable[[list[str]], str], job_id: str | int, detail: bool = False) -> str:
    """The text of job `job_id`'s own record, through `out` (a runner's `out`).

    `scontrol show job ID` prints several records where ID is a heterogeneous job's leader
    (every component) or an array's id (every task of the array), and the strict parser
    rightly reads a second record as user text imitating keys. Line 1 (slurmctld's own)
    tells which: the leader is asked again as `L+0`, an array's id as `A_T`."""
    jid = str(job_id)
    text = out(show_job_argv(jid, detail))
    first = _FIRST.match(text.split("\n", 1)[0])
    if not first:
        return text  # the parser names what is wrong
    if first.group(4) == jid:
        return out(show_job_argv(f"{jid}+0", detail))
    if first.group(2) == jid:
        task = first.group(3) if first.group(1) == jid and first.group(3).isdigit() else None
        if task is None:
            task = parse_array_task(out(array_tasks_argv(jid)), jid)
        if task is not None:
            return out(show_job_argv(f"{jid}_{task}", detail))
    return text


_UPDATE_KEY = re.compile(r"[A-Za-z]{1,32}")
_UPDATE_VALUE = re.compile(r"[A-Za-z0-9_:.,/+-]{1,256}")


def update_job_argv(job_id: str | int, **fields: str | int) -> list[str]:
    """`scontrol update JobId=N Key=Value ...` for values the project computes (limits,
    factors): each value one token of a safe alphabet, never text with spaces or `=`.

    >>> update_job_argv(7, TimeLimit=20)
    ['scontrol', 'update', 'JobId=7', 'TimeLimit=20']
    """
    argv = ["scontrol", "update", f"JobId={_job(job_id)}"]
    for key, value in fields.items():
        if not _UPDATE_KEY.fullmatch(key) or not _UPDATE_VALUE.fullmatch(str(value)):
            raise ValueError(f"scontrol update {key}={str(value)[:40]!r}: not a plain key and value")
        argv.append(f"{key}={value}")
    return argv


# A feature expression the project writes back (arch names joined to the user's own
# constraint): names, counts and Slurm's operators, nothing else.
_FEATURES = re.compile(r"[A-Za-z0-9_.,&|()\[\]*-]{1,1024}")
MAX_ADMIN_COMMENT = 65_536


def move_job_argv(job_id: str | int, tres_per_node: str, partition: str, features: str) -> list[str]:
    """`scontrol update` of a pending job's GRES, partition and features: the bridge daemon
    moving it to another pool.

    >>> move_job_argv(7, "gres:gpu:2", "gpu", "(ib)&x86_64&a100-80gb")[3:]
    ['TresPerNode=gres:gpu:2', 'Partition=gpu', 'Features=(ib)&x86_64&a100-80gb']
    """
    if not _FEATURES.fullmatch(features):
        raise ValueError(f"features {features[:40]!r}: not a plain feature expression")
    return [*update_job_argv(job_id, TresPerNode=tres_per_node, Partition=partition), f"Features={features}"]


def admin_comment_argv(job_id: str | int, text: str) -> list[str]:
    """`scontrol update JobId=N AdminComment=TEXT`: one argv entry (scontrol splits a
    word at its first `=` only), so any JSON is data; no line breaks or NULs.

    >>> admin_comment_argv(7, '{"hetero":1, "a":"b c"}')[3]
    'AdminComment={"hetero":1, "a":"b c"}'
    """
    if "\n" in text or "\0" in text or "\r" in text or len(text) > MAX_ADMIN_COMMENT:
        raise ValueError("admin comment with a line break, a NUL or over 64 KiB")
    return ["scontrol", "update", f"JobId={_job(job_id)}", f"AdminComment={text}"]


def update_jobs_argv(job_ids: list[str] | list[int], **fields: str | int) -> list[str]:
    """One `scontrol update JobId=A,B,C Key=Value` for many jobs given the same values.

    >>> update_jobs_argv([7, 8], SiteFactor=300)
    ['scontrol', 'update', 'JobId=7,8', 'SiteFactor=300']
    """
    if not job_ids:
        raise ValueError("no job ids")
    argv = update_job_argv(job_ids[0], **fields)
    argv[2] = "JobId=" + ",".join(_job(j) for j in job_ids)
    return argv


def listpids_argv(job_id: str | int, node: str) -> list[str]:
    """`scontrol listpids JOB NODE`: exit 0 while a slurmstepd of the job runs on NODE."""
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", node):
        raise ValueError(f"node name {node[:40]!r}")
    return ["scontrol", "listpids", _job(job_id), node]


def _job(job_id: str | int) -> str:
    job = str(job_id)
    if not job.isdigit():
        raise ValueError(f"job id {job!r} is not a number")
    return job


def _key_hits(text: str, key: str) -> list[str]:
    """Values of every token `KEY=` that starts a line (after its indent) or follows a space."""
    if key in LINE_KEYS:
        pat = re.compile(rf"^ *{re.escape(key)}=(.*)$", re.MULTILINE)
    else:
        pat = re.compile(rf"(?:^|(?<= )){re.escape(key)}=(\S*)", re.MULTILINE)
    return pat.findall(text)


def parse_job_record(text: str, keys: Iterable[str], optional: Iterable[str] = ()) -> dict[str, str]:
    """The values of `keys` (each required exactly once) and of `optional` (at most once)
    in one `scontrol show job` record. JobName and JobId come from the first line.

    >>> parse_job_record("JobId=7 JobName=a JobState=X\\n   JobState=RUNNING Reason=None\\n",
    ...                  ["JobId", "JobName", "JobState"])
    {'JobId': '7', 'JobName': 'a JobState=X', 'JobState': 'RUNNING'}
    """
    lines = text.split("\n", 1)
    first = _FIRST.match(lines[0])
    if not first:
        raise AmbiguousRecord("scontrol show job: the record does not start with JobId= JobName=")
    rest = lines[1] if len(lines) > 1 else ""
    out: dict[str, str] = {}
    opt = set(optional)
    for key in dict.fromkeys([*keys, *opt]):
        if key == "JobId":
            out[key] = first.group(1)
            continue
        if key == "JobName":
            out[key] = first.group(6)
            continue
        hits = _key_hits(rest, key)
        if len(hits) > 1:
            raise AmbiguousRecord(f"job {first.group(1)}: {key}= appears {len(hits)} times "
                                  "(user text imitates it)")
        if not hits:
            if key in opt:
                continue
            raise AmbiguousRecord(f"job {first.group(1)}: no {key}= in its record")
        out[key] = hits[0].rstrip()
    return out


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a or b > MAX_IDX:
            raise ValueError(part)
        out += [i for i in range(a, b + 1) if i not in out]
    return out


def parse_job_devices(text: str, node: str) -> dict[str, list[int]]:
    """Device indices per GRES name the job holds on `node`, from `scontrol show job -d`.

    Exactly one detail line must cover the node; none (a pending job, or a node not in
    the job) is {}, two or more is `AmbiguousRecord`.

    >>> parse_job_devices("JobId=1 JobName=x\\n     Nodes=n[1-2] CPU_IDs=0 Mem=1 "
    ...                   "GRES=npu:910b:2(IDX:0-1),gpu:1(IDX:3)\\n", "n2")
    {'npu': [0, 1], 'gpu': [3]}
    """
    found: list[str] = []
    for line in text.splitlines():
        m = _DETAIL.match(line)
        if not m:
            continue
        try:
            covers = hostlist.contains(m.group(1), node)
        except hostlist.HostlistError as e:
            raise AmbiguousRecord(f"detail line with a bad node list: {e}") from e
        if covers:
            found.append(m.group(2))
    if len(found) > 1:
        raise AmbiguousRecord(f"{len(found)} detail lines name node {node} (user text imitates one)")
    out: dict[str, list[int]] = {}
    if not found or found[0] in ("", "(null)"):
        return out
    for item in re.split(r",(?![^(]*\))", found[0]):
        m = _GRES_ITEM.match(item)
        if not m:
            continue  # a GRES without indices (count-only): nothing to map to devices
        try:
            idx = _indices(m.group(2))
        except ValueError as e:
            raise AmbiguousRecord(f"bad device index list {m.group(2)!r} for node {node}") from e
        out.setdefault(m.group(1), [])
        out[m.group(1)] += [i for i in idx if i not in out[m.group(1)]]
    return out


def parse_id_list(text: str) -> list[int]:
    """slurmd's SLURM_JOB_GPUS (`0,2-3` or `0,2,3`) → [0, 2, 3]; [] for empty.

    >>> parse_id_list("0,2-3")
    [0, 2, 3]
    """
    text = text.strip()
    if not text:
        return []
    try:
        return _indices(text)
    except ValueError as e:
        raise AmbiguousRecord(f"bad device list {text[:40]!r}") from e
