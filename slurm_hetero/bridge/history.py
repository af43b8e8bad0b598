"""The users' history online: a user's jobs reach the bridge's model within a round of ending.

The exported model holds each user's STATE (predict/features.py) as of its export
(`history_until`); frozen there, a user's burst of 15-second jobs keeps the history of the
user's old 4-minute jobs. The bridge daemon reads the jobs that ended since its last round
from Slurm's accounting (sacct allocation lines; only fields no user writes: id, user,
times, requested limit and CPUs — a user moves their own predictions, and only by running
jobs), recomputes the STATE of the users it saw, and publishes every user with jobs since
the export as a small Lua data file (HISTORY_FILE, beside the snapshot) that the bridge
loads like the snapshot and its model reads before the exported history.

No job counts twice: the export's tail (`model export` writes each user's last jobs and
job count beside the model, TAIL_SUFFIX) holds jobs that ended before `history_until`; the
daemon takes only jobs that ended at or after it, once each by job id. A restarted daemon
reads accounting again from `history_until` (at most LOOKBACK_S back) and publishes the
same; a re-export moves `history_until` and with it what the overlay holds. Without a tail
(a model exported before there was one), a user's state counts the jobs since the lookback.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_atomic
from slurm_hetero.predict import features as F
from slurm_hetero.predict.tail import Tail, UserJobs, read_tail, user_states
from slurm_hetero.slurm.commands import sacct_ended_argv
from slurm_hetero.slurm.parse import NO_NODES, SACCT_DELIMITER
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.sacct import epoch_runner

HISTORY_FILE = "hetero-history.lua"
LOOKBACK_S = 14 * 86400.0  # how far back a (re)started daemon reads accounting
SLACK_S = 300.0  # slurmdbd may book an end a little after it happened: read back this far
MAX_USERS = 5000  # users in the published file (those with the latest jobs): ~0.9 MiB (bridge.lua caps 2 MiB)
# Only the allocation line (-X) and only what Slurm writes: no name, comment or path.
FIELDS = ("JobIDRaw", "User", "State", "Submit", "Start", "End", "ElapsedRaw", "TimelimitRaw", "ReqCPUS",
          "NodeList")
TIMES = ("End", "Start", "Submit", "ElapsedRaw")
ENDED = ("CD", "F", "TO", "CA", "NF", "OOM", "PR", "DL")
# A user name the bridge can compare with job_desc.user_name: what useradd and LDAP allow.
_USER_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@$")
MAX_USER_LEN = 64


def user_ok(name: str) -> bool:
    return 0 < len(name) <= MAX_USER_LEN and all(c in _USER_OK for c in name)

def lua_name(name: str) -> str:
    """A checked user name as a Lua string literal (user_ok names need no escapes)."""
    assert user_ok(name), name
    return f'"{name}"'


def to_lua(states: Mapping[str, Sequence[float]], generated_at: float, until: float) -> str:
    """The overlay as a Lua 5.1 chunk that only returns data, a generation on its first line."""
    rows = "\n".join(f"  [{lua_name(u)}] = {{ {', '.join(repr(float(v)) for v in s)} }},"
                     for u, s in sorted(states.items()) if all(math.isfinite(v) for v in s))
    return (f"-- hetero-history {time.time_ns()}\n"
            f"return {{ generated_at = {int(generated_at)}, history_until = {int(until)}, "
            f"nstate = {len(F.STATE)}, users = {{\n{rows}\n}} }}\n")


# ---- the daemon's part ------------------------------------------------------------------

def _number(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        return math.nan
    return x if math.isfinite(x) else math.nan


class OnlineHistory:
    """Reads the jobs that ended since the last call and publishes the users' state.

    `tail`: the model's tail file (`model export` writes it beside the model). It is read
    again when it changes — a re-export moves `history_until` — and the state is rebuilt from
    it, so the published file always sits on the model the bridge runs (the bridge refuses
    one based on older history)."""

    def __init__(self, runner: Runner, path: Path, tail: Path | None = None, *,
                 lookback_s: float = LOOKBACK_S, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.time):
        self.runner = epoch_runner(runner)
        self.path, self.tail_file, self.log, self.clock = path, tail, log, clock
        self.lookback_s = lookback_s
        self.tail_stamp: tuple[int, int] | None = None
        self.tail: Tail | None = None
        self.skipped = 0
        self.reset()
        self.reload_tail()

    def reset(self) -> None:
        """Start again from the tail (or the lookback): every job is read once more."""
        self.until = max(self.tail.until if self.tail else -math.inf, self.clock() - self.lookback_s)
        self.read_from = self.until
        self.users: dict[str, UserJobs] = {}  # users with jobs since `until`
        self.states: dict[str, list[float]] = {}  # their STATE as last published
        self.touched: set[str] = set()  # users whose jobs changed since
        self.seen: dict[str, float] = {}  # job id -> end, for the slack window's re-reads

    def reload_tail(self) -> None:
        """Read the tail file when it changed (InputError-free: a bad one is logged and the
        last good one kept)."""
        if self.tail_file is None:
            return
        try:
            st = self.tail_file.stat()
        except OSError as e:
            if self.tail_stamp != (-1, -1):
                self.log(f"history: {self.tail_file}: {e.strerror}: the last tail stays")
            self.tail_stamp = (-1, -1)
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self.tail_stamp:
            return
        self.tail_stamp = stamp
        try:
            self.tail = read_tail(self.tail_file)
        except InputError as e:
            self.log(f"history: {e}: the last tail stays")
            return
        self.reset()

    def _user(self, name: str) -> UserJobs:
        u = self.users.get(name)
        if u is None:
            base = self.tail.users.get(name) if self.tail else None
            u = self.users[name] = UserJobs(base.n, list(base.jobs)) if base else UserJobs()
        return u

    def refresh(self) -> int:
        """One round: new ended jobs in, the file out when a user changed. Returns the
        number of jobs taken. A sacct failure raises RuntimeFailure (the caller logs it;
        the next round reads the same span again)."""
        self.reload_tail()
        now = self.clock()
        since = self.read_from - SLACK_S
        argv = sacct_ended_argv(_sacct_time(since), _sacct_time(now), FIELDS, ENDED)
        text = self.runner.out(argv, timeout=60)
        taken = self.take(text)
        self.read_from = now
        # Ids older than the slack window cannot be read again.
        self.seen = {k: e for k, e in self.seen.items() if e >= now - 2 * SLACK_S}
        if taken or not self.path.exists():
            self.publish(now)
        return taken

    def take(self, text: str) -> int:
        """Rows of `sacct_ended_argv(..., FIELDS)` → jobs added (each job id once)."""
        taken = 0
        for line in text.split("\n"):
            if not line:
                continue
            v = dict(zip(FIELDS, line.split(SACCT_DELIMITER), strict=False))
            jid, user = v.get("JobIDRaw", ""), v.get("User", "")
            end, start, submit, runtime = (_number(v.get(f, "")) for f in TIMES)
            if not jid.isdigit() or jid in self.seen or math.isnan(end + start + submit + runtime) \
                    or start <= 0 or end < self.until:
                continue
            if v.get("NodeList", "").strip() in NO_NODES:  # cancelled while pending: it never ran
                continue
            if not user_ok(user):
                self.skipped += 1
                continue
            limit = _number(v.get("TimelimitRaw", ""))
            cpus = _number(v.get("ReqCPUS", ""))
            self.seen[jid] = end
            self.touched.add(user)
            self._user(user).add((end, submit, max(runtime, 1.0),
                                  limit * 60 if limit > 0 else -1.0, cpus if cpus >= 0 else -1.0))
            taken += 1
        return taken

    def publish(self, now: float) -> None:
        """Write the file; only the users whose jobs changed since the last one are computed."""
        self.states.update(user_states({u: self.users[u] for u in self.touched}))
        self.touched.clear()
        users = self.users
        names = list(users)
        if len(names) > MAX_USERS:  # the users with the latest jobs
            names = sorted(names, key=lambda u: users[u].jobs[-1][0] if users[u].jobs else 0)[-MAX_USERS:]
        states = {u: self.states[u] for u in names if u in self.states}
        write_atomic(self.path, to_lua(states, now, self.until))


def _sacct_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
