"""Replay results as tables (rich) and one JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from slurm_hetero.errors import InputError
from slurm_hetero.fileio import write_atomic
from slurm_hetero.replay.clockmap import pause_words
from slurm_hetero.replay.fidelity import Fidelity, compare
from slurm_hetero.replay.metrics import ALL, PoolFigures
from slurm_hetero.replay.run import ArmResult
from slurm_hetero.replay.window import Selection

FORMAT = "slurm-hetero-replay"


def _n(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


n = _n  # for merge.py


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def arms_table(results: list[ArmResult]) -> Table:
    return figures_table([(r.arm, r.figures) for r in results],
                         "replay: per arm and pool (measured jobs; waits in trace seconds)")


def figures_table(rows: list[tuple[str, dict[str, PoolFigures]]], title: str) -> Table:
    """One row per arm and pool of (arm name, its figures by pool)."""
    t = Table(title=title)
    for col in ("arm", "pool", "jobs", "started", "AVEbsld", "wait mean", "p50", "p90", "util",
                "killed at limit", "killed early", "failed", "unfinished", "predicted"):
        t.add_column(col, justify="left" if col in ("arm", "pool") else "right")
    for arm, figs in rows:
        for pool, f in figs.items():
            early = f"[red]{f.killed_early}[/red]" if f.killed_early else "0"
            t.add_row(arm if pool == ALL else "", pool, str(f.jobs), str(f.started), _n(f.ave_bsld, 2),
                      _n(f.wait_mean), _n(f.wait_p50), _n(f.wait_p90), _pct(f.utilisation),
                      str(f.killed_at_limit), early, str(f.failed), str(f.unfinished), str(f.predicted))
    return t


def cost_table(results: list[ArmResult]) -> Table:
    t = Table(title="replay's own fidelity and cost")
    for col in ("arm", "speed", "runtime error p50/p90/max (s)", "release lag p50/max (s)",
                "boot s", "replay s", "real s per trace hour", "all ended"):
        t.add_column(col, justify="left" if col == "arm" else "right")
    for r in results:
        d = r.to_json()
        re_, lag = d["runtime_error"], d["release_lag"]
        t.add_row(r.arm, f"x{r.speed:g}",
                  f"{_n(re_['p50_abs'])}/{_n(re_['p90_abs'])}/{_n(re_['max_abs'])}",
                  f"{_n(lag['p50_abs'], 1)}/{_n(lag['max_abs'], 1)}",
                  _n(r.seconds.get("boot"), 1), _n(r.seconds.get("replay"), 1),
                  _n(r.real_s_per_trace_hour), "yes" if r.all_ended else "[red]no[/red]")
    return t


def comparison(results: list[ArmResult], fid: Fidelity | None) -> list[dict[str, Any]]:
    """Each arm against the first (plain, usually): AVEbsld and mean-wait ratios, or why not."""
    out: list[dict[str, Any]] = []
    if len(results) < 2:
        return out
    base = results[0]
    a = base.figures.get(ALL)
    for r in results[1:]:
        b = r.figures.get(ALL)
        if a is None or b is None:
            continue
        v = compare(a, b, fid)
        row: dict[str, Any] = {"arm": r.arm, "against": base.arm, "comparable": v.comparable, "why": v.why}
        if v.comparable and a.ave_bsld and b.ave_bsld is not None:
            row["ave_bsld_ratio"] = b.ave_bsld / a.ave_bsld
        if v.comparable and a.wait_mean and b.wait_mean is not None:
            row["wait_mean_ratio"] = b.wait_mean / a.wait_mean
        out.append(row)
    return out


def print_report(console: Console, results: list[ArmResult], sel: dict[str, Any] | None,
                 fid: Fidelity | None) -> None:
    if sel:
        skipped = ", ".join(f"{n} {why}" for why, n in sel.get("skipped", {}).items()) or "none"
        console.print(f"window: {sel['jobs']} jobs replayed ({sel['measured']} measured); skipped: {skipped}")
    console.print(arms_table(results))
    console.print(cost_table(results))
    for r in results:
        words = pause_words(r.seconds.get("paused", 0.0), r.speed)
        if words:
            console.print(f"{r.arm}: {words}")
    if fid is not None:
        se = fid.start_error
        console.print(f"fidelity x1 vs x{fid.speed:g} on {fid.jobs} jobs: start error p50/p90/max "
                      f"{_n(se['p50_abs'])}/{_n(se['p90_abs'])}/{_n(se['max_abs'])} s; runtime error max "
                      f"{_n(fid.runtime_error_x1['max_abs'])} s at x1, "
                      f"{_n(fid.runtime_error_xk['max_abs'])} s at x{fid.speed:g}; "
                      f"AVEbsld {_n(fid.bsld_x1, 2)} vs {_n(fid.bsld_xk, 2)}")
    for row in comparison(results, fid):
        if "ave_bsld_ratio" in row:
            console.print(f"{row['arm']} ÷ {row['against']}: AVEbsld {row['ave_bsld_ratio']:.2f}"
                          + (f", mean wait {row['wait_mean_ratio']:.2f}" if "wait_mean_ratio" in row else "")
                          + f" ({row['why']})")
        else:
            console.print(f"{row['arm']} vs {row['against']}: not compared: {row['why']}")


def selection_json(sel: Selection) -> dict[str, Any]:
    return {"jobs": len(sel.jobs), "measured": sum(j.measured for j in sel.jobs),
            "accounts": len(sel.accounts), "skipped": dict(sel.skipped)}


def document(results: list[ArmResult], sel: Selection | None, fid: Fidelity | None,
             meta: dict[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": 1, **meta,
            "selection": selection_json(sel) if sel else None,
            "fidelity": fid.to_json() if fid else None,
            "comparison": comparison(results, fid),
            "arms": [r.to_json() for r in results]}


def write(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(path), json.dumps(doc, indent=1) + "\n")


def format_of(path: Path) -> str | None:
    """The `format` a JSON file says it is (None when it is not a JSON object naming one)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read replay results: {e}") from e
    return d.get("format") if isinstance(d, dict) and isinstance(d.get("format"), str) else None


def read_format(path: Path, fmt: str, what: str, writer: str) -> dict[str, Any]:
    """A JSON document whose "format" is `fmt` (exit 2 naming the file otherwise)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}") from e
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise InputError(f"{path}: not a {what.removesuffix('s')} (`{writer}` writes one)")
    return d


def read_document(path: Path) -> dict[str, Any]:
    """One window's replay.json as written (unparsed), checked to be one."""
    return read_format(path, FORMAT, "replay results", "slurm-hetero replay run -o DIR")


def read(path: Path) -> tuple[list[ArmResult], dict[str, Any] | None, Fidelity | None]:
    return parse(read_document(path), path)


def parse(d: dict[str, Any], path: Path) -> tuple[list[ArmResult], dict[str, Any] | None, Fidelity | None]:
    """A replay.json document's arms, selection and fidelity (`path` names it in errors)."""
    try:
        fid = Fidelity.from_json(d["fidelity"]) if d.get("fidelity") else None
        return [ArmResult.from_json(a) for a in d["arms"]], d.get("selection"), fid
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{path}: damaged replay result: {e}") from e
