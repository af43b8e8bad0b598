"""Compile a trained model and the users' history into one Lua 5.1 chunk for the bridge.

Trees become nested `if` statements on local variables with the thresholds as literals:
in PUC Lua 5.1 that is one comparison and one jump per level, the cheapest tree walk
there is (no table reads). Numbers are written with Python's shortest round-trip repr,
which Lua's strtod reads back to the same double, so Lua and LightGBM agree to the bit on
every comparison and every leaf value.

The per-user history (one flat array) holds `features.STATE` for each user as of the export; the bridge
daemon re-exports it from fresh accounting data (`export_text` with a new job table) to
keep it current; the trees stay the same.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.fileio import write_atomic
from slurm_hetero.jobs.sacct import ACCEL_GRES
from slurm_hetero.predict import features as F
from slurm_hetero.predict.train import Model
from slurm_hetero.templating import environment

TEMPLATE = "predict_model.lua.j2"
USERS_PER_FUNCTION = 400  # x 19 constants each: far below Lua 5.1's 2^18 per function
MAX_TREE_DEPTH = 48  # Lua 5.1's parser nests at most 200 C levels; each `if` takes a few
LGB_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold, a float widened to double


def lua_number(x: float) -> str:
    x = float(x)
    if not math.isfinite(x):
        raise RuntimeFailure(f"cannot export the non-finite number {x} to Lua")
    return repr(x)


def lua_string(s: str) -> str:
    """A Lua 5.1 string literal of the UTF-8 bytes of s (decimal escapes: 5.1 has no \\x)."""
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        out.append(c if 32 <= b < 127 and c not in '"\\' else f"\\{b:03d}")
    return '"' + "".join(out) + '"'


def _condition(var: str, node: dict[str, Any], nan_free: bool) -> str:
    """LightGBM's numerical decision as a Lua expression: Zero and NaN missing types send
    the missing value to the default side; missing type None compares NaN as 0. With
    `nan_free` (the exported features are: inputs sanitized, divisions guarded) a None split
    is the bare comparison, the common case at one instruction."""
    if node.get("decision_type") != "<=":
        raise RuntimeFailure(f"cannot export split {node.get('decision_type')!r}: only numerical "
                             "splits are supported (the features have no categorical columns)")
    t = float(node["threshold"])
    le = f"{var} <= {lua_number(t)}"
    nan = f"{var} ~= {var}"
    missing, left = node.get("missing_type", "None"), bool(node.get("default_left", True))
    if missing == "NaN":
        return f"{le} or {nan}" if left else le
    if missing == "Zero":
        zero = f"({nan} or ({var} >= {lua_number(-LGB_ZERO)} and {var} <= {lua_number(LGB_ZERO)}))"
        return f"{le} or {zero}" if left else f"{le} and not {zero}"
    return le if nan_free or t < 0 else f"{le} or {nan}"


def _tree_lines(node: dict[str, Any], names: tuple[str, ...], depth: int, nan_free: bool) -> Iterator[str]:
    pad = "    " * (depth + 1)
    if "leaf_value" in node:
        yield f"{pad}score_ = score_ + {lua_number(node['leaf_value'])}"
        return
    if depth >= MAX_TREE_DEPTH:
        raise RuntimeFailure(f"a tree deeper than {MAX_TREE_DEPTH}: retrain with a smaller --max-depth")
    yield f"{pad}if {_condition(names[node['split_feature']], node, nan_free)} then"
    yield from _tree_lines(node["left_child"], names, depth + 1, nan_free)
    yield f"{pad}else"
    yield from _tree_lines(node["right_child"], names, depth + 1, nan_free)
    yield f"{pad}end"


def compile_booster(dump: dict[str, Any], name: str, names: tuple[str, ...] = F.FEATURES,
                    nan_free: bool = True) -> str:
    """`local function NAME(<features>) ... return raw_score end` from `Booster.dump_model()`."""
    if dump.get("num_tree_per_iteration", 1) != 1:
        raise RuntimeFailure("cannot export a multi-output booster")
    if tuple(dump.get("feature_names", names)) != names:
        raise RuntimeFailure("booster feature names differ from features.FEATURES")
    lines = [f"local function {name}({', '.join(names)})", "    local score_ = 0"]
    for tree in dump["tree_info"]:
        lines.extend(_tree_lines(tree["tree_structure"], names, 0, nan_free))
    lines += ["    return score_", "end"]
    return "\n".join(lines)


def users_state(df: pd.DataFrame, until: int | None = None) -> tuple[dict[str, list[float]], int]:
    """{user: STATE values} from the jobs of ONE source that ended before `until` (all
    by default), and the `until` used."""
    sources = sorted(pd.unique(df["source"]).tolist())
    if len(sources) > 1:
        raise InputError(f"the history table holds several sources ({', '.join(sources)}); "
                         "user names would collide: choose one with --source")
    done = df[F.usable(df)]
    if until is None:
        until = int(done["end"].max()) + 1 if len(done) else int(time.time())
    history = F.History.build(done)
    users = sorted(pd.unique(done["user"].astype(str)).tolist())
    probe = pd.DataFrame({"source": sources[0] if sources else "", "user": users})
    state = history.state(F.user_keys(probe), np.full(len(users), until, dtype=np.int64))
    table = {u: [float(state[s][i]) for s in F.STATE] for i, u in enumerate(users)}
    return {u: v for u, v in table.items() if v[0] > 0}, until


def _users_code(users: dict[str, list[float]]) -> str:
    """Calls of the template's `user(name, <STATE values>)`, in functions of at most
    USERS_PER_FUNCTION users each."""
    names = sorted(users)
    blocks = []
    for b in range(0, len(names), USERS_PER_FUNCTION):
        fn = f"users_{b // USERS_PER_FUNCTION + 1}"
        body = [f'    add({lua_string(u)}, {", ".join(lua_number(v) for v in users[u])})'
                for u in names[b:b + USERS_PER_FUNCTION]]
        blocks.append("\n".join([f"local function {fn}(add)", *body, "end", f"{fn}(user)"]))
    return "\n".join(blocks)


def _no_state() -> list[str]:
    return [lua_number(0.0 if s == "n" else (F.NO_LOG_RATIO if s.startswith("lratio") else -1.0))
            for s in F.STATE]


# The prediction a job's limit is made of where limits are predicted: the upper quantile (few
# jobs outlive it) or the central one (backfill plans tighter; half the jobs are extended).
LIMITS = ("upper", "central")
# The prediction SiteFactor is made of: the central one, the upper quantile (a job the model
# is unsure of is ordered by what it may take, not by its most likely runtime), or the central
# one times the job's CPUs ("area": the CPU time it will hold, smallest first).
ORDERS = ("central", "upper", "area")


def export_text(model: Model, history: pd.DataFrame, until: int | None = None,
                generated_at: int | None = None, limit: str = "upper",
                sure: float | None = None, order: str = "central") -> str:
    """The Lua chunk: trees of both models, the users' state from `history` (one source)."""
    users, until = users_state(history, until)
    return render(model, users, until, generated_at, limit, sure, order)


def render(model: Model, users: dict[str, list[float]], until: int, generated_at: int | None = None,
           limit: str = "upper", sure: float | None = None, order: str = "central") -> str:
    if limit not in LIMITS:
        raise InputError(f"--limit {limit}: choose {' or '.join(LIMITS)}")
    if order not in ORDERS:
        raise InputError(f"--order {order}: choose {', '.join(ORDERS)}")
    if sure is not None and not 0 < sure <= 1:
        raise InputError(f"--shorten-when-sure {sure:g}: give a share of the user's limit in (0, 1]")
    return _render(users, until, generated_at, limit=limit, order=order,
                   sure="nil" if sure is None else lua_number(float(sure)),
                   # A Lua comment line: a source name (a file name) must not end it and start code.
                   trained_on=" ".join((", ".join(model.info.get("sources", [])) or "unknown data").split()),
                   quantile=lua_number(model.quantile), default_runtime=lua_number(model.default_runtime),
                   upper_shift=lua_number(model.upper_shift),
                   partitions=[(lua_string(p), c) for p, c in sorted(model.partitions.items())],
                   central_code=compile_booster(model.central.dump_model(), "central"),
                   upper_code=compile_booster(model.upper.dump_model(), "upper"), correction="double")


# EASY++'s predictor (Tsafrir, Etsion, Feitelson, 2007): the average of the user's last two
# runtimes, one if there is one, else the user's own request; never above the request. That is
# the trees' base (features.py l2c): with both scores 0 the model predicts exactly it. A job
# that outlives it is extended by their step list (bridge/daemon.py), not by doubling.
EASY_DEFAULT_RUNTIME = 3600.0  # neither history nor request: an hour


def _zero(name: str) -> str:
    return f"local function {name}(...)\n    return 0\nend"


def export_easy(history: pd.DataFrame, until: int | None = None, generated_at: int | None = None) -> str:
    """The EASY++ reference as a model chunk the bridge loads like a trained one (same
    history, same online overlay), for the replay's `easy++` arm."""
    users, until = users_state(history, until)
    return _render(users, until, generated_at, limit="central", sure="nil", order="central",
                   trained_on="EASY++ (last-two average, no trees)",
                   quantile=lua_number(0.5), default_runtime=lua_number(EASY_DEFAULT_RUNTIME),
                   upper_shift=lua_number(0.0), partitions=[],
                   central_code=_zero("central"), upper_code=_zero("upper"), correction="tsafrir")


def _render(users: dict[str, list[float]], until: int, generated_at: int | None, **parts: Any) -> str:
    return environment().get_template(TEMPLATE).render(
        generated_at=int(generated_at if generated_at is not None else time.time()),
        n_users=len(users), history_until=until,
        accel_gres=ACCEL_GRES, features=F.FEATURES, state=F.STATE, no_state=_no_state(),
        users_code=_users_code(users), **parts)


def write(text: str, path: Path) -> None:
    """Atomic replace: slurmctld's Lua may read the file at any moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
