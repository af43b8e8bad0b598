"""Our record inside a job's admin comment, beside whatever else the site keeps there.

The bridge's decision and the agent's figures are one JSON object that starts with
`{"hetero":` (its own key). It shares the field with other tools (Princeton's jobstats
writes `JS1:<base64>` at job end; admins write notes): what is not ours is kept byte for
byte, ours goes after it with one space, and a writer replaces only our object. The last
such object that parses is ours; a later one cannot come from a user (AdminComment is
admin-only) and ours is always written last.

After a job ends, only `sacctmgr modify job ... set AdminComment=` can change the comment,
and Slurm 22.05's sacctmgr stores every double quote as a backquote and lower-cases the
whole value (seen here: `{"a":"/tmp/AbC"}` came back as `{`a`:`/tmp/abc`}`, quoted or not).
So what goes through sacctmgr is written lower-case-proof: our JSON with every upper-case
letter and every backquote as a JSON `\\u00xx` escape (lower-case hex), which JSON readers decode
to the same text; readers turn backquotes back into quotes (`parse_comment`). A foreign
part holding a double quote or an upper-case letter (jobstats' base64) would come back
changed, so `merge_comment` refuses to write it (`ForeignTextChanged`) rather than alter
someone else's text.

Earlier releases owned the whole field: `{...}` without "hetero" (the agent's figures
alone) or `{"text": FOREIGN, ...}` (foreign text wrapped). Both are still read, and the
next write puts FOREIGN back in front, as it was.

>>> merge_comment('{"hetero":1,"energy":"efficiency"}', {"node_energy": {"n1": {"energy_j": 5}}})
'{"hetero":1,"energy":"efficiency","node_energy":{"n1":{"energy_j":5}}}'
>>> merge_comment("JS1:H4sIAAAA", {"x": 1})
'JS1:H4sIAAAA {"hetero":0,"x":1}'
"""

from __future__ import annotations

import json
import re
from typing import Any

# Slurm keeps comments of any length; ours are well under 4 KB. Longer text is not ours.
MAX_COMMENT = 64 * 1024
_MARK = '{"hetero":'  # after backquotes are turned back into quotes
# Keys only our records ever had at the top level (the whole-field layouts of earlier releases).
_LEGACY_KEYS = frozenset({"hetero", "node_energy"})
_DECODER = json.JSONDecoder()
_PROOF = re.compile(r"[A-Z`]")
_UESCAPE = re.compile(r"\\u[0-9a-f]{4}")


class ForeignTextChanged(ValueError):
    """Writing through sacctmgr would change another tool's text (it holds a double quote or
    an upper-case letter)."""


def sacctmgr_proof(body: str) -> str:
    r"""JSON text that sacctmgr's lower-casing and quote swap leave meaning the same: every
    A-Z and backquote (only ever inside strings in json.dumps' output) as a \u escape.

    >>> sacctmgr_proof('{"checkpoint":"/ckpt/RunA`1"}')
    '{"checkpoint":"/ckpt/\\u0052un\\u0041\\u00601"}'
    >>> json.loads(sacctmgr_proof('{"p":"/X/y"}').lower())
    {'p': '/X/y'}
    """
    return _PROOF.sub(lambda m: f"\\u{ord(m.group()):04x}", body)


def split_comment(text: str) -> tuple[str, dict[str, Any], str]:
    r"""(before, ours, after): our record and the foreign text around it, byte for byte.

    >>> split_comment('note {"hetero":1,"a":2}')
    ('note', {'hetero': 1, 'a': 2}, '')
    >>> split_comment('{`hetero`:1}\n12/01 bb: failed')
    ('', {'hetero': 1}, '\n12/01 bb: failed')
    >>> split_comment('{"text":"JS1:xy","node_energy":{}}'), split_comment("plain")
    (('JS1:xy', {'node_energy': {}}, ''), ('plain', {}, ''))
    """
    if len(text) > MAX_COMMENT:
        return text, {}, ""
    unquoted = text.replace("`", '"')  # same length: positions hold in both
    at = len(text)
    while at > 0:
        at = max(unquoted.rfind(_MARK, 0, at), -1)
        if at < 0:
            break
        try:
            obj, end = _DECODER.raw_decode(unquoted, at)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
            continue
        if isinstance(obj, dict):
            before = text[:at]
            # The one space we put between the foreign text and ours is ours.
            return (before[:-1] if before.endswith(" ") else before), obj, text[end:]
    return _legacy(text, unquoted)


def _legacy(text: str, unquoted: str) -> tuple[str, dict[str, Any], str]:
    stripped = unquoted.strip()
    if not stripped.startswith("{"):
        return text, {}, ""
    try:
        obj = json.loads(stripped)
    except (ValueError, RecursionError):
        return text, {}, ""
    if not isinstance(obj, dict) or not (_LEGACY_KEYS & obj.keys() or set(obj) == {"text"}):
        return text, {}, ""  # someone else's JSON: not ours to touch
    foreign = obj.pop("text", "")
    return (foreign if isinstance(foreign, str) else ""), obj, ""


def parse_comment(text: str) -> dict[str, Any]:
    """Our record in an admin comment ({} if none), whether sacctmgr rewrote it or not.

    >>> parse_comment('{`hetero`:1,`model`:`h100`}')
    {'hetero': 1, 'model': 'h100'}
    >>> parse_comment('JS1:H4sI {"hetero":1,"pool":"v100@x86_64"}')["pool"]
    'v100@x86_64'
    """
    return split_comment(text.strip())[1]


def join_comment(before: str, ours: dict[str, Any], after: str = "", via_sacctmgr: bool = False) -> str:
    """The field with our record between the foreign parts. Its first key is always "hetero"
    (how readers find it): 1 where the bridge decided the job, 0 for the agent's figures of
    a job the bridge never saw. `via_sacctmgr`: our record `sacctmgr_proof`."""
    record = {"hetero": ours.get("hetero", 0), **{k: v for k, v in ours.items() if k != "hetero"}}
    body = json.dumps(record, separators=(",", ":"))
    if via_sacctmgr:
        body = sacctmgr_proof(body)
    return (f"{before} {body}" if before else body) + after


def merge_comment(current: str, add: dict[str, Any], via_sacctmgr: bool = False) -> str:
    """Deep-merge `add` into our record in `current`, the foreign text kept as it is.

    >>> merge_comment("{}", {"a": 1}), merge_comment("", {"a": 1})
    ('{"hetero":0,"a":1}', '{"hetero":0,"a":1}')
    >>> merge_comment('{"text":"set by an admin","node_energy":{"n1":1}}', {"node_energy": {"n2": 2}})
    'set by an admin {"hetero":0,"node_energy":{"n1":1,"n2":2}}'
    """
    before, ours, after = split_comment(current)
    if not ours and before.strip() in ("{}", "(null)"):
        before = ""
    if via_sacctmgr:
        if '"' in before or '"' in after:
            raise ForeignTextChanged("the comment's other text holds a double quote, which sacctmgr "
                                     "would store as a backquote")
        if before != before.lower() or after != after.lower():
            raise ForeignTextChanged("the comment's other text holds upper-case letters, which "
                                     "sacctmgr would lower-case")
    return join_comment(before, _merge(ours, add), after, via_sacctmgr=via_sacctmgr)


def replace_comment(current: str, ours: dict[str, Any]) -> str:
    """`current` with our record replaced by `ours` (the foreign text kept as it is).

    >>> replace_comment('JS1:x {"hetero":1,"pool":"a"} end', {"hetero": 1, "pool": "b"})
    'JS1:x {"hetero":1,"pool":"b"} end'
    """
    before, _, after = split_comment(current)
    return join_comment(before, ours, after)


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
    (escaped: a backslash) or a line break, or the site's own text in front of ours has
    blanks outside quotes; those go one argv each.

    >>> sits_on_a_line('{"a":"x y"}'), sits_on_a_line('JS1:ab {"hetero":1,"a":"x y"}')
    (True, True)
    >>> sits_on_a_line('an admin note {"hetero":1}'), sits_on_a_line('{"hetero":1} bb: failed')
    (False, False)
    """
    # \uXXXX escapes (sacctmgr_proof's, lower-case hex) read back as written; any other
    # backslash (an escaped quote or backslash) goes on its own argv.
    if any(c in _UESCAPE.sub("", comment) for c in "\\'\n\r") or len(comment) > MAX_COMMENT:
        return False
    before, ours, after = split_comment(comment)
    if ours and before:  # one word of foreign text, the one space, our compact JSON
        return not after and not any(c in before for c in ' \t"')
    quoted = False
    for c in comment:
        if c == '"':
            quoted = not quoted
        elif c in " \t" and not quoted:
            return False
    return not quoted


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
