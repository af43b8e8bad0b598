"""A user's bytes in Slurm's output: invalid UTF-8 costs that job's text only, and no
user-written text can make, change or remove a row of accounting.

The squeue answer is a captured 22.05 `squeue --json` with the bytes put where 22.05 puts a
job name (raw, unescaped: what the review saw); the sacct texts are what 22.05 prints for
`-P --delimiter=US` with a job name holding a newline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from slurm_hetero.slurm.runner import Runner, decode_output
from slurm_hetero.slurm.sacct import (
    DELIM,
    FIELDS,
    ChunkText,
    SacctCache,
    SacctDays,
    names_argv,
    parse_names,
    parse_names_json,
    read_sacct,
    sacct_argv,
    sacct_notes,
)
from slurm_hetero.slurm.squeue import parse_squeue_json
from tests.fakeslurm import FakeSlurm

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "captured"

# Each class of malformed UTF-8 the review sent as a job name.
MALFORMED = {
    "invalid start bytes": b"\xff\xfe",
    "lone surrogate": b"a\xed\xa0\x80b",
    "overlong": b"\xc0\xaf",
    "truncated": b"abc\xe2\x82",
    "truncated before a quote": b"\xe2\x82\"",
    "continuation alone": b"\x80\x80",
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_every_malformed_class_decodes_and_keeps_what_follows(raw: bytes) -> None:
    text = decode_output(raw + b"|7\n")
    assert text.endswith("|7\n") and "\ufffd" in text
    text.encode("utf-8")  # no lone surrogate survives: anything downstream can write it


def _squeue_with_name(raw: bytes) -> bytes:
    doc = (CAPTURED / "squeue-json-22.05.json").read_bytes()
    first = doc.index(b'"name": "', doc.index(b'"jobs"')) + len(b'"name": "')
    end = doc.index(b'"', first)
    # Slurm escapes `"` and `\` itself; the bytes themselves go in raw.
    return doc[:first] + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + doc[end:]


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_one_jobs_bad_name_costs_no_other_job(raw: bytes) -> None:
    before, _ = parse_squeue_json((CAPTURED / "squeue-json-22.05.json").read_text())
    jobs, problems = parse_squeue_json(decode_output(_squeue_with_name(raw)))
    assert problems == []
    assert [j.job_id for j in jobs] == [j.job_id for j in before]
    assert [j.admin_comment for j in jobs] == [j.admin_comment for j in before]
    assert "\ufffd" in jobs[0].name and jobs[1:] == before[1:]


def test_the_runner_decodes_what_a_command_prints(tmp_path: Path) -> None:
    """The real runner, over a real process printing every class at once (stdout and stderr)."""
    raw = b"".join(MALFORMED.values())
    script = f"import sys; sys.stdout.buffer.write({raw!r}); sys.stderr.buffer.write({raw!r})"
    proc = Runner().run([sys.executable, "-c", script])
    assert proc.stdout == decode_output(raw) and proc.stderr == decode_output(raw)
    assert proc.stdout.count("\ufffd") >= len(MALFORMED)


# ---- sacct: rows from fields no user writes, names apart ---------------------------------

GPU_TRES = "billing=41,cpu=2,gres/gpu:h100=1,gres/gpu=1,mem=2G,node=1"
ROOT = {"JobIDRaw": "41", "JobID": "41", "Cluster": "demo", "User": "root", "Account": "root",
        "Partition": "gpu", "QOS": "gold", "State": "COMPLETED", "Reason": "None", "Submit": "1796033027",
        "Eligible": "1796033027", "Start": "1796033030", "End": "1796033090", "ElapsedRaw": "60",
        "TimelimitRaw": "60", "ReqCPUS": "2", "ReqTRES": GPU_TRES, "ReqMem": "2G", "NCPUS": "2",
        "TotalCPU": "00:01.000", "AllocTRES": GPU_TRES, "NodeList": "h100-01", "ConsumedEnergyRaw": "0",
        "AdminComment": ""}
MALLORY = {**ROOT, "JobIDRaw": "66", "JobID": "66", "User": "mallory", "Account": "users",
           "Partition": "cpu", "End": "1796033040", "ElapsedRaw": "10", "AllocTRES": "cpu=1,mem=1G,node=1",
           "ReqTRES": "cpu=1,mem=1G,node=1", "NodeList": "cpu-01"}


def _row(values: dict[str, str]) -> str:
    assert set(values) == set(FIELDS)
    return DELIM.join(values[f] for f in FIELDS) + "\n"


def _forged_name() -> str:
    """The review's name: a newline, then a whole row claiming 8 H100s for an hour for root's
    job 41, in the fields the old single query asked for (JobName among them)."""
    old_fields = (*FIELDS[:3], "JobName", *FIELDS[3:])
    fake = {**ROOT, "JobName": "x", "End": "1796036630", "ElapsedRaw": "3600",
            "AllocTRES": "billing=8,gres/gpu:h100=8,gres/gpu=8,node=1"}
    return "n\n" + DELIM.join(fake[f] for f in old_fields)


def test_the_forged_row_never_reaches_the_rows_query() -> None:
    # The rows come from a query without any user-written field: nothing a user writes is
    # in its text, so the name above cannot add a line there.
    argv = sacct_argv(0, 86400)
    assert "JobName" not in argv[argv.index("-o") + 1].split(",")
    assert names_argv(0, 86400)[-1] == "JobIDRaw,JobName,JobIDRaw"


def test_names_of_well_formed_lines() -> None:
    text = (f"7{DELIM}plain{DELIM}7\n8{DELIM}{DELIM}8\n9{DELIM}has{DELIM}sep{DELIM}9\n"
            f"10{DELIM}cr\rff\fnel\x85ls\u2028{DELIM}10\n")
    assert parse_names(text) == {"7": "plain", "8": "", "9": f"has{DELIM}sep", "10": "cr\rff\fnel\x85ls\u2028"}


@pytest.mark.parametrize("name", [
    _forged_name(),
    f"a{DELIM}66\n41{DELIM}forged{DELIM}41\n66{DELIM}b",  # every line well-formed: 66 comes twice
    f"a{DELIM}66\n\n66{DELIM}b",
    "line\nbreak",
])
def test_a_name_holding_a_newline_makes_the_chunks_names_unusable(name: str) -> None:
    text = f"41{DELIM}train{DELIM}41\n66{DELIM}{name}{DELIM}66\n"
    assert parse_names(text) is None


def test_a_forged_name_costs_no_row_and_names_come_from_json(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _row(ROOT) + _row(MALLORY)
    names = f"41{DELIM}train{DELIM}41\n66{DELIM}{_forged_name()}{DELIM}66\n"
    as_json = json.dumps({"jobs": [{"job_id": 41, "name": "train"}, {"job_id": 66, "name": _forged_name()}]})

    def sacct(argv: list[str], env: dict[str, str]) -> str:
        if "--json" in argv:
            return as_json
        return names if argv[argv.index("-o") + 1] == "JobIDRaw,JobName,JobIDRaw" else rows

    FakeSlurm(monkeypatch).on("sacct", sacct)
    days = SacctDays(Runner(), tmp_path, now=1796040000.0, names=True)
    raw = read_sacct(days.texts(1796033000.0, 1796040000.0))
    frame = raw.frame.set_index("JobIDRaw")
    assert sorted(frame.index) == ["41", "66"]
    assert frame.loc["41", "AllocTRES"] == GPU_TRES and frame.loc["41", "ElapsedRaw"] == 60
    assert frame.loc["41", "JobName"] == "train" and frame.loc["66", "JobName"] == _forged_name()
    assert len(days.forged_names) == 1
    assert any("line break" in n for n in sacct_notes(raw, days))


def test_names_json_keeps_only_string_names_of_real_ids() -> None:
    doc = {"jobs": [{"job_id": 5, "name": "a"}, {"job_id": "6", "name": "b"}, {"job_id": 7, "name": 3},
                    {"job_id": {"set": True, "number": 8}, "name": "c"}, "junk", {"job_id": -1, "name": "d"}]}
    assert parse_names_json(json.dumps(doc)) == {"5": "a", "8": "c"}


def test_a_job_twice_in_one_chunk_is_reported_not_taken_silently() -> None:
    twice = _row(ROOT) + _row({**ROOT, "End": "1796039999", "ElapsedRaw": "9999"})
    raw = read_sacct([twice])
    assert raw.duplicates == ("41",)
    # The same job on two days (two chunks) is the normal case: not a duplicate.
    assert read_sacct([_row(ROOT), _row(ROOT)]).duplicates == ()


def test_a_chunk_with_names_survives_the_cache(tmp_path: Path) -> None:
    cache = SacctCache(tmp_path, {"k": 1})
    chunk = ChunkText(_row(ROOT), {"41": "a\x00b\nc", "42": "\ufffd"})
    cache.put(0, 86400, chunk)
    assert cache.get(0, 86400) == chunk
    cache.put(86400, 172800, "plain rows\n")
    assert cache.get(86400, 172800) == "plain rows\n"
