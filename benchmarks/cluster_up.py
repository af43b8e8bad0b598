"""`cluster up` of the demo site: seconds from nothing to every node idle, then down.

Prints figures only. Run as root with the Debian packages installed (`make bench`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from slurm_hetero.devcluster import Cluster
from slurm_hetero.site import load_site

DEMO = Path(__file__).resolve().parents[1] / "site" / "demo" / "site.yaml"


def main() -> None:
    site = load_site(DEMO)
    with tempfile.TemporaryDirectory(prefix="bench-up-") as d:
        c = Cluster(Path(d) / "demo")
        cold = c.up(site, log=lambda *_: None)
        t0 = time.monotonic()
        c.up(site, log=lambda *_: None)
        again = time.monotonic() - t0
        t0 = time.monotonic()
        c.down(log=lambda *_: None)
        down = time.monotonic() - t0
        warm = c.up(site, log=lambda *_: None)  # database and state already initialized
        c.down(log=lambda *_: None)
    print(f"demo site, {len(site.all_nodes)} nodes:")
    print(f"  cluster up (fresh workdir) to all-idle: {cold:.1f} s")
    print(f"  cluster up (existing workdir, restart):  {warm:.1f} s")
    print(f"  cluster up while already up:            {again:.2f} s")
    print(f"  cluster down:                           {down:.1f} s")


if __name__ == "__main__":
    main()
