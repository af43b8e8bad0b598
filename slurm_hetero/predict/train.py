"""Training the runtime models: a central estimate and an upper quantile, both LightGBM.

Both predict t = log(runtime / base), base being the last-two baseline (`features.py`), so
the trees only learn how far to move away from a strong predictor, and a model of zero
trees *is* that baseline.

The central model is fitted to the evaluation metric itself. With r = log(p / a),
accuracy min(p,a)/max(p,a) = exp(-|r|), so we minimize w·(1 - exp(-|r|/w)): near r = 0
this is L1 in log space (a median), far away its gradient fades, so a job no feature can
explain (a crash after 5 s of a 10-hour job) stops pulling every prediction down. The loss
is concave away from 0, so Newton steps use a positive stand-in for its second derivative.
w = 1 would be the metric exactly; w = 2 is smoother and scored better on all three traces.
Plain L2 on log runtime, by contrast, predicts a geometric mean and scores below last-two.

The upper model is LightGBM's quantile (pinball) loss at `quantile`, calibrated: boosted
quantiles overfit (in-sample coverage is above the nominal level, on future jobs below),
so it is fitted on the older part of the training jobs and then shifted, in log space,
by the amount that makes it cover `quantile` of the newest part (a split-conformal step).

Lean models for the bridge: the accuracy loss needs many small steps (300 trees at 0.05;
fewer, larger steps lose 0.01-0.02 accuracy), and each tree costs the bridge a walk per
job. So each model is distilled: a small L2 booster (60 and 40 trees) is fitted to the
big one's scores on the same jobs. The target is a deterministic function of the
features, so few large steps fit it closely; on the traces the 60-tree student scored
from 0.001 below to 0.01 above its teacher. Only the students are kept and exported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
import pandas as pd

from slurm_hetero.errors import InputError
from slurm_hetero.predict import features as F
from slurm_hetero.predict.baselines import Arr
from slurm_hetero.predict.params import TrainParams

__all__ = ["DEFAULT_PARAMS", "Model", "TrainParams", "accuracy_objective", "train"]

MODEL_FORMAT = "slurm-hetero-runtime-model"
DEFAULT_PARAMS = TrainParams()
Progress = Callable[[str, int, int], None]


def accuracy_objective(width: float, floor: float,
                       cap: Arr | None = None) -> Callable[[Arr, lgb.Dataset], tuple[Arr, Arr]]:
    """The loss's gradient and Newton stand-in. `cap` is each job's log(request / base):
    predictions are clamped to the request, so a score above the cap for a job that ran to
    its limit is already perfect and gets no gradient."""
    def objective(score: Arr, data: lgb.Dataset) -> tuple[Arr, Arr]:
        y = np.asarray(data.get_label(), dtype=np.float64)
        r = score - y
        e = np.exp(-np.abs(r) / width)
        grad = np.sign(r) * e
        if cap is not None:
            grad[(score >= cap) & (y >= cap)] = 0.0
        return grad, np.maximum(e, floor)
    return objective


@dataclass
class Model:
    central: lgb.Booster
    upper: lgb.Booster
    quantile: float
    upper_shift: float  # calibration added to the upper model's log score
    partitions: dict[str, int]
    default_runtime: float  # base for a job with neither history nor request
    info: dict[str, Any] = field(default_factory=dict)

    def predict_x(self, x: Arr, base: Arr, req: Arr, threads: int = 2) -> tuple[Arr, Arr]:
        """Seconds (central, upper) from a feature matrix: base·exp(score), at least 1 s,
        at most the request (the bridge never limits a job below what its user asked)."""
        if not len(x):
            return np.empty(0), np.empty(0)
        c = base * np.exp(np.asarray(self.central.predict(x, raw_score=True, num_threads=threads)))
        u = base * np.exp(np.asarray(self.upper.predict(x, raw_score=True, num_threads=threads))
                          + self.upper_shift)
        u = np.maximum(u, c)
        c, u = np.maximum(c, 1.0), np.maximum(u, 1.0)
        known = req > 0
        return np.where(known, np.minimum(c, req), c), np.where(known, np.minimum(u, req), u)

    def predict(self, history: F.History, jobs: pd.DataFrame, threads: int = 2) -> tuple[Arr, Arr]:
        """Predict `jobs` (job table rows) at their submit times from `history`."""
        x, base = F.table_features(jobs, history, self.partitions, self.default_runtime)
        return self.predict_x(x, base, x[:, F.FEATURES.index("req")], threads)

    def to_json(self) -> str:
        return json.dumps({
            "format": MODEL_FORMAT, "version": 1, "features": list(F.FEATURES), "state": list(F.STATE),
            "quantile": self.quantile, "upper_shift": self.upper_shift, "partitions": self.partitions,
            "default_runtime": self.default_runtime, "info": self.info,
            "central": self.central.model_to_string(), "upper": self.upper.model_to_string(),
        })

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Model:
        try:
            d = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{path}: cannot read model: {e}") from e
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            raise InputError(f"{path}: not a slurm-hetero runtime model (make one with `model train`)")
        if d.get("features") != list(F.FEATURES) or d.get("state") != list(F.STATE):
            raise InputError(f"{path}: model built for other features; retrain it with `model train`")
        try:
            return cls(central=lgb.Booster(model_str=d["central"]), upper=lgb.Booster(model_str=d["upper"]),
                       quantile=float(d["quantile"]), upper_shift=float(d["upper_shift"]),
                       partitions={str(k): int(v) for k, v in d["partitions"].items()},
                       default_runtime=float(d["default_runtime"]), info=dict(d.get("info", {})))
        except (KeyError, TypeError, ValueError, lgb.basic.LightGBMError) as e:
            raise InputError(f"{path}: damaged model file: {e}") from e


def training_rows(df: pd.DataFrame, until: int | None = None) -> pd.DataFrame:
    """Usable jobs, and with `until` only those whose runtime was known by then."""
    rows = df[F.usable(df)]
    if until is not None:
        rows = rows[rows["end"] < until]
    return rows


def train(df: pd.DataFrame, params: TrainParams = DEFAULT_PARAMS, *, until: int | None = None,
          history: F.History | None = None, progress: Progress | None = None) -> Model:
    """Fit both models on the jobs of `df` that had ended before `until` (all by default).

    Features come from `history` (built from `df` when not given)."""
    params.check()
    rows = training_rows(df, until)
    if len(rows) < 2 * params.min_data_in_leaf:
        raise InputError(f"only {len(rows)} usable jobs to train on (runtime, start and end known); "
                         f"need at least {2 * params.min_data_in_leaf}")
    t0 = time.perf_counter()
    history = history or F.History.build(df)
    partitions = F.partition_codes(rows)
    default_runtime = float(np.median(np.maximum(rows["runtime_s"].to_numpy(np.float64), 1.0)))
    x, base = F.table_features(rows, history, partitions, default_runtime)
    y = np.log(np.maximum(rows["runtime_s"].to_numpy(np.float64), 1.0)) - np.log(base)
    t_features = time.perf_counter() - t0
    lp = params.lgb_params(len(rows))
    dataset_params = {"max_bin": 255, "verbose": -1}
    data = lgb.Dataset(x, y, feature_name=list(F.FEATURES), params=dataset_params, free_raw_data=False)

    def fit(name: str, extra: dict[str, Any], rounds: int, data: lgb.Dataset) -> lgb.Booster:
        callbacks = []
        if progress is not None:
            def report(env: lgb.callback.CallbackEnv) -> None:
                progress(name, env.iteration + 1, rounds)
            callbacks.append(report)
        return lgb.train({**lp, **extra}, data, rounds, callbacks=callbacks)

    def scores(b: lgb.Booster, rows: npt.NDArray[np.intp] | slice = slice(None)) -> Arr:
        return np.asarray(b.predict(x[rows], raw_score=True, num_threads=params.threads))

    def distilled(name: str, teacher: lgb.Booster, rounds: int) -> lgb.Booster:
        if not params.distill:
            return teacher
        student_data = lgb.Dataset(x, scores(teacher), reference=data, feature_name=list(F.FEATURES),
                                   params=dataset_params)
        student = {"objective": "l2", "learning_rate": params.student_learning_rate,
                   "bagging_fraction": 1.0, "bagging_freq": 0, "feature_fraction": 1.0}
        return fit(f"{name} (lean)", student, rounds, student_data)

    req = x[:, F.FEATURES.index("req")]
    cap = np.where(req > 0, np.log(np.maximum(req, 1.0) / base), np.inf)
    objective = accuracy_objective(params.loss_width, params.hessian_floor, cap)
    central = fit("central", {"objective": objective}, params.rounds, data)
    central = distilled("central", central, params.student_rounds)
    # Calibration split by submit time: fit on the older jobs, calibrate on the newest.
    order = np.argsort(rows["submit"].to_numpy(np.int64), kind="stable")
    n_fit = int(len(order) * (1 - params.calibration_fraction))
    fit_idx, cal_idx = np.sort(order[:n_fit]), np.sort(order[n_fit:])
    upper = fit("upper", {"objective": "quantile", "alpha": params.quantile}, params.quantile_rounds,
                data.subset(fit_idx.tolist()))
    # The student learns the teacher's scores, never the calibration jobs' runtimes.
    upper = distilled("upper", upper, params.student_quantile_rounds)
    upper_shift = float(np.quantile(y[cal_idx] - scores(upper, cal_idx), params.quantile))
    sources = sorted(pd.unique(rows["source"]).tolist())
    info = {"sources": sources, "jobs": len(rows), "until": until, "params": asdict(params),
            "trained_at": int(time.time()), "seconds_features": round(t_features, 2),
            "seconds_total": round(time.perf_counter() - t0, 2)}
    return Model(central, upper, params.quantile, upper_shift, partitions, default_runtime, info)
