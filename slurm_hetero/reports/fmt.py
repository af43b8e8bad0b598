"""How numbers read in the terminal and HTML (CSV keeps raw values).

Column names carry their unit as a suffix (see metrics.py); headers drop the suffix and
name the unit instead.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

MISSING = "\u2013"  # an en dash: "not recorded", distinct from a zero
_SUFFIX = (("_pct", " %"), ("_hours", " hours"), ("_kwh", " kWh"), ("_w", " W"), ("_s", ""))


def header(col: str) -> str:
    """`wait_p50_s` → `wait p50`, `util_pct` → `util %`."""
    for suffix, unit in _SUFFIX:
        if col.endswith(suffix):
            return col[: -len(suffix)].replace("_", " ") + unit
    return col.replace("_", " ")


def duration(seconds: float) -> str:
    """A wait or runtime as people read it.

    >>> duration(4.5), duration(754), duration(11_220), duration(200_000)
    ('4.5 s', '12m34s', '3h07m', '2d07h')
    """
    s = float(seconds)
    if s < 60:
        return f"{s:.1f} s" if s % 1 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def number(v: float) -> str:
    """
    >>> number(12345.6), number(3.14159), number(0.000123), number(0.0)
    ('12,346', '3.14', '0.000123', '0')
    """
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def cell(col: str, v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, Integral):
        return f"{int(v):,}"
    if isinstance(v, Real):
        f = float(v)
        if math.isnan(f):
            return MISSING
        if col.endswith("_s"):
            return duration(f)
        if col.endswith("_pct"):
            return f"{f:.1f}"
        if col == "accuracy":  # a real 0.0004 must not read as 0.000
            return f"{f:.3f}" if f >= 0.01 or f == 0 else f"{f:.2g}"
        if f.is_integer() and col in ("devices", "cpus", "jobs", "nodes"):
            return f"{int(f):,}"
        return number(f)
    text = str(v)
    return text if text else MISSING


def is_numeric(v: object) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)
