"""The two predictors every model is measured against.

- the user's estimate: the requested time limit itself;
- last-two (Tsafrir, Etsion & Feitelson 2007): the mean of the user's last two finished
  jobs' runtimes (the last one alone if there is only one), clamped to the request; the
  request when the user has no finished job yet.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.float64]


def user_estimate(req: Arr) -> Arr:
    """The request as the prediction (NaN where the job gave none)."""
    return np.where(req > 0, req, np.nan)


def last_two(state: Mapping[str, Arr], req: Arr, default_runtime: float) -> Arr:
    """Tsafrir's last-two from a History.state record (r1, r2 most recent first).

    `default_runtime` stands in for a job that has neither history nor a request."""
    n, known = state["n"], req > 0
    l2 = np.where(n >= 2, (state["r1"] + state["r2"]) / 2,
                  np.where(n == 1, state["r1"], np.where(known, req, default_runtime)))
    return np.where(known, np.minimum(l2, req), l2)
