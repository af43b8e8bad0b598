"""The sacct command family: argv, pure parsing of its text, and fetching a range a local
day at a time through the one `Runner`, with finished days kept on disk.

- `sacct_argv` builds the command: every job line (`-a`, allocations and steps), parsable
  (`-P -n`), split on the project's SACCT_DELIMITER, FIELDS with AdminComment last, so a
  stray delimiter only lengthens that one field. FIELDS hold nothing a job's user writes:
  22.05 prints text raw, and a job name of a newline plus delimiter-joined fields would be a
  row of its user's making. Times come as epoch seconds (SLURM_TIME_FORMAT=%s, `epoch_runner`).
- Job names come apart (`names_argv`, NAME_FIELDS: the id on both sides of the name) and
  only ever label a row the trusted query made: `parse_names` takes them only when every
  line is `ID<US>name<US>ID` with each id once, which a name holding a newline can never
  produce; otherwise that chunk's names come from `sacct --json`, where a name is a string.
- `read_sacct` parses those texts (pure, no Slurm): one row per allocation (step lines are
  dropped, the allocation line already sums their TotalCPU); a job active on several days
  appears in several chunks, and the last one wins; a job listed twice within one chunk is
  reported (`RawSacct.duplicates`), never taken silently. ISO local times are read too.
- `SacctDays` runs sacct per local day (`day_chunks`) and keeps the text of a day in a
  `SacctCache` once it can no longer change: it ended more than SETTLE_S ago and every job
  in it has reached a terminal state. A day in progress, or holding a job still pending or
  running, is fetched again each time; a stored day is never stale (short of slurmdbd
  replaying records after a long outage: use no cache to refetch).

Turning the rows into the job table is `slurm_hetero.jobs.sacct`'s work.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import io
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_atomic
from slurm_hetero.slurm.parse import SACCT_DELIMITER, check_trusted, parse_slurm_time
from slurm_hetero.slurm.runner import Runner, SlurmCommandError
from slurm_hetero.slurm.squeue import json_number

DELIM = SACCT_DELIMITER
FIELDS = ("JobIDRaw", "JobID", "Cluster", "User", "Account", "Partition", "QOS", "State",
          "Reason", "Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "ReqCPUS",
          "ReqTRES", "ReqMem", "NCPUS", "TotalCPU", "AllocTRES", "NodeList", "ConsumedEnergyRaw",
          "AdminComment")
# Job states after which a job changes no more. sacct prints e.g. "CANCELLED by 0": the
# state is the first word (`base_state`).
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"})
SETTLE_S = 3600.0  # slurmdbd may still learn of jobs that ended this recently
CACHE_VERSION = 3  # 3: no JobName among FIELDS; the chunk's names stored beside its rows
NAME_FIELDS = ("JobIDRaw", "JobName", "JobIDRaw")
_RAW_ID = re.compile(r"\d{1,12}")
# In a stored chunk, between its rows and its names (JSON): sacct never prints a NUL.
_CHUNK_SEP = "\0"
TIME_FIELDS = ("Submit", "Eligible", "Start", "End")
# Parsed straight to floats; these tokens (and only these) mean "unknown".
NUMERIC_FIELDS = (*TIME_FIELDS, "ElapsedRaw", "TimelimitRaw", "ReqCPUS", "NCPUS", "ConsumedEnergyRaw")
UNKNOWN = ("Unknown", "None", "", "UNLIMITED", "Partition_Limit", "INVALID", "N/A")
# Mostly unique per job: plain objects; every other field repeats and is read as categorical.
UNIQUE_FIELDS = ("JobIDRaw", "JobID", "JobName")
DATE_FORMS = ("YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], now, today, yesterday, "
              "or -Nd / -Nh (N days / hours ago)")
_RELATIVE = re.compile(r"^-?(\d+(?:\.\d+)?)\s*([dh])$")
# sacct reads -S/-E as local wall-clock times.
_SACCT_TIME = "%Y-%m-%dT%H:%M:%S"


def base_state(state: str) -> str:
    """`CANCELLED by 0` → `CANCELLED`.

    >>> base_state("CANCELLED by 0"), base_state("COMPLETED")
    ('CANCELLED', 'COMPLETED')
    """
    return state.split(" ", 1)[0]


# ---- the range of a query ----------------------------------------------------------------

def parse_when(text: str, option: str, now: float | None = None) -> float:
    """A --since/--until value as epoch seconds (local time, as sacct reads it).

    >>> parse_when("1970-01-02", "--since") == datetime(1970, 1, 2).timestamp()
    True
    """
    now = time.time() if now is None else now
    t = text.strip().lower()
    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if t == "now":
        return now
    if t == "today":
        return midnight.timestamp()
    if t == "yesterday":
        return (midnight - timedelta(days=1)).timestamp()
    m = _RELATIVE.match(t)
    if m:
        hours = float(m.group(1)) * (24 if m.group(2) == "d" else 1)
        return now - hours * 3600
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise InputError(f"{option} {text!r}: not a date or time; use {DATE_FORMS}") from None


def next_midnight(t: float) -> float:
    """The local midnight after `t` (DST-safe)."""
    day = datetime.fromtimestamp(t).replace(hour=0, minute=0, second=0, microsecond=0)
    return (day + timedelta(days=1)).timestamp()


def day_chunks(start: float, end: float) -> Iterator[tuple[float, float]]:
    """[start, end) cut at local midnights: the unit of fetching and of caching."""
    t = start
    while t < end:
        nxt = min(next_midnight(t), end)
        yield t, nxt
        t = nxt


# ---- argv ----------------------------------------------------------------------------------

def sacct_argv(start: float, end: float, fields: Sequence[str] = FIELDS,
               cluster: str | None = None) -> list[str]:
    """sacct over [start, end) (epoch seconds), every job line, FIELDS split on DELIM."""
    return _window(["sacct", "-a", "-n", "-P", f"--delimiter={DELIM}"], start, end, cluster,
                   ["-o", ",".join(check_trusted(fields))])


def names_argv(start: float, end: float, cluster: str | None = None) -> list[str]:
    """The job names of the same window: one allocation line each, `ID<US>name<US>ID`."""
    return _window(["sacct", "-a", "-X", "-n", "-P", f"--delimiter={DELIM}"], start, end, cluster,
                   ["-o", ",".join(NAME_FIELDS)])


def names_json_argv(start: float, end: float, cluster: str | None = None) -> list[str]:
    """The same window as JSON, for a chunk whose names `parse_names` could not vouch for."""
    return _window(["sacct", "--json", "-a", "-X"], start, end, cluster, [])


def _window(head: list[str], start: float, end: float, cluster: str | None, tail: list[str]) -> list[str]:
    argv = [*head, "-S", time.strftime(_SACCT_TIME, time.localtime(start)),
            "-E", time.strftime(_SACCT_TIME, time.localtime(end)), *tail]
    return [*argv, "-M", cluster] if cluster else argv


def epoch_runner(runner: Runner) -> Runner:
    """The same runner, with Slurm printing every time as epoch seconds (no TZ parsing)."""
    return dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})


# ---- parsing (pure) ------------------------------------------------------------------------

@dataclass(frozen=True)
class RawSacct:
    """`fields` as columns (numbers as floats, NaN unknown), allocation lines only, one per
    job, plus JobName where the chunks carried names; `skipped`: lines that had fewer fields
    than asked for; `duplicates`: ids listed more than once within one chunk."""

    frame: pd.DataFrame
    skipped: int
    duplicates: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChunkText:
    """One chunk's sacct text (`sacct_argv`) and the names of its jobs (id → name)."""

    rows: str
    names: Mapping[str, str]


def parse_names(text: str, sep: str = DELIM) -> dict[str, str] | None:
    r"""`names_argv` output → id → name; None when a line is not `ID<sep>name<sep>ID` or an id
    comes twice. A name holding a newline splits its row in two: the first part must then end
    with the id and the second start with it, so that id comes twice. Only "\n" ends a line
    (sacct's own row end); any other line-break character is part of the name.

    >>> parse_names("7\x1fa\x1fb\x1f7\n8\x1f\x1f8\n")
    {'7': 'a\x1fb', '8': ''}
    >>> parse_names("7\x1fx\n9\x1fforged\x1f9\n\x1f7\n") is None
    True
    """
    names: dict[str, str] = {}
    for line in text.split("\n"):
        if not line:
            continue
        head, first, rest = line.partition(sep)
        name, last, tail = rest.rpartition(sep)
        if not (first and last and tail == head and _RAW_ID.fullmatch(head)) or head in names:
            return None
        names[head] = name
    return names


def parse_names_json(text: str) -> dict[str, str]:
    """`sacct --json` → id → name (a name is a JSON string there: it cannot pose as a job)."""
    doc = json.loads(text)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    names: dict[str, str] = {}
    for j in jobs if isinstance(jobs, list) else []:
        jid = json_number(j.get("job_id")) if isinstance(j, dict) else None
        if jid is not None and jid > 0 and jid == int(jid) and isinstance(j.get("name"), str):
            names[str(int(jid))] = j["name"]
    return names


def _dtypes(fields: Sequence[str]) -> dict[str, str | type]:
    return {f: "float64" if f in NUMERIC_FIELDS else object if f in UNIQUE_FIELDS else "category"
            for f in fields}


def read_sacct(texts: Iterable[str | ChunkText], fields: Sequence[str] = FIELDS,
               sep: str = DELIM) -> RawSacct:
    """Parse `sacct -n -P --delimiter=SEP -o FIELDS` outputs (e.g. one per day chunk); chunks
    that carry names (ChunkText) add a JobName column (a job without one: "")."""
    fields = tuple(fields)
    frames: list[pd.DataFrame] = []
    skipped = 0
    dups: list[str] = []
    names: dict[str, str] | None = None
    for chunk in texts:
        text = chunk.rows if isinstance(chunk, ChunkText) else chunk
        if isinstance(chunk, ChunkText):  # a later chunk's name wins, as its row does
            names = {} if names is None else names
            names.update(chunk.names)
        if not text.strip():
            continue
        body = text if text.endswith("\n") else text + "\n"
        # Chunk by chunk (not one joined text): a third less peak memory for the same time.
        fast = _read_fast(body, fields, sep) if _well_formed(body, fields, sep) else None
        if fast is None:
            frame, bad = _read_by_hand(body, fields, sep)
            skipped += bad
        else:
            frame = fast
        frames.append(frame)
        dups += _duplicates(frame, fields)
    if not frames:
        return RawSacct(_with_names(_read_by_hand("", fields, sep)[0], fields, names), skipped)
    raw = _allocations(_concat(frames, fields), fields)
    key = "JobIDRaw" if "JobIDRaw" in raw else fields[0]
    raw = raw.drop_duplicates(key, keep="last").reset_index(drop=True)
    return RawSacct(_with_names(raw, fields, names), skipped, tuple(dict.fromkeys(dups)))


def _allocations(raw: pd.DataFrame, fields: tuple[str, ...]) -> pd.DataFrame:
    """Allocation lines only (a step's id has a dot: `7.batch`)."""
    ids = raw["JobID"] if "JobID" in raw else raw[fields[0]]
    return raw[~ids.astype(str).str.contains(".", regex=False)]


def _duplicates(frame: pd.DataFrame, fields: tuple[str, ...]) -> list[str]:
    """Ids on more than one allocation line of one chunk: Slurm lists a job once per query."""
    alloc = _allocations(frame, fields)
    key = alloc["JobIDRaw" if "JobIDRaw" in alloc else fields[0]].astype(str)
    return sorted(set(key[key.duplicated()]))


def _with_names(raw: pd.DataFrame, fields: tuple[str, ...], names: Mapping[str, str] | None) -> pd.DataFrame:
    if names is None or "JobName" in raw:
        return raw
    key = raw["JobIDRaw" if "JobIDRaw" in raw else fields[0]].astype(str)
    return raw.assign(JobName=np.asarray([names.get(k, "") for k in key], dtype=object))


def _concat(frames: list[pd.DataFrame], fields: tuple[str, ...]) -> pd.DataFrame:
    """Concatenate frames keeping categoricals categorical (pd.concat would fall back to
    objects whenever two frames saw different categories)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    dtypes = _dtypes(fields)
    cols: dict[str, object] = {}
    for f in fields:
        parts = [fr[f] for fr in frames]
        if dtypes[f] == "category":
            cols[f] = union_categoricals([p.astype("category") for p in parts], ignore_order=True)
        else:
            cols[f] = np.concatenate([p.to_numpy() for p in parts])
    return pd.DataFrame(cols)


def _well_formed(body: str, fields: tuple[str, ...], sep: str) -> bool:
    """Every line has exactly len(fields) fields iff the separators add up."""
    return body.count(sep) == (len(fields) - 1) * body.count("\n") and "\n\n" not in body


def _read_fast(body: str, fields: tuple[str, ...], sep: str) -> pd.DataFrame | None:
    """pandas' C parser; None when a number field holds something else (an ISO time)."""
    numeric = [f for f in fields if f in NUMERIC_FIELDS]
    try:
        return pd.read_csv(io.StringIO(body), sep=sep, header=None, names=list(fields),
                           dtype=_dtypes(fields), keep_default_na=False,
                           na_values={f: list(UNKNOWN) for f in numeric},
                           quoting=csv.QUOTE_NONE, engine="c")
    except (ValueError, pd.errors.EmptyDataError):
        return None


def _read_by_hand(text: str, fields: tuple[str, ...], sep: str) -> tuple[pd.DataFrame, int]:
    """Split each line: extra separators stay in the last field, short lines are skipped."""
    rows = [ln.split(sep, len(fields) - 1) for ln in text.splitlines() if ln]
    good = [r for r in rows if len(r) == len(fields)]
    frame = pd.DataFrame(good, columns=list(fields), dtype=object)
    for f, dtype in _dtypes(fields).items():
        if f in NUMERIC_FIELDS:
            frame[f] = _numbers(frame[f], f in TIME_FIELDS)
        elif dtype == "category":
            frame[f] = frame[f].astype("category")
    return frame, len(rows) - len(good)


def _numbers(col: pd.Series, is_time: bool) -> pd.Series:
    """Numbers as floats; unknown tokens and anything unreadable → NaN; a time may also be a
    local ISO time (sacct without SLURM_TIME_FORMAT=%s)."""
    out = pd.to_numeric(col, errors="coerce").astype("float64")
    if is_time:
        odd = out.isna() & ~col.isin(UNKNOWN)
        for text in pd.unique(col[odd]):
            t = parse_slurm_time(str(text))
            out[col == text] = np.nan if t is None else t
    return out


def chunk_settled(text: str | ChunkText, end: float, now: float, fields: Sequence[str] = FIELDS,
                  sep: str = DELIM) -> bool:
    """True when a chunk's sacct text can no longer change (see the module doc)."""
    if isinstance(text, ChunkText):
        text = text.rows
    if end > now - SETTLE_S:
        return False
    state_col = list(fields).index("State")
    for line in text.splitlines():
        values = line.split(sep, len(fields) - 1)
        if len(values) != len(fields) or base_state(values[state_col]) not in TERMINAL:
            return False
    return True


# ---- fetching and the on-disk cache --------------------------------------------------------

def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "slurm-hetero" / "sacct"


def accounting_identity(runner: Runner) -> dict[str, str]:
    """What names the accounting database: from slurm.conf, as far as it is readable."""
    conf = runner.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    ident = {"conf": str(Path(conf).resolve())}
    try:
        text = Path(conf).read_text(errors="replace")
    except OSError:
        return ident
    wanted = {"clustername", "accountingstoragehost", "accountingstorageport"}
    for line in text.splitlines():
        key, _, value = line.split("#", 1)[0].strip().partition("=")
        if key.strip().lower() in wanted:
            ident[key.strip().lower()] = value.strip()
    return ident


class SacctCache:
    """The sacct text of settled chunks, one gzip file per chunk, in a folder named by
    `key` (the accounting database, the field list, the cluster)."""

    def __init__(self, root: Path, key: Mapping[str, object]):
        digest = hashlib.sha256(json.dumps({"v": CACHE_VERSION, **key}, sort_keys=True).encode())
        self.dir = root / digest.hexdigest()[:16]

    def path(self, start: float, end: float) -> Path:
        return self.dir / f"{int(start)}-{int(end)}.psv.gz"

    def get(self, start: float, end: float) -> str | ChunkText | None:
        """The stored chunk, or None when absent or damaged (then it is fetched again)."""
        try:
            text = gzip.decompress(self.path(start, end).read_bytes()).decode()
            if _CHUNK_SEP not in text:
                return text
            rows, _, names = text.partition(_CHUNK_SEP)
            got = json.loads(names)
            if not isinstance(got, dict) or not all(isinstance(v, str) for v in got.values()):
                return None
            return ChunkText(rows, got)
        except (OSError, EOFError, UnicodeDecodeError, ValueError):
            return None

    def put(self, start: float, end: float, chunk: str | ChunkText) -> None:
        """Whole or not at all (fileio.write_atomic: a temp file renamed over the entry)."""
        text = (chunk.rows + _CHUNK_SEP + json.dumps(dict(chunk.names))
                if isinstance(chunk, ChunkText) else chunk)
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(start, end), gzip.compress(text.encode(), compresslevel=5), mode=0o600)


@dataclass(frozen=True)
class Chunk:
    """What happened to one chunk: `cached` came from disk; `settled` may be kept."""

    start: float
    end: float
    index: int  # 1-based
    total: int
    cached: bool
    settled: bool


class SacctDays:
    """sacct over a range, one local day at a time, through the one runner."""

    def __init__(self, runner: Runner, cache_root: Path | None = None, *,
                 fields: Sequence[str] = FIELDS, cluster: str | None = None, now: float | None = None,
                 names: bool = False):
        self.runner = epoch_runner(runner)
        self.fields = tuple(check_trusted(fields))
        self.cluster = cluster
        self.names = names
        self.now = time.time() if now is None else now
        self.hits = self.fetched = 0
        self.forged_names: list[tuple[float, float]] = []  # chunks whose names came from JSON
        self.cache = None if cache_root is None else SacctCache(cache_root, {
            "db": accounting_identity(runner), "fields": self.fields, "cluster": cluster or "",
            "names": names})

    def texts(self, start: float, end: float,
              on_chunk: Callable[[Chunk], None] | None = None) -> list[str | ChunkText]:
        """Every chunk's sacct text over [start, end) (with `names`, a ChunkText); chunks
        that begin after now are not asked for (the future holds no jobs)."""
        chunks = [c for c in day_chunks(start, end) if c[0] <= self.now]
        out: list[str | ChunkText] = []
        for i, (a, b) in enumerate(chunks, start=1):
            text = self.cache.get(a, b) if self.cache else None
            cached = text is not None
            if text is None:
                text = self._chunk(a, b)
                self.fetched += 1
            else:
                self.hits += 1
            settled = cached or chunk_settled(text, b, self.now, self.fields)
            if self.cache and settled and not cached:
                self.cache.put(a, b, text)
            out.append(text)
            if on_chunk:
                on_chunk(Chunk(a, b, i, len(chunks), cached, settled))
        return out

    def _chunk(self, start: float, end: float) -> str | ChunkText:
        rows = self._sacct(sacct_argv(start, end, self.fields, self.cluster), start, end)
        if not self.names:
            return rows
        names = parse_names(self._sacct(names_argv(start, end, self.cluster), start, end))
        if names is None:  # a name held a newline: this chunk's names as JSON strings
            self.forged_names.append((start, end))
            try:
                names = parse_names_json(self._sacct(names_json_argv(start, end, self.cluster), start, end))
            except ValueError as e:
                raise RuntimeFailure(f"sacct --json for {_fmt(start)} → {_fmt(end)}: "
                                     f"unreadable answer: {e}") from e
        return ChunkText(rows, names)

    def _sacct(self, argv: list[str], start: float, end: float) -> str:
        try:
            return self.runner.out(argv, timeout=300)
        except SlurmCommandError as e:
            lines = [ln.strip() for ln in e.stderr.strip().splitlines() if ln.strip()]
            raise RuntimeFailure(
                f"cannot read job accounting for {_fmt(start)} → {_fmt(end)}: "
                f"sacct exited {e.returncode}: {' | '.join(lines[-2:]) or 'no message'}; is slurmdbd "
                "running and reachable at AccountingStorageHost/AccountingStoragePort of slurm.conf?") from e


def sacct_notes(raw: RawSacct, days: SacctDays) -> list[str]:
    """What a reader of the accounting should say about it: jobs listed twice in one chunk
    (kept once, the last listing) and chunks whose names had to come from `sacct --json`."""
    notes = []
    if raw.duplicates:
        shown = ", ".join(raw.duplicates[:5]) + (" ..." if len(raw.duplicates) > 5 else "")
        notes.append(f"sacct listed {len(raw.duplicates)} job id(s) twice in one day ({shown}): "
                     "each kept once, from its last line")
    for a, b in days.forged_names:
        notes.append(f"job names of {_fmt(a)} → {_fmt(b)} read from sacct --json: "
                     "a job name there holds a line break")
    return notes


def _fmt(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
