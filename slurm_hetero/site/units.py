"""Parsers for the human-friendly quantities of site files (sizes, bandwidths).

Both refuse what no hardware has (an exabyte of memory, a negative or infinite bandwidth)
with a message that says what is allowed, and read at most MAX_QUANTITY_CHARS characters.

>>> parse_size_mib("80GB")
81920
>>> parse_size_mib("512M")
512
>>> parse_bandwidth_gbs("1.6TB/s")
1600.0
>>> parse_size_mib("1048576T")
Traceback (most recent call last):
...
ValueError: size '1048576T' is out of range: must be at least 0 MiB and below 1 EiB (1048576T)
"""

from __future__ import annotations

import math
import re

from slurm_hetero.site.limits import MAX_BANDWIDTH_GBS, MAX_SIZE_MIB, shown

MAX_QUANTITY_CHARS = 64
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_BW = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])B/s\s*$", re.IGNORECASE)
_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
_GBS = {"K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}


def _text(value: object, what: str, example: str) -> str:
    text = str(value)
    if len(text) > MAX_QUANTITY_CHARS:
        raise ValueError(f"{what} {shown(value)} is too long: at most {MAX_QUANTITY_CHARS} "
                         f"characters, e.g. {example}")
    return text


def parse_size_mib(text: str | int, *, minimum: int = 0) -> int:
    """A memory size (`512GB`, `80G`, `1T`, plain number = MiB) in MiB, as Slurm counts it;
    at least `minimum` MiB and below 1 EiB."""
    if isinstance(text, int) and not isinstance(text, bool):
        mib = text
    else:
        m = _SIZE.match(_text(text, "size", "80GB"))
        if not m:
            raise ValueError(f"cannot parse size {shown(text)}: use a number with K, M, G or T (e.g. 80GB)")
        value = float(m.group(1)) * _MIB[(m.group(2) or "M").upper()]
        mib = round(value) if math.isfinite(value) and value < MAX_SIZE_MIB else MAX_SIZE_MIB
    if not minimum <= mib < MAX_SIZE_MIB:
        raise ValueError(f"size {shown(text)} is out of range: must be at least {minimum} MiB and "
                         f"below 1 EiB ({MAX_SIZE_MIB >> 20}T)")
    return mib


def parse_bandwidth_gbs(text: str | int | float, *, positive: bool = False) -> float:
    """A bandwidth (`120GB/s`, `1.6TB/s`, `900 MB/s`) in GB/s (decimal, as datasheets use);
    0 (or above 0 when `positive`) to MAX_BANDWIDTH_GBS."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        gbs = float(text)
    else:
        m = _BW.match(_text(text, "bandwidth", "120GB/s"))
        if not m:
            raise ValueError(
                f"cannot parse bandwidth {shown(text)}: use a number with MB/s, GB/s or TB/s (e.g. 120GB/s)"
            )
        gbs = float(m.group(1)) * _GBS[m.group(2).upper()]
    low_ok = gbs > 0 if positive else gbs >= 0
    if not (math.isfinite(gbs) and low_ok and gbs <= MAX_BANDWIDTH_GBS):
        low = "above 0" if positive else "at least 0"
        raise ValueError(f"bandwidth {shown(text)} is out of range: must be {low} and at most "
                         f"{MAX_BANDWIDTH_GBS / 1000:g}TB/s")
    return gbs


def size_gb_label(mib: int) -> str:
    """Rounded device-memory class label used in node features (`devmem80g`)."""
    return f"devmem{round(mib / 1024)}g"
