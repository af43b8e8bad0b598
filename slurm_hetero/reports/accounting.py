"""Pure parsers: sacct/squeue text → the job table (no Slurm is run here).

sacct is asked for FIELDS with `-P --delimiter=US` (ASCII unit separator): job names and
admin comments may hold `|`, and older bridge decisions did (`"pool":"a100-80gb|x86_64"`).
AdminComment is last, so even a stray separator only lengthens that one field. Times come
as epoch seconds (SLURM_TIME_FORMAT=%s). Every string parser (TRES, node lists, TotalCPU,
admin comments) runs once per distinct value: a history repeats most of them.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from ClusterShell.NodeSet import NodeSet, NodeSetParseError
from pandas.api.types import union_categoricals

from slurm_hetero.reports import jobs as J
from slurm_hetero.site.catalog import AccelModel
from slurm_hetero.site.model import Site
from slurm_hetero.slurm.comment import parse_comment
from slurm_hetero.slurm.parse import SACCT_DELIMITER, parse_tres

DELIM = SACCT_DELIMITER  # job names and comments may hold "|"
FIELDS = ("JobIDRaw", "JobID", "JobName", "User", "Account", "Partition", "QOS", "State", "Reason",
          "Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "NCPUS", "TotalCPU",
          "AllocTRES", "NodeList", "ConsumedEnergyRaw", "AdminComment")
SQUEUE_FORMAT = "%i|%P|%q|%u|%a|%V|%r"
SQUEUE_FIELDS = ("job", "partition", "qos", "user", "account", "submit", "reason")
NO_NODES = ("", "None assigned", "(null)")
# Slurm prints NO_VAL64-like sentinels for energy it did not measure.
_ENERGY_MAX = 1e15
_CPU_TIME = re.compile(r"^(?:(?:(\d+)-)?(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
# Parsed straight to floats by the C parser; these tokens (and only these) mean "unknown".
_NUMERIC = ("Submit", "Eligible", "Start", "End", "ElapsedRaw", "TimelimitRaw", "NCPUS",
            "ConsumedEnergyRaw")
_UNKNOWN = ["Unknown", "None", "", "UNLIMITED", "Partition_Limit", "INVALID", "N/A"]
# Mostly unique per job: plain objects; every other column repeats and is read as categorical.
_UNIQUE = ("JobIDRaw", "JobID", "JobName")
_DTYPES: dict[str, str | type] = {
    f: "float64" if f in _NUMERIC else object if f in _UNIQUE else "category" for f in FIELDS}


@dataclass(frozen=True)
class RawSacct:
    frame: pd.DataFrame  # FIELDS (numbers as floats), allocation lines only, one per JobIDRaw
    skipped: int  # lines that had fewer fields than asked for


def read_sacct(texts: Iterable[str]) -> RawSacct:
    """Parse `sacct -n -P --delimiter=US -o FIELDS` outputs (e.g. one per day chunk).

    Step lines (JobID with a dot) are dropped: the allocation line already sums their
    TotalCPU. A job active on several days appears in several chunks; the last wins."""
    frames: list[pd.DataFrame] = []
    skipped = 0
    for text in texts:
        body = text if text.endswith("\n") else text + "\n"
        if not text.strip():
            continue
        # Chunk by chunk (not one joined text): a third less peak memory for the same time.
        if _well_formed(body):
            frames.append(_read_fast(body))
        else:
            frame, bad = _read_by_hand(body)
            frames.append(frame)
            skipped += bad
    if not frames:
        return RawSacct(_read_by_hand("")[0], skipped)
    raw = _concat(frames)
    raw = raw[~raw["JobID"].str.contains(".", regex=False)]
    raw = raw.drop_duplicates("JobIDRaw", keep="last").reset_index(drop=True)
    return RawSacct(raw, skipped)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate frames keeping categoricals categorical (pd.concat would fall back to
    objects whenever two frames saw different categories)."""
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    cols: dict[str, object] = {}
    for f in FIELDS:
        parts = [fr[f] for fr in frames]
        if _DTYPES[f] == "category":
            cols[f] = union_categoricals([p.astype("category") for p in parts], ignore_order=True)
        else:
            cols[f] = np.concatenate([p.to_numpy() for p in parts])
    return pd.DataFrame(cols)


def _well_formed(body: str) -> bool:
    """Every line has exactly len(FIELDS) fields iff the separators add up."""
    return body.count(DELIM) == (len(FIELDS) - 1) * body.count("\n") and "\n\n" not in body


def _read_fast(body: str) -> pd.DataFrame:
    try:
        return pd.read_csv(io.StringIO(body), sep=DELIM, header=None, names=list(FIELDS), dtype=_DTYPES,
                           keep_default_na=False, na_values={f: _UNKNOWN for f in _NUMERIC},
                           quoting=csv.QUOTE_NONE, engine="c")
    except (ValueError, pd.errors.EmptyDataError):
        return _read_by_hand(body)[0]  # an unexpected token in a number column: made unknown


def _read_by_hand(text: str) -> tuple[pd.DataFrame, int]:
    """Split each line: extra separators stay in AdminComment, short lines are skipped."""
    rows = [ln.split(DELIM, len(FIELDS) - 1) for ln in text.splitlines() if ln]
    good = [r for r in rows if len(r) == len(FIELDS)]
    frame = pd.DataFrame(good, columns=list(FIELDS), dtype=object)
    for f in FIELDS:
        if f in _NUMERIC:
            frame[f] = pd.to_numeric(frame[f], errors="coerce").astype("float64")
        elif _DTYPES[f] == "category":
            frame[f] = frame[f].astype("category")
    return frame, len(rows) - len(good)


def cpu_seconds(text: str) -> float:
    """sacct's TotalCPU ([D-][HH:]MM:SS[.mmm]) in seconds; NaN when unreadable.

    >>> cpu_seconds("1-02:03:04"), cpu_seconds("00:00.997"), cpu_seconds("")
    (93784.0, 0.997, nan)
    """
    m = _CPU_TIME.match(text.strip())
    if not m:
        return math.nan
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)


def req_kind(accel: str) -> str:
    """The form of a --accel request: `any`, `units` or `named` (model, vendor or stack).

    >>> req_kind("any:2"), req_kind("units=4"), req_kind("nvidia:2,mem>=80G")
    ('any', 'units', 'named')
    """
    a = accel.strip().lower()
    if not a:
        return ""
    if a.startswith("any"):
        return "any"
    return "units" if a.startswith("units") else "named"


def _num(v: Any) -> float:
    if type(v) is int or type(v) is float:  # exact types: a JSON true is not a number
        return float(v) if math.isfinite(v) else math.nan
    return math.nan


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _device_figures(devices: Any) -> tuple[list[float], list[float]]:
    """(energy_j, util) of each device entry that has them."""
    if not isinstance(devices, list):
        return [], []
    rows = [x for x in devices if isinstance(x, dict)]
    energy = [e for e in (_num(x.get("energy_j")) for x in rows) if not math.isnan(e)]
    util = [u for u in (_num(x.get("util")) for x in rows) if not math.isnan(u)]
    return energy, util


def parse_admin_comment(comment: str) -> dict[str, Any]:
    """The JSON in an AdminComment: the bridge's decision and what later stages added.

    Anything that is not a JSON object (an admin's free text, a truncated record) gives {};
    each key is taken only when it has the expected type; "hetero" says the bridge decided. Energy comes
    from the node agent's "node_energy" (per node: energy_j, devices, util, the policy it
    applied) or from top-level "energy_j"/"devices". Utilisation is a fraction (0..1) as
    the agent records it, or a percentage if any value is above 1; it is returned in %.
    Once a job has ended, sacctmgr rewrites every double quote as a backquote: undone here
    (the decision's values never hold a quote of their own).

    >>> parse_admin_comment('{"hetero":1,"accel":"any:2","pred":{"p50":60}}')["pred_p50"]
    60.0
    >>> parse_admin_comment('{`hetero`:1,`node_energy`:{`n1`:{`energy_j`:5.5,`util`:0.5}}}')["energy_j"]
    5.5
    >>> parse_admin_comment("maintenance: rerun"), parse_admin_comment('{"hetero":1,')
    ({}, {})
    """
    d = parse_comment(comment)
    if not d:
        return {}
    pred = d.get("pred")
    if not isinstance(pred, dict):
        pred = {}
    energy = _num(d.get("energy_j"))
    util = _num(d.get("util"))
    energies: list[float] = []
    utils: list[float] = [] if math.isnan(util) else [util]
    if math.isnan(energy) or math.isnan(util):  # per-device figures only where needed
        energies, dev_utils = _device_figures(d.get("devices"))
        utils = utils or dev_utils
    policy = _text(d.get("energy"))
    nodes = d.get("node_energy")
    node_energy: list[float] = []
    if isinstance(nodes, dict):
        for n in nodes.values():
            if not isinstance(n, dict):
                continue
            e, u = _num(n.get("energy_j")), _num(n.get("util"))
            if math.isnan(e) or math.isnan(u):
                dev_e, dev_u = _device_figures(n.get("devices"))
                e = sum(dev_e) if math.isnan(e) and dev_e else e
                u = sum(dev_u) / len(dev_u) if math.isnan(u) and dev_u else u
            if not math.isnan(e):
                node_energy.append(e)
            if not math.isnan(u):
                utils.append(u)
            policy = _text(n.get("policy")) or policy  # what the agent applied (auto resolved)
    if math.isnan(energy):
        parts = node_energy or energies
        energy = sum(parts) if parts else math.nan
    util = sum(utils) / len(utils) if utils else math.nan
    if utils and max(utils) <= 1.0:
        util *= 100.0
    # The node agent also writes energy for jobs the bridge never saw: no "hetero" then.
    accel = _text(d.get("accel"))
    return {
        "hetero": "hetero" in d, "req": accel, "req_kind": req_kind(accel), "pool": _text(d.get("pool")),
        "why": _text(d.get("why")), "tier": _text(d.get("tier")), "policy": policy,
        "pred_p50": _num(pred.get("p50")), "pred_p90": _num(pred.get("p90")),
        "energy_j": energy, "accel_util": util,
    }


@dataclass(frozen=True)
class Alloc:
    arch: str
    model: str
    accel_class: str
    devices: float
    units: float


class SiteIndex:
    """Site lookups the parsers need: GRES (name, type) → model, node → arch and devices."""

    def __init__(self, site: Site | None):
        self.gres: dict[tuple[str, str], AccelModel] = {}
        self.nodes: dict[str, tuple[str, tuple[Any, ...]]] = {}
        if site is None:
            return
        for m in site.catalog.values():
            self.gres[(m.gres_name, m.gres_type)] = m
            self.gres.setdefault((m.gres_name, m.id), m)
        for g in site.node_groups:
            for n in g.nodes:
                self.nodes[n] = (g.architecture, g.accelerators)

    def first_node(self, nodelist: str) -> tuple[str, tuple[Any, ...]] | None:
        if nodelist in NO_NODES:
            return None
        try:
            first = next(iter(NodeSet(nodelist)))
        except (NodeSetParseError, StopIteration, ValueError):
            first = nodelist.split(",")[0]
        return self.nodes.get(first, ("unknown", ()))

    def alloc(self, tres_text: str, nodelist: str) -> Alloc:
        """What an allocation held: its main accelerator model, device count and units."""
        node = self.first_node(nodelist)
        arch = node[0] if node else ""
        tres = parse_tres(tres_text)
        typed: dict[str, float] = {}
        units = 0.0
        for key, value in tres.items():
            if not key.startswith("gres/") or ":" not in key:
                continue
            name, gtype = key[5:].split(":", 1)
            count = _float(value)
            model = self.gres.get((name, gtype))
            mid = model.id if model else gtype
            typed[mid] = typed.get(mid, 0.0) + count
            units += count * (model.units if model and model.units else math.nan)
        if typed:
            mid = max(typed, key=lambda k: typed[k])
            return Alloc(arch, mid, mid, typed[mid], units)
        # Untyped GRES (shards, or a gres/gpu=N whose type was not tracked): the node says which.
        for key, value in tres.items():
            if not key.startswith("gres/"):
                continue
            name, count = key[5:], _float(value)
            for a in node[1] if node else ():
                if name == "shard" and a.shards_per_device:
                    devices = count / a.shards_per_device
                    return Alloc(arch, a.model.id, f"{a.model.id}/shard", devices, devices * a.model.units)
                if name == a.model.gres_name:
                    return Alloc(arch, a.model.id, a.model.id, count, count * a.model.units)
            if name != "shard":
                return Alloc(arch, name, name, count, math.nan)
        return Alloc(arch, "", J.CPU_CLASS, 0.0, 0.0)


def _float(v: str) -> float:
    try:
        return float(v)
    except ValueError:
        return math.nan


def _categories(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """(codes, category strings) of a column: parsers then run once per distinct value."""
    cat = col.astype("category")
    codes = cat.cat.codes.to_numpy()
    cats = [str(c) for c in cat.cat.categories]
    if (codes < 0).any():  # a missing value reads as ""
        codes = np.where(codes < 0, len(cats), codes)
        cats.append("")
    return codes, cats


def _map_text(codes: np.ndarray, values: list[str]) -> pd.Categorical[Any]:
    """values[codes] as a categorical, built from codes (no million-string detour)."""
    cats = list(dict.fromkeys(values)) or [""]
    pos = {c: i for i, c in enumerate(cats)}
    idx = np.asarray([pos[v] for v in values] or [0], dtype=np.int64)
    return pd.Categorical.from_codes(idx[codes], dtype=pd.CategoricalDtype(cats))


def _map(codes: np.ndarray, values: list[Any], dtype: str | type) -> np.ndarray:
    return np.asarray(values, dtype=dtype)[codes] if values else np.zeros(len(codes), dtype=dtype)


def jobs_from_sacct(raw: pd.DataFrame, site: Site | None) -> pd.DataFrame:
    """The job table of parsed sacct allocation lines (see jobs.py for the columns)."""
    n = len(raw)
    if n == 0:
        return J.empty_jobs()
    idx = SiteIndex(site)
    num = {f: raw[f].to_numpy(dtype="float64") for f in _NUMERIC}
    codes, states = _categories(raw["State"])
    cols: dict[str, object] = {
        "job": raw["JobID"].to_numpy(dtype=object), "name": raw["JobName"].to_numpy(dtype=object),
        "user": raw["User"], "account": raw["Account"], "partition": raw["Partition"], "qos": raw["QOS"],
        "state": _map_text(codes, [s.split(" ", 1)[0] for s in states]), "reason": raw["Reason"],
        "submit": num["Submit"], "eligible": num["Eligible"], "start": num["Start"].copy(),
        "end": num["End"], "elapsed": num["ElapsedRaw"], "limit": num["TimelimitRaw"] * 60.0,
        "ncpus": num["NCPUS"],
    }
    codes, texts = _categories(raw["TotalCPU"])
    cols["cpu_time"] = _map(codes, [cpu_seconds(t) for t in texts], "float64")
    tres_codes, tres = _categories(raw["AllocTRES"])
    node_codes, nodes = _categories(raw["NodeList"])
    # A job cancelled while pending gets Start = End = cancel time: it never ran.
    no_nodes = np.asarray([v in NO_NODES for v in nodes] or [True])[node_codes]
    np.asarray(cols["start"])[no_nodes] = np.nan
    width = len(nodes) + 1
    pair, inverse = np.unique(tres_codes.astype(np.int64) * width + node_codes, return_inverse=True)
    allocs = [idx.alloc(tres[int(p) // width], nodes[int(p) % width]) for p in pair]
    inverse = inverse.reshape(-1)
    for f in ("arch", "model", "accel_class"):
        cols[f] = _map_text(inverse, [getattr(a, f) for a in allocs])
    for f in ("devices", "units"):
        cols[f] = _map(inverse, [getattr(a, f) for a in allocs], "float64")
    codes, comments = _categories(raw["AdminComment"])
    decisions = [parse_admin_comment(c) for c in comments]
    cols["hetero"] = _map(codes, [bool(d.get("hetero")) for d in decisions], bool)
    for f in ("req", "req_kind", "pool", "why", "tier", "policy"):
        cols[f] = _map_text(codes, [d.get(f, "") for d in decisions])
    for f in ("pred_p50", "pred_p90", "energy_j", "accel_util"):
        cols[f] = _map(codes, [d.get(f, math.nan) for d in decisions], "float64")
    # Slurm's own energy accounting (acct_gather_energy) when the node agent recorded none.
    slurm_energy = num["ConsumedEnergyRaw"].copy()
    slurm_energy[(slurm_energy <= 0) | (slurm_energy > _ENERGY_MAX)] = np.nan
    energy = np.asarray(cols["energy_j"])
    cols["energy_j"] = np.where(np.isnan(energy), slurm_energy, energy)
    return J.finish(cols, n)


def parse_squeue_pending(text: str) -> pd.DataFrame:
    """`squeue -h -t PD -o SQUEUE_FORMAT` (SLURM_TIME_FORMAT=%s) → one row per waiting job."""
    rows = [ln.split("|", len(SQUEUE_FIELDS) - 1) for ln in text.splitlines() if ln.strip()]
    rows = [r for r in rows if len(r) == len(SQUEUE_FIELDS)]
    frame = pd.DataFrame(rows, columns=list(SQUEUE_FIELDS), dtype=object)
    frame["submit"] = pd.to_numeric(frame["submit"], errors="coerce").astype("float64")
    frame["reason"] = frame["reason"].str.strip("()")
    return frame
