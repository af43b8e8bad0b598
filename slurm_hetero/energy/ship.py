"""Per-job figures from the node into the accounting record, in batches, off the job's path.

The epilog asks Slurm nothing: it writes what the node measured for the job to a local
spool file (`<state>/<node>/spool/<job>.json`) and returns. The shipper, run by the node's
health check (Slurm's HealthCheckProgram, every node in turn), takes every spooled job at
once: one `sacct` reads their admin comments, one `sacctmgr` session (its commands on
stdin) writes the merged ones. A spool file goes only once a later round reads this node's
figures back from the database, so a write another node of the same job overwrote (the
comment is one field, and sacctmgr has no compare-and-set) is written again next round:
what a multi-node job's nodes race for heals instead of being lost. Slurm runs the health
checks of many nodes at the same moment, so a round with a multi-node job's figures first
waits a random while (up to a quarter second per node of the job, at most 20 s): the
nodes' read-and-writes (~0.2 s each) then mostly follow one another, and what still
collides is written again next round. Jobs the database does not know yet wait for the
next round; a spool entry no round could place in a week goes.

Per job and node that is no RPC in the prolog/epilog beyond the prolog's one `scontrol`,
and per node and round two commands whatever the number of jobs.

With a shared spool (site `node_agent.shared_spool`: a folder every compute node mounts,
root-writable only) a job has one writer: each node's epilog leaves its figures in
`<shared>/<job>/<node>.json`, and the job's first node (first in Slurm's node list) ships
them all in one write once every node's file is there (or SHARED_WAIT_S after the first).
A job whose first node never ships it (gone for good) is taken over by any of its nodes
after TAKEOVER_S. slurmdbd then sees one write per job, not one (or more) per node. The
shared filesystem needs atomic rename within a folder and close-to-open consistency (NFS,
Lustre and GPFS give both); a file seen half-written is left for the next round.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_hetero.energy.state import NodeState
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.slurm.comment import (
    ForeignTextChanged,
    batch_comment_input,
    db_comments_argv,
    merge_comment,
    parse_comment,
    parse_db_comments,
    set_db_comment_argv,
    sits_on_a_line,
)
from slurm_hetero.slurm.runner import Runner

log = logging.getLogger("slurm_hetero.agent")

BATCH = 500  # jobs per round: one sacct -j list and one sacctmgr session
SHARED_WAIT_S = 300.0
TAKEOVER_S = 3600.0
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_AGE_S = 7 * 86_400
JITTER_PER_NODE_S = 0.25
MAX_JITTER_S = 20.0  # well inside the health check's own time limit


@dataclass
class Shipped:
    written: int = 0
    confirmed: int = 0
    waiting: int = 0  # not in the accounting database yet
    dropped: int = 0


def spool_dir(st: NodeState) -> Path:
    return st.dir / "spool"


def spool(st: NodeState, job_id: str, node: str, summary: dict[str, Any], nodes: int = 1) -> None:
    d = spool_dir(st)
    d.mkdir(exist_ok=True)
    record = {"job": job_id, "node": node, "summary": summary, "t": time.time(), "nodes": nodes}
    write_json_atomic(d / f"{job_id}.json", record)


def _entries(st: NodeState) -> list[tuple[str, dict[str, Any], Path]]:
    out = []
    for f in sorted(spool_dir(st).glob("*.json"), key=lambda p: p.stat().st_mtime)[:BATCH]:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            log.warning("spool %s unreadable: dropped", f.name)
            f.unlink(missing_ok=True)
            continue
        if isinstance(rec, dict) and str(rec.get("job", "")).isdigit() and f.stem == rec["job"]:
            out.append((rec["job"], rec, f))
    return out


def ship(runner: Runner, st: NodeState, node: str, now: float | None = None,
         sleep: Callable[[float], None] = time.sleep) -> Shipped:
    """One round for one node (see the module's docstring)."""
    now = time.time() if now is None else now
    entries = _entries(st) if spool_dir(st).is_dir() else []
    done = Shipped()
    if not entries:
        return done
    widest = max(int(rec.get("nodes") or 1) for _, rec, _ in entries)
    if widest > 1:
        sleep(random.uniform(0, min(MAX_JITTER_S, JITTER_PER_NODE_S * widest)))
    comments = parse_db_comments(runner.out(db_comments_argv([j for j, _, _ in entries])))
    lines: list[tuple[str, str]] = []
    for job, rec, path in entries:
        if job not in comments:
            if now - float(rec.get("t", now)) > MAX_AGE_S:
                log.warning("job %s: no accounting record in a week; %s's figures dropped", job, node)
                path.unlink(missing_ok=True)
                done.dropped += 1
            else:
                done.waiting += 1
            continue
        current = comments[job]
        if parse_comment(current).get("node_energy", {}).get(node) == rec["summary"]:
            path.unlink(missing_ok=True)  # read back: it stays
            done.confirmed += 1
            continue
        try:
            merged = merge_comment(current, {"node_energy": {node: rec["summary"]}}, via_sacctmgr=True)
        except ForeignTextChanged as e:  # never change another tool's text to add ours
            log.warning("job %s: %s's figures not written: %s", job, node, e)
            path.unlink(missing_ok=True)
            done.dropped += 1
            continue
        lines.append((job, merged))
    _write(runner, lines)
    done.written = len(lines)
    return done


def _write(runner: Runner, lines: list[tuple[str, str]]) -> None:
    batch = [(j, c) for j, c in lines if sits_on_a_line(c)]
    if batch:
        argv, text = batch_comment_input(batch)
        runner.run(argv, input=text)
    for job, comment in lines:  # what sacctmgr's line parser could misread: one argv each
        if not sits_on_a_line(comment):
            runner.run(set_db_comment_argv(job, comment), check=False)


# ---- one writer per job: the shared spool ----------------------------------------------------

def check_shared(shared: Path) -> None:
    """The shared spool must be root's alone: its files become accounting records."""
    st = shared.stat()
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise PermissionError(f"{shared}: the shared spool must be owned by root and writable by "
                              "root only (chown root; chmod go-w)")


def spool_shared(shared: Path, job_id: str, node: str, summary: dict[str, Any], nodes: int,
                 first: str) -> None:
    """This node's figures for the job's writer (its first node)."""
    check_shared(shared)
    d = shared / job_id
    d.mkdir(mode=0o755, exist_ok=True)
    write_json_atomic(d / f"{node}.json", {"job": job_id, "node": node, "summary": summary,
                                           "t": time.time(), "nodes": nodes, "first": first})


def _shared_entries(d: Path) -> list[dict[str, Any]]:
    out = []
    for f in d.glob("*.json"):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # being written (or torn): the next round reads it
        if (isinstance(rec, dict) and rec.get("job") == d.name and isinstance(rec.get("node"), str)
                and _NODE.match(rec["node"]) and f.stem == rec["node"]):
            out.append(rec)
    return out


def ship_shared(runner: Runner, shared: Path, node: str, now: float | None = None) -> Shipped:
    """One round for one node over the shared spool: the jobs it writes (see the docstring)."""
    now = time.time() if now is None else now
    done = Shipped()
    check_shared(shared)
    mine: list[tuple[str, list[dict[str, Any]], Path]] = []
    for d in sorted(shared.iterdir(), key=lambda p: p.name):
        if not (d.name.isdigit() and d.is_dir()) or len(mine) >= BATCH:
            continue
        entries = _shared_entries(d)
        if not entries:
            continue
        oldest = min(float(e.get("t", now)) for e in entries)
        nodes = max(int(e.get("nodes") or 1) for e in entries)
        writer = min(str(e.get("first") or e["node"]) for e in entries) == node
        if not writer and not (now - oldest > TAKEOVER_S and any(e["node"] == node for e in entries)):
            continue
        if len(entries) < nodes and now - oldest < SHARED_WAIT_S:
            done.waiting += 1
            continue
        mine.append((d.name, entries, d))
    if not mine:
        return done
    comments = parse_db_comments(runner.out(db_comments_argv([j for j, _, _ in mine])))
    lines: list[tuple[str, str]] = []
    for job, entries, d in mine:
        oldest = min(float(e.get("t", now)) for e in entries)
        if job not in comments:
            if now - oldest > MAX_AGE_S:
                log.warning("job %s: no accounting record in a week; its figures dropped", job)
                _remove(d, entries)
                done.dropped += 1
            else:
                done.waiting += 1
            continue
        current = comments[job]
        have = parse_comment(current).get("node_energy", {})
        figures = {e["node"]: e["summary"] for e in entries}
        if isinstance(have, dict) and all(have.get(n) == v for n, v in figures.items()):
            _remove(d, entries)  # read back: it stays
            done.confirmed += 1
            continue
        try:
            lines.append((job, merge_comment(current, {"node_energy": figures}, via_sacctmgr=True)))
        except ForeignTextChanged as e:
            log.warning("job %s: figures not written: %s", job, e)
            _remove(d, entries)
            done.dropped += 1
    _write(runner, lines)
    done.written = len(lines)
    return done


def _remove(d: Path, entries: list[dict[str, Any]]) -> None:
    """The entries read (a node's file that came later stays for the next round)."""
    for e in entries:
        (d / f"{e['node']}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: a late node's figures stay
        os.rmdir(d)
