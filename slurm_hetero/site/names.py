"""Names the site file accepts and how they are normalized (standard library only: the
container wrapper and the node exporter import this at start-up)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

ARCHES = ("x86_64", "aarch64")
# Every spelling of an architecture a site file, `uname -m` or a catalog may use.
ARCH_ALIASES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "x86-64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "armv8": "aarch64",
    "armv8l": "aarch64",
}
ARCH_ALLOWED = "allowed: x86_64, aarch64 (aliases arm64, ARMv8)"


def normalize_arch(name: str) -> str:
    """'ARM64' → 'aarch64'; an unknown name is returned as given.

    >>> normalize_arch("ARMv8"), normalize_arch("amd64"), normalize_arch("riscv64")
    ('aarch64', 'x86_64', 'riscv64')
    """
    return ARCH_ALIASES.get(name.lower(), name)


def near(name: str, known: Iterable[str]) -> str:
    """A hint for a misspelled name: the close matches, or every known name.

    >>> near("a100-80", ["a100-80gb", "h100"])
    'did you mean: a100-80gb?'
    """
    close = (difflib.get_close_matches(name.lower(), list(known), n=3, cutoff=0.6)
             if len(name) <= 64 else [])
    return f"did you mean: {', '.join(close)}?" if close else "known: " + ", ".join(sorted(known))
