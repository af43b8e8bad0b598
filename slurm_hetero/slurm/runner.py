"""The one place that runs Slurm commands: argv lists (never a shell), timeouts, env.

Everything that talks to Slurm builds an argv, calls `Runner.run`, and hands stdout to a
pure parser. Tests patch this single point (or point SLURM_CONF at a real test cluster).

Output is read as bytes and decoded here, once, with `decode_output`: Slurm passes a job's
name, comment, work dir and paths through as the bytes its user wrote (22.05's `--json`
output included), so one job's invalid UTF-8 must cost at most that job's text, never the
whole answer everyone else's jobs are in.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_hetero.errors import RuntimeFailure


def decode_output(raw: bytes) -> str:
    """Slurm's output as text: invalid UTF-8 (a stray byte, a lone surrogate, an overlong
    or truncated sequence) becomes U+FFFD, one per bad byte, and everything else is kept.

    The decoder never swallows a valid byte into a bad sequence, so a quote or separator
    right after the bad bytes keeps its meaning: JSON stays JSON, a row stays one row.

    >>> decode_output(b'{"name": "a\\xff\\xfe"}')
    '{"name": "a\\ufffd\\ufffd"}'
    >>> decode_output(b'abc\\xe2\\x82|7')
    'abc\\ufffd|7'
    """
    return raw.decode("utf-8", errors="replace")


class SlurmCommandError(RuntimeFailure):
    def __init__(self, argv: Sequence[str], returncode: int, stderr: str):
        self.argv, self.returncode, self.stderr = list(argv), returncode, stderr
        tail = stderr.strip().splitlines()[-3:]
        super().__init__(f"{argv[0]} exited {returncode}: {' | '.join(tail) or 'no message'}")


@dataclass
class Runner:
    """Runs Slurm client commands against one cluster (selected by its slurm.conf)."""

    slurm_conf: str | None = None
    timeout: float = 60.0
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        env.update(self.extra_env)
        return env

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run argv and return the completed process; raise SlurmCommandError on failure."""
        try:
            raw = subprocess.run(list(argv), capture_output=True, env=self.env(),
                                 timeout=timeout or self.timeout, check=False,
                                 input=None if input is None else input.encode())
        except FileNotFoundError as e:
            raise RuntimeFailure(f"{argv[0]}: not installed (install Slurm's client tools)") from e
        except subprocess.TimeoutExpired as e:
            raise RuntimeFailure(f"{argv[0]}: no answer in {e.timeout:.0f} s") from e
        proc = subprocess.CompletedProcess(raw.args, raw.returncode, decode_output(raw.stdout),
                                           decode_output(raw.stderr))
        if check and proc.returncode != 0:
            raise SlurmCommandError(argv, proc.returncode, proc.stderr)
        return proc

    def out(self, argv: Sequence[str], **kw: float | None) -> str:
        return self.run(argv, **kw).stdout  # type: ignore[arg-type]

    def version(self) -> tuple[int, int]:
        """(major, minor) of the installed Slurm, e.g. (22, 5) for 22.05.8.

        `slurmctld -V` answers without any configuration; client-only hosts fall back to
        `sinfo --version`, which needs a reachable configuration."""
        from slurm_hetero.slurm.parse import parse_version

        for argv in (["slurmctld", "-V"], ["sinfo", "--version"]):
            try:
                r = self.run(argv, check=False, timeout=10)
            except RuntimeFailure:
                continue
            if r.returncode == 0:
                return parse_version(r.stdout)
        raise RuntimeFailure("cannot tell the Slurm version: "
                             "neither slurmctld -V nor sinfo --version answered")
