"""How good is `slurm-hetero why` at a job's submission? Issue 37's measured part: on a replay
window (a CPU log: KTH-SP2; the Alibaba GPU pods), for every measured job that waited more
than --min-wait trace minutes, the start estimates `why` gave at submission against the real
start (median and p90 absolute error, with Slurm's own `squeue --start` estimate as the
baseline, n, the fraction with no estimate), and how often why's stated cause matches the
reason Slurm recorded.

    .venv/bin/python benchmarks/why_estimates.py [--trace kth|alibaba] [--hours 2] [--speed 50]
        [--every 2] [--within 5] [--min-wait 10] [--drain-hours 4] [--arm ARM] [--first 0]
        [--users root|local] [--workdir DIR] [--capture DIR] [--json [OUT]]
    .venv/bin/python benchmarks/why_estimates.py --from-json OUT   (a saved run's figures, again)
    .venv/bin/python benchmarks/why_estimates.py --from-json OUT --recompute DIR
        (why's estimates of that run again, with this code, from the inputs --capture DIR kept)

Windows. kth: the campaign's `--pick band` rule (replay_kth.py --band 0.8,1.5 --min-jobs 20
--of 10, 2 h windows, 1 h warm-up; --first K its K-th window), replayed for --hours from that
window's start, after its 1 h warm-up; arm `bridge` (a runtime model trained on the jobs that
ended before the warm-up). alibaba: replay_alibaba.py's first window (the busiest 1 h, pods
still running at its start carried over), arm `bridge-nomodel` (the trace has no users). One
arm only: this measures `why`, not a scheduler. `--arm plain` (Slurm as it comes: each pod
asks its trace's own model) is the one where pods wait on that trace: with `--accel` they
seldom do. Drain until every measured job started or --drain-hours.

The sampler (a `run_arm` watch: a thread) polls every --every real seconds: `squeue --start`
of every pending job (`%i|%S|%r`, times as epoch seconds), and for each job released less than
--within trace minutes ago that still lacks a sample, why's answer built from one `squeue
--json`, `sinfo` and (for a limit reason) `sacctmgr` read per poll, exactly as
`slurm-hetero why JOBID --json` builds it (reports.why.build_why), with `now` the cluster's
time. A job counts from its first poll after its release (the replay submits every job held
and releases it at its trace time: a held job is not yet submitted). Per job the sampler keeps,
once: the first non-empty estimate of each source (why's "slurm", why's "ours", squeue
--start) seen within --within of that first poll, and why's cause (its reason code) at the
first poll where Slurm had looked at the job (reason not `None`), or `None` if it never did
within --within; and, while the job waits, the last pending reason squeue showed (`%r`, `None`
and holds left out): the reason Slurm recorded. With why's ours, from the same answer: its
range (not before, at the latest) and what it was made from (`used`: the jobs ahead, each
running job of the pool with its ends by limit, own limit, p50, p90 and the one assumed).
--capture DIR also keeps every why call's inputs, so that `--from-json OUT --recompute DIR`
gives why's figures of that run again with other code (build_why is pure).

Clocks. slurmctld, every client command and each job run on the dev cluster's accelerated
clock (libfaketime, x--speed); this process runs on real time. Every time compared here is
on the cluster's clock: Slurm's estimates and reasons come from commands run through the
cluster's runner (which joins its clock), why is given `now` = the clock map's faked time at
the poll (replay.clockmap: faked = faked0 + speed x (real - real0), calibrated by run_arm),
and the replay's outcomes (due time = t0 + the job's trace offset, start from sacct) are
faked epoch seconds too. A faked second is a trace second, so every error below is in trace
seconds (printed in trace minutes); only --every and the run's cost are real seconds.

Figures (jobs measured, started, waited > --min-wait): per source, error = |estimate - real
start| (the first start of a requeued job), median and p90 over the jobs that got an
estimate, n, and the fraction of jobs with none (no sample, or the source gave none within
--within); also the median signed error (estimate - start: > 0 too late); the same for ours'
range, and how often the real start fell within it. A job that waited
that long and never started (the replay stopped first) has no error; per source, how many of
those had an estimate already past when the replay stopped (known too early). Cause match: over
the same jobs with both a cause and a recorded reason, the fraction where why's reason code
at submission equals the last pending reason Slurm showed, exactly (`Resources` = `Resources`;
`Priority` vs `Resources` is a miss), and where their kinds (reports.why.explain_reason: wait,
limit, hold, ...) agree.

Needs root and the dev cluster's packages (`make deps`); one run takes about
(1 + --hours + drain) x 3600 / --speed real seconds plus boot, on a quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_json_atomic
from slurm_hetero.replay.clockmap import ClockMap
from slurm_hetero.replay.metrics import Outcome
from slurm_hetero.reports.why import (
    Inputs,
    QJob,
    build_why,
    explain_reason,
    limit_ref,
    parse_limit_rows,
    parse_qos_limits,
    parse_queue,
)
from slurm_hetero.site import Site
from slurm_hetero.slurm.commands import (
    ASSOC_LIMIT_FIELDS,
    sacctmgr_assoc_limits_argv,
    sacctmgr_qos_limits_argv,
    sinfo_capacity_argv,
    squeue_start_all_argv,
)
from slurm_hetero.slurm.parse import StartEstimate, parse_squeue_start
from slurm_hetero.slurm.runner import Runner
from slurm_hetero.slurm.squeue import squeue_json_argv

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SOURCES = ("why_slurm", "why_ours", "squeue_start")
# why's range around ours, from the same answer as ours (a sample settles without them).
RANGE = ("why_ours_earliest", "why_ours_latest")
INPUTS = "why-inputs.jsonl.gz"  # --capture: each why call's inputs
SITES = {t: ROOT / "tests" / "data" / "replay" / f"{t}-site.yaml" for t in ("kth", "alibaba")}
NOT_RECORDED = frozenset({"None"})  # not a reason Slurm waits for: it has not looked yet


def held(reason: str) -> bool:
    """A job the replay holds until its time (or anyone holds): not submitted yet, for us."""
    return reason.startswith("JobHeld")


@dataclass
class Sample:
    """What one job was told at (close to) its submission, and the reason Slurm kept."""

    job_id: str
    first_seen: float  # faked time of the first poll that saw it pending and released
    why_at: float | None = None  # faked time of why's first answer
    cause: str | None = None  # why's reason code (the first answer where Slurm had looked)
    cause_at: float | None = None
    estimates: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(SOURCES + RANGE))
    estimated_at: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(SOURCES + RANGE))
    ours_basis: str | None = None  # why's words for its own estimate (or why there is none)
    last_reason: str | None = None  # the last pending reason squeue showed while it waited
    reasons: list[str] = field(default_factory=list)  # every distinct reason, in order seen
    # What why's kept "ours" was made from (`used`): see `used_by`.
    used: dict[str, Any] | None = None

    def settled(self) -> bool:
        return self.cause is not None and all(self.estimates.get(k) is not None for k in SOURCES)

    def note(self, source: str, value: float | None, now: float) -> None:
        if value is not None and self.estimates.get(source) is None:
            self.estimates[source], self.estimated_at[source] = value, now

    def saw_reason(self, reason: str) -> None:
        if reason in NOT_RECORDED or held(reason):
            return
        self.last_reason = reason
        if not self.reasons or self.reasons[-1] != reason:
            self.reasons.append(reason)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Sample:
        return cls(**d)


class Sampler:
    """Polls the cluster while an arm replays (`watch` is a run_arm Watch)."""

    def __init__(self, site: Site, every_s: float = 2.0, within_s: float = 300.0,
                 capture: Path | None = None, say: Callable[[str], None] | None = None) -> None:
        self.site, self.every_s, self.within_s, self.capture, self.say = site, every_s, within_s, capture, say
        self.samples: dict[str, Sample] = {}
        self.polls = 0
        self.poll_s: list[float] = []  # real seconds each poll took
        self.errors: list[str] = []
        self._captured = 0
        if capture is not None:
            (capture / INPUTS).unlink(missing_ok=True)  # this run's calls only

    def watch(self, runner: Runner, clock: ClockMap) -> Callable[[], None]:
        stop = threading.Event()
        epoch = dataclasses.replace(runner, extra_env={**runner.extra_env, "SLURM_TIME_FORMAT": "%s"})

        def loop() -> None:
            while not stop.is_set():
                t = time.monotonic()
                try:
                    self.poll(epoch, clock)
                except (RuntimeFailure, ValueError) as e:
                    self.errors.append(str(e)[:200])
                self.poll_s.append(time.monotonic() - t)
                stop.wait(max(0.0, self.every_s - (time.monotonic() - t)))

        thread = threading.Thread(target=loop, name="why-sampler", daemon=True)
        thread.start()

        def end() -> None:
            stop.set()
            thread.join(timeout=120)

        return end

    def poll(self, runner: Runner, clock: ClockMap) -> None:
        """One look: squeue --start for everyone, why for the jobs still owed a sample."""
        self.polls += 1
        text = runner.out(squeue_start_all_argv(), timeout=60)
        now = clock.now()
        starts = parse_squeue_start(text)
        self._keep(text, starts)
        due: list[str] = []
        for jid, est in starts.items():
            if held(est.reason):
                continue
            s = self.samples.get(jid)
            if s is None:
                s = self.samples[jid] = Sample(jid, now)
            s.saw_reason(est.reason)
            if now - s.first_seen <= self.within_s and not s.settled():
                s.note("squeue_start", est.start, now)
                due.append(jid)
        if due:
            self.ask_why(runner, clock, due, starts)

    def ask_why(self, runner: Runner, clock: ClockMap, due: list[str],
                starts: dict[str, StartEstimate]) -> None:
        jobs_text = runner.out(squeue_json_argv(), timeout=60)
        jobs = parse_queue(jobs_text)
        sinfo = runner.out(sinfo_capacity_argv(), timeout=60)
        by_id = {str(j.job_id): j for j in jobs}
        wanted = [by_id[jid] for jid in due if jid in by_id and by_id[jid].pending]
        qos, assoc = self._limits(runner, wanted)
        now = clock.now()
        for job in wanted:
            est = starts.get(str(job.job_id))
            answer(self.samples[str(job.job_id)], job, jobs, sinfo, qos, assoc,
                   est.start if est else None, self.site, now)
        if self.capture is not None and wanted:
            self._keep_inputs(now, [str(j.job_id) for j in wanted], jobs_text, sinfo, qos, assoc,
                              {str(j.job_id): starts[str(j.job_id)].start for j in wanted
                               if str(j.job_id) in starts})

    def _keep_inputs(self, now: float, due: list[str], jobs_text: str, sinfo: str,
                     qos: dict[str, dict[str, str]] | None, assoc: dict[str, list[dict[str, str]]],
                     starts: dict[str, float | None]) -> None:
        """--capture: every why call's inputs, one JSON line each, so that `--recompute` can
        build why's answers again offline (build_why is pure) with other code."""
        assert self.capture is not None
        self.capture.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"now": now, "due": due, "squeue_json": jobs_text, "sinfo": sinfo, "qos": qos,
                           "assoc": assoc, "starts": starts})
        with gzip.open(self.capture / INPUTS, "at", encoding="utf-8") as f:
            f.write(line + "\n")

    def _limits(self, runner: Runner, jobs: Iterable[QJob]) -> tuple[dict[str, dict[str, str]] | None,
                                                                       dict[str, list[dict[str, str]]]]:
        """The QoS rows and each account's association rows, read once a poll where a limit holds."""
        limited = [j for j in jobs if limit_ref(j.reason) is not None]
        if not limited:
            return None, {}
        qos = parse_qos_limits(runner.out(sacctmgr_qos_limits_argv(), timeout=60))
        assoc = {a: parse_limit_rows(runner.out(sacctmgr_assoc_limits_argv(a), timeout=60),
                                     ASSOC_LIMIT_FIELDS) for a in {j.account for j in limited if j.account}}
        return qos, assoc

    def _keep(self, text: str, starts: dict[str, StartEstimate]) -> None:
        """--capture: a few real answers with an estimate and a reason, for the parser's tests."""
        if self.capture is None or self._captured >= 5:
            return
        ests = starts.values()
        if any(e.start for e in ests) and any(e.reason not in NOT_RECORDED for e in ests):
            self.capture.mkdir(parents=True, exist_ok=True)
            (self.capture / f"squeue-start-{self._captured}.txt").write_text(text)
            self._captured += 1


def answer(s: Sample, job: QJob, jobs: list[QJob], sinfo: str | None, qos: dict[str, dict[str, str]] | None,
           assoc: dict[str, list[dict[str, str]]], slurm_start: float | None, site: Site, now: float) -> None:
    """why's answer for `job` as `slurm-hetero why JOBID --json` builds it, noted in its sample."""
    start_text = f"{job.job_id} {int(slurm_start)}\n" if slurm_start else None
    w = build_why(Inputs(job, None, jobs, sinfo, qos, assoc.get(job.account), start_text), site, now=now)
    if s.why_at is None:
        s.why_at = now
    if w.reason is not None and s.cause is None and w.reason.code not in NOT_RECORDED:
        s.cause, s.cause_at = w.reason.code, now
    note_why(s, w.as_dict(), now)


MAX_USED_RUNNING = 40  # running jobs kept per sample (the earliest expected ends)


def used_by(d: dict[str, Any]) -> dict[str, Any]:
    """What one why answer's estimates were made from (its `--json` dict): both estimates, ours
    as a range where it gives one, the jobs ahead of it in its pool, and each running job of
    the pool with the ends it was assumed to have (limit, p50, p90, the one used).

    >>> used_by({"estimates": {"ours": 5.0, "slurm": 9.0, "ahead": 2}, "pool": {"key": "cpu@x86_64",
    ...          "running": [{"job": 3, "devices": 4, "start": 0.0, "ends_by_limit": 9.0, "ends_p50": 4.0,
    ...                       "ends_p90": 8.0, "expected_end": 4.0, "user": "u"}]}})["running"][0]["job"]
    3
    """
    e, pool = d.get("estimates") or {}, d.get("pool") or {}
    keep = ("job", "devices", "start", "ends_by_limit", "ends_p50", "ends_p90", "expected_end", "likely_end",
            "limit_shortened_to_p90", "ends_by_own_limit")
    return {**{k: e.get(k) for k in ("ours", "slurm", "ahead", "ours_earliest", "ours_latest")},
            "pool": pool.get("key"),
            "running": [{k: h.get(k) for k in keep} for h in (pool.get("running") or [])[:MAX_USED_RUNNING]]}


def note_why(s: Sample, d: dict[str, Any], now: float) -> None:
    """Keep the first non-empty estimates of one why answer (`--json` dict) in `s`, and what
    ours was made from while ours is not kept yet."""
    e = d.get("estimates") or {}
    s.note("why_slurm", e.get("slurm"), now)
    if s.estimates["why_ours"] is None:  # the basis of the estimate kept, or of its absence
        s.ours_basis = e.get("ours_basis")
        s.used = used_by(d)
        if e.get("ours") is not None:
            s.note("why_ours_earliest", e.get("ours_earliest"), now)
            s.note("why_ours_latest", e.get("ours_latest"), now)
    s.note("why_ours", e.get("ours"), now)


def recompute(capture: Path, saved: dict[str, Any], site: Site) -> dict[str, Sample]:
    """why's part of a saved run's samples again, from the inputs --capture kept, with this
    code: each captured call in order, for the jobs it asked about. squeue --start's estimates
    and the reasons Slurm showed are the saved ones (they are Slurm's, not why's)."""
    out: dict[str, Sample] = {}
    for k, v in saved["samples"].items():
        old = Sample.from_json(v)
        new = Sample(old.job_id, old.first_seen, last_reason=old.last_reason, reasons=old.reasons)
        new.estimates["squeue_start"] = old.estimates["squeue_start"]
        new.estimated_at["squeue_start"] = old.estimated_at["squeue_start"]
        out[k] = new
    with gzip.open(capture / INPUTS, "rt", encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            jobs = parse_queue(c["squeue_json"])
            by_id = {str(j.job_id): j for j in jobs}
            for jid in c["due"]:
                if jid in by_id and jid in out:
                    answer(out[jid], by_id[jid], jobs, c["sinfo"], c["qos"], c["assoc"] or {},
                           c["starts"].get(jid), site, c["now"])
    return out


# ---- figures (pure) -----------------------------------------------------------------------------


def first_start(o: Outcome) -> float | None:
    """The job's first start (a requeued job's first incarnation), on the cluster's clock."""
    return o.earlier[0][0] if o.earlier else o.start


def error_figures(errors: list[float], signed: list[float], jobs: int) -> dict[str, Any]:
    """
    >>> error_figures([60.0, 120.0, 600.0], [60.0, -120.0, 600.0], 4)["p50_abs_s"]
    120.0
    """
    if not errors:
        return {"n": 0, "jobs": jobs, "no_estimate": 1.0 if jobs else None, "p50_abs_s": None,
                "p90_abs_s": None, "p50_signed_s": None}
    return {"n": len(errors), "jobs": jobs, "no_estimate": 1 - len(errors) / jobs,
            "p50_abs_s": float(np.percentile(errors, 50)), "p90_abs_s": float(np.percentile(errors, 90)),
            "p50_signed_s": float(np.percentile(signed, 50))}


def figures(samples: dict[str, Sample], outs: Iterable[Outcome], min_wait_s: float = 600.0,
            end_now: float | None = None) -> dict[str, Any]:
    """The issue's figures over the measured jobs that waited more than `min_wait_s` and started
    (see the module's docstring); those that waited that long without starting are counted."""
    waited, never = [], []
    for o in outs:
        if not o.measured:
            continue
        start = first_start(o)
        if start is None:
            if end_now is not None and end_now - o.due > min_wait_s:
                never.append(o)
        elif start - o.due > min_wait_s:
            waited.append((o, start))
    out: dict[str, Any] = {"min_wait_s": min_wait_s, "jobs": len(waited), "never_started": len(never),
                           "sampled": sum(1 for o, _ in waited if o.job_id in samples)}
    for src in SOURCES + RANGE:
        errs, signed = [], []
        for o, start in waited:
            s = samples.get(o.job_id)
            est = s.estimates.get(src) if s else None
            if est is not None:
                errs.append(abs(est - start))
                signed.append(est - start)
        out[src] = error_figures(errs, signed, len(waited))
        # A job never started: its estimate is known wrong only where it had passed at the stop.
        ests = [e for o in never if (s := samples.get(o.job_id)) is not None
                and (e := s.estimates.get(src)) is not None]
        out[src]["never_started_with_estimate"] = len(ests)
        passed = [e for e in ests if end_now is not None and e < end_now]
        out[src]["never_started_estimate_passed"] = len(passed)
    # How often the real start fell in why's range: [earliest, latest], and [earliest, ours].
    ranged = [(e, s.estimates.get("why_ours") or e, s.estimates.get("why_ours_latest"), start)
              for o, start in waited if (s := samples.get(o.job_id)) is not None
              and (e := s.estimates.get("why_ours_earliest")) is not None]
    n = len(ranged) or None
    out["range"] = {
        "n": len(ranged),
        "in_earliest_latest": (sum(e <= t and (lt is None or t <= lt) for e, _, lt, t in ranged) / n
                               if n else None),
        "in_earliest_ours": sum(e <= t <= o for e, o, _, t in ranged) / n if n else None,
        "before_earliest": sum(t < e for e, _, _, t in ranged),
    }
    pairs = [(s.cause, s.last_reason) for o, _ in waited if (s := samples.get(o.job_id)) is not None
             and s.cause is not None and s.last_reason is not None]
    kind = {code: explain_reason(code).kind for pair in pairs for code in pair}
    out["cause"] = {
        "n": len(pairs),
        "match": sum(a == b for a, b in pairs) / len(pairs) if pairs else None,
        "kind_match": sum(kind[a] == kind[b] for a, b in pairs) / len(pairs) if pairs else None,
        "no_cause": len(waited) - len(pairs),
        "pairs": {f"{a} -> {b}": n for (a, b), n in collections.Counter(pairs).most_common()},
    }
    return out


def minutes(s: float | None) -> str:
    """
    >>> minutes(90.0), minutes(None)
    ('1.5', '-')
    """
    return "-" if s is None else f"{s / 60:.1f}"


def show(fig: dict[str, Any]) -> None:
    print(f"jobs measured, started, waited > {fig['min_wait_s'] / 60:g} trace min: {fig['jobs']} "
          f"(sampled {fig['sampled']}); waited that long and never started: {fig['never_started']}")
    print("  estimate           n   no estimate   |error| p50   p90 (trace min)   signed p50")
    for src in SOURCES + tuple(k for k in RANGE if fig.get(k, {}).get("n")):
        f = fig[src]
        no = f"{100 * f['no_estimate']:10.0f}%" if f["no_estimate"] is not None else "          -"
        print(f"  {src:17s} {f['n']:3d}  {no}   {minutes(f['p50_abs_s']):>10s} {minutes(f['p90_abs_s']):>6s}"
              f"   {minutes(f['p50_signed_s']):>18s}   never started: {f['never_started_with_estimate']} "
              f"with an estimate, {f['never_started_estimate_passed']} of them already past at the stop")
    r = fig.get("range")
    if r and r["n"]:
        print(f"  the real start within why's range: [earliest, latest] "
              f"{100 * r['in_earliest_latest']:.0f}%, [earliest, ours] {100 * r['in_earliest_ours']:.0f}% "
              f"of {r['n']}; "
              f"before the earliest: {r['before_earliest']}")
    c = fig["cause"]
    rate = f"{100 * c['match']:.0f}%" if c["match"] is not None else "-"
    krate = f"{100 * c['kind_match']:.0f}%" if c["kind_match"] is not None else "-"
    print(f"  cause: why's reason at submission = Slurm's last pending reason: {rate} of {c['n']} "
          f"(same kind: {krate}; no cause or no recorded reason: {c['no_cause']})")
    for pair, n in list(c["pairs"].items())[:8]:
        print(f"    {pair}: {n}")


# ---- windows and the run ------------------------------------------------------------------------


def kth_window(a: argparse.Namespace) -> tuple[Any, Any, Any, Path | None, str]:
    from slurm_hetero.jobs.trace import KTH_SP2
    from slurm_hetero.replay.run import train_model
    from slurm_hetero.replay.trace import read_trace
    from slurm_hetero.replay.window import Capacity, Window, in_band, select
    from slurm_hetero.site import load_site

    site = load_site(SITES["kth"])
    df = read_trace(KTH_SP2)
    lo, hi = float(df["submit"].min()), float(df["submit"].max())
    warm = 1.0
    found = in_band(df, Capacity.of(site), 2.0, 10, (0.8, 1.5), min_jobs=20,
                    not_before=lo + 0.1 * (hi - lo) + warm * 3600, warmup_hours=warm, gap_s=warm * 3600)
    if a.first >= len(found):
        raise InputError(f"--first {a.first}: the band rule found {len(found)} windows")
    start, ratio = found[a.first]
    w = Window(start, a.hours, warm)
    sel = select(df, w, Capacity.of(site))
    model = None
    if a.arm_obj.model:
        model = train_model(df, w, a.base / "predict.lua", users=a.users)
    return site, sel, w, model, f"KTH-SP2 band window {a.first} (start {start}, demand/capacity {ratio:.2f})"


def alibaba_window(a: argparse.Namespace) -> tuple[Any, Any, Any, Path | None, str]:
    from slurm_hetero.replay.trace import read_trace_counted, select_for
    from slurm_hetero.replay.window import Capacity, Window, busiest
    from slurm_hetero.site import load_site

    site = load_site(SITES["alibaba"])
    df, _ = read_trace_counted(ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023-pods.csv")
    found = busiest(df, Capacity.of(site), 1.0, a.first + 1, carry_over=True)
    start, demand = found[a.first]
    w = Window(start, a.hours)
    return site, select_for(df, w, site), w, None, (f"Alibaba GPU pods busiest window {a.first} "
                                                     f"(start {start}, demand/capacity {demand:.2f})")


WINDOWS = {"kth": (kth_window, "bridge"), "alibaba": (alibaba_window, "bridge-nomodel")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", choices=tuple(WINDOWS), default="kth")
    p.add_argument("--first", type=int, default=0, help="the K-th window of the trace's rule")
    p.add_argument("--hours", type=float, default=2.0, help="trace hours replayed from the window's start")
    p.add_argument("--drain-hours", type=float, default=4.0)
    p.add_argument("--speed", type=float, default=50.0)
    p.add_argument("--every", type=float, default=2.0, help="real seconds between polls")
    p.add_argument("--within", type=float, default=5.0,
                   help="trace minutes after its first poll a job's estimates may come from")
    p.add_argument("--min-wait", type=float, default=10.0, help="trace minutes a job waited, more than")
    p.add_argument("--arm", default=None, help="[default: bridge for kth, bridge-nomodel for alibaba]")
    p.add_argument("--users", choices=("root", "local"), default="root")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--capture", type=Path, default=None,
                   help=f"keep a few raw squeue --start answers there, and every why call's inputs "
                   f"({INPUTS})")
    p.add_argument("--json", type=Path, nargs="?", const=Path("-"), default=None,
                   help="write the run there [default: benchmarks/results/why-estimates-TRACE.json]")
    p.add_argument("--from-json", type=Path, default=None, help="print a saved run's figures again")
    p.add_argument("--recompute", type=Path, default=None,
                   help="with --from-json: why's estimates again, with this code, from a --capture DIR")
    a = p.parse_args()
    if a.from_json:
        d = json.loads(a.from_json.read_text())
        outs = [Outcome(**{**o, "earlier": tuple(tuple(e) for e in o.get("earlier", ()))})
                for o in d["outcomes"]]
        samples = {k: Sample.from_json(v) for k, v in d["samples"].items()}
        if a.recompute:
            from slurm_hetero.site import load_site
            samples = recompute(a.recompute, d, load_site(SITES[d["trace"]]))
        show(figures(samples, outs, d["figures"]["min_wait_s"], d["end_now"]))
        return 0
    if a.recompute:
        print("--recompute: give the saved run with --from-json", file=sys.stderr)
        return 2
    from slurm_hetero.devcluster.replay import DevReplayCluster
    from slurm_hetero.replay.run import ARMS, run_arm

    window_of, default_arm = WINDOWS[a.trace]
    arm_name = a.arm or default_arm
    if arm_name not in ARMS:
        print(f"--arm {arm_name}: choose one of {', '.join(ARMS)}", file=sys.stderr)
        return 2
    a.arm_obj = ARMS[arm_name]
    a.base = a.workdir or Path(tempfile.mkdtemp(prefix=f"why-estimates-{a.trace}-", dir="/var/tmp"))
    a.base.mkdir(parents=True, exist_ok=True)
    try:
        site, sel, w, model, label = window_of(a)
    except InputError as e:
        print(e, file=sys.stderr)
        return 2
    n_meas = sum(j.measured for j in sel.jobs)
    print(f"{label}: {a.hours:g} h, {n_meas} jobs measured of {len(sel.jobs)} replayed, arm {arm_name}, "
          f"x{a.speed:g}, poll every {a.every:g} real s, in {a.base}", flush=True)
    sampler = Sampler(site, a.every, a.within * 60, a.capture)
    t = time.monotonic()
    res = run_arm(DevReplayCluster, a.base / arm_name, site, sel, w, a.arm_obj, a.speed, model,
                  say=lambda m: print(m, flush=True), drain_hours=a.drain_hours, users=a.users,
                  drain_until="started", watch=sampler.watch)
    real_s = time.monotonic() - t
    fig = figures(sampler.samples, res.outcomes, a.min_wait * 60, res.end_now)
    polls = sorted(sampler.poll_s)
    p50 = statistics.median(polls) if polls else 0.0
    print(f"{real_s:.0f} real s; {sampler.polls} polls (p50 {p50:.2f} s, "
          f"max {max(polls, default=0):.2f} s), {len(sampler.errors)} failed; "
          f"{len(sampler.samples)} jobs sampled")
    show(fig)
    if a.json is not None:
        out = RESULTS / f"why-estimates-{a.trace}.json" if str(a.json) == "-" else a.json
        write_json_atomic(str(out), {
            "trace": a.trace, "window": label, "arm": arm_name, "speed": a.speed, "hours": a.hours,
            "command": " ".join(["benchmarks/why_estimates.py", *sys.argv[1:]]),
            "every_real_s": a.every, "within_trace_s": a.within * 60, "real_s": round(real_s, 1),
            "polls": sampler.polls, "poll_s_p50": statistics.median(polls) if polls else None,
            "poll_errors": sampler.errors[:20], "t0": res.t0, "end_now": res.end_now,
            "figures": fig, "samples": {k: dataclasses.asdict(v) for k, v in sampler.samples.items()},
            "outcomes": [o.__dict__ for o in res.outcomes if o.measured]}, indent=1)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
