"""Merging the agent's figures into a job's admin comment without losing the bridge's JSON.

After a job ends, only `sacctmgr modify job ... set AdminComment=` can change the comment,
and sacctmgr stores every double quote as a backquote. Our JSON never holds a backquote of
its own (values are names, numbers and ids), so readers turn them back: `parse_comment`.

>>> merge_comment('{"hetero":1,"energy":"efficiency"}', {"node_energy": {"n1": {"energy_j": 5}}})
'{"hetero":1,"energy":"efficiency","node_energy":{"n1":{"energy_j":5}}}'
>>> merge_comment("set by an admin", {"x": 1})
'{"text":"set by an admin","x":1}'
"""

from __future__ import annotations

import json
from typing import Any

# Slurm keeps comments of any length; ours are well under 4 KB. Longer text is not ours.
MAX_COMMENT = 64 * 1024


def parse_comment(text: str) -> dict[str, Any]:
    """The JSON object in an admin comment ({} if none), whether sacctmgr rewrote it or not.

    >>> parse_comment('{`hetero`:1,`model`:`h100`}')
    {'hetero': 1, 'model': 'h100'}
    """
    text = text.strip()
    if not text.startswith("{") or len(text) > MAX_COMMENT:
        return {}
    try:
        parsed = json.loads(text.replace("`", '"'))
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return {}
    return parsed if isinstance(parsed, dict) else {}


def merge_comment(current: str, add: dict[str, Any]) -> str:
    """Deep-merge `add` into the JSON object in `current` (kept as "text" if not JSON).

    >>> merge_comment("{}", {"a": 1}), merge_comment("", {"a": 1}), merge_comment("JS1:x", {"a": 1})
    ('{"a":1}', '{"a":1}', '{"text":"JS1:x","a":1}')
    """
    base = parse_comment(current)
    if not base and current.strip() and current.strip().replace("`", '"') != "{}":
        base = {"text": current}
    return json.dumps(_merge(base, add), separators=(",", ":"))


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def db_comment_argv(job_id: str) -> list[str]:
    """sacct's record of a job's admin comment (after the job ended)."""
    if not job_id.isdigit():
        raise ValueError(f"job id {job_id!r} is not a number")
    return ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "AdminComment"]


def set_db_comment_argv(job_id: str, comment: str) -> list[str]:
    """`sacctmgr modify job` of the admin comment: the only way once the job has ended.
    The comment is our own JSON (one argv element; sacctmgr stores `"` as a backquote)."""
    if not job_id.isdigit():
        raise ValueError(f"job id {job_id!r} is not a number")
    if "\n" in comment or len(comment) > MAX_COMMENT:
        raise ValueError("an admin comment is one line under 64 KiB")
    return ["sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}", "set", f"AdminComment={comment}"]


def db_comments_argv(job_ids: list[str]) -> list[str]:
    """One sacct for the admin comments of many ended jobs (allocation lines only)."""
    bad = [j for j in job_ids if not j.isdigit()]
    if bad or not job_ids:
        raise ValueError(f"job ids must be numbers: {bad[:1] or 'none given'}")
    return ["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,AdminComment"]


def parse_db_comments(text: str) -> dict[str, str]:
    r"""{job id: admin comment} from `db_comments_argv` output; the id comes first and has no
    `|`, so a comment holding one stays whole. Lines of another shape are skipped.

    >>> parse_db_comments("12|{`a`:1}\n13|\n14_2|x\nnoise\n15|a|b\n")
    {'12': '{`a`:1}', '13': '', '15': 'a|b'}
    """
    out = {}
    for line in text.splitlines():
        job, sep, comment = line.partition("|")
        if sep and job.isdigit():
            out[job] = comment
    return out


def sits_on_a_line(comment: str) -> bool:
    """Can sacctmgr's command-line parser read this value from a line of its stdin as one
    word? Our JSON (no spaces outside strings) can, unless a string holds a quote of its own
    (escaped: a backslash) or a line break; those go one argv each."""
    return not any(c in comment for c in "\\'\n\r") and len(comment) <= MAX_COMMENT


def batch_comment_input(updates: list[tuple[str, str]]) -> tuple[list[str], str]:
    r"""(argv, stdin) of one `sacctmgr -i` session writing many jobs' admin comments.

    >>> argv, text = batch_comment_input([("7", '{"a":"x y"}'), ("8", "{}")])
    >>> argv, text.splitlines()[1]
    (['sacctmgr', '-i'], 'modify job where jobid=8 set AdminComment={}')
    >>> text.splitlines()[0]
    'modify job where jobid=7 set AdminComment={"a":"x y"}'
    """
    lines = []
    for job, comment in updates:
        if not job.isdigit() or not sits_on_a_line(comment):
            raise ValueError(f"job {job!r}: not a comment for a sacctmgr line")
        lines.append(f"modify job where jobid={job} set AdminComment={comment}\n")
    return ["sacctmgr", "-i"], "".join(lines)
