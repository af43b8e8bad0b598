"""Parsers for the human-friendly quantities of site files (sizes, bandwidths).

>>> parse_size_mib("80GB")
81920
>>> parse_size_mib("512M")
512
>>> parse_bandwidth_gbs("1.6TB/s")
1600.0
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_BW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])B/s\s*$", re.IGNORECASE)
_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
_GBS = {"K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}


def parse_size_mib(text: str | int) -> int:
    """A memory size (`512GB`, `80G`, `1T`, plain number = MiB) in MiB, as Slurm counts it."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"cannot parse size {text!r}: use a number with K, M, G or T (e.g. 80GB)")
    unit = (m.group(2) or "M").upper()
    return round(float(m.group(1)) * _MIB[unit])


def parse_bandwidth_gbs(text: str | int | float) -> float:
    """A bandwidth (`120GB/s`, `1.6TB/s`, `900 MB/s`) in GB/s (decimal, as datasheets use)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _BW.match(str(text))
    if not m:
        raise ValueError(
            f"cannot parse bandwidth {text!r}: use a number with MB/s, GB/s or TB/s (e.g. 120GB/s)"
        )
    return float(m.group(1)) * _GBS[m.group(2).upper()]


def size_gb_label(mib: int) -> str:
    """Rounded device-memory class label used in node features (`devmem80g`)."""
    return f"devmem{round(mib / 1024)}g"
