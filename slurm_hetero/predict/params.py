"""Training parameters: a light module, so the CLI can show defaults without loading LightGBM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_hetero.errors import InputError


@dataclass(frozen=True)
class TrainParams:
    quantile: float = 0.9
    rounds: int = 300  # central model
    quantile_rounds: int = 150
    leaves: int = 31
    # Bounded depth keeps the exported Lua lean (at most this many comparisons per tree).
    max_depth: int = 8
    learning_rate: float = 0.05
    min_data_in_leaf: int = 50
    loss_width: float = 2.0  # w in w·(1 - exp(-|r|/w))
    hessian_floor: float = 0.2
    calibration_fraction: float = 0.2  # newest training jobs held out to calibrate the upper model
    distill: bool = True
    student_rounds: int = 60
    student_quantile_rounds: int = 40
    student_learning_rate: float = 0.2
    # Each teacher tree sees a random sample of at most this many jobs (bagging): a
    # million-job history then trains in the time of a quarter of it, at no cost in accuracy.
    max_rows_per_tree: int = 250_000
    threads: int = 2
    seed: int = 1

    def check(self) -> None:
        if not 0.5 <= self.quantile < 1:
            raise InputError(f"--quantile {self.quantile}: use a value in [0.5, 1), e.g. 0.9")
        for name in ("rounds", "quantile_rounds", "leaves", "max_depth", "min_data_in_leaf", "threads",
                     "student_rounds", "student_quantile_rounds", "max_rows_per_tree"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1")
        if self.leaves < 2:
            raise InputError("--leaves must be at least 2")
        if not 0 < self.calibration_fraction < 0.5:
            raise InputError(f"calibration fraction {self.calibration_fraction}: use a value in (0, 0.5)")

    def lgb_params(self, rows: int) -> dict[str, Any]:
        bagging = min(0.8, self.max_rows_per_tree / max(rows, 1))
        return {"learning_rate": self.learning_rate, "num_leaves": self.leaves,
                "max_depth": self.max_depth, "min_data_in_leaf": self.min_data_in_leaf,
                "feature_fraction": 0.9, "bagging_fraction": bagging, "bagging_freq": 1,
                "num_threads": self.threads, "seed": self.seed, "verbose": -1,
                "deterministic": True, "force_col_wise": True}
