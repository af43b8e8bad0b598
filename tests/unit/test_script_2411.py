"""scripts/test-slurm-24.11.sh refuses bad arguments before it touches anything (exit 2, the
option named), and its host-MariaDB wrapper rewrites paths as the root's programs see them.

The script itself runs the integration suite in a trixie chroot (`make test-24.11`); here
only what needs neither root's chroot nor the network."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test-slurm-24.11.sh"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          check=False, env={**os.environ, **(env or {})})


def test_the_script_parses() -> None:
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_help_names_the_options() -> None:
    r = run("--help")
    assert r.returncode == 0
    for word in ("--root DIR", "--setup-only", "--mariadb=host", "PYTEST ARGS"):
        assert word in r.stdout, r.stdout


@pytest.mark.parametrize(("args", "named"), [
    (["--root", "relative/dir"], "--root relative/dir: give an absolute path"),
    (["--root", "/opt/with space"], "allowed characters"),
    (["--root", "/"], "--root /: refusing a system folder"),
    (["--root", "/usr/local/x"], "refusing a system folder"),
    (["--mariadb=mysql"], "--mariadb=mysql: allowed are --mariadb=host and --mariadb=root"),
    (["--root"], "--root needs a directory"),
])
def test_bad_arguments_exit_2_naming_the_option(args: list[str], named: str) -> None:
    if os.geteuid() != 0 and not args[0].startswith("--mariadb"):
        # Not root: the root check comes first and is what it says.
        r = run(*args)
        assert r.returncode == 2 and "run as root" in r.stderr, r.stderr
        return
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert named in r.stderr, r.stderr


def wrapper_text(root: str) -> str:
    """The wrapper the script writes, for one program, with the script's own heredoc."""
    text = SCRIPT.read_text()
    m = re.search(r"<<WRAP\n(.*?)\nWRAP\n", text, re.S)
    assert m, "the script has no wrapper heredoc"
    body = m.group(1).replace("\\$", "$").replace("$ROOT", root)
    # The lines computed at set-up time ($(...)): a fixed program for this test.
    body = re.sub(r"\$\(mariadbd --version[^)]*\)", "10.11", body)
    return re.sub(r"exec chroot /opt/host \$\(command -v \$prog\) ", "exec printf '%s\\\\n' ", body)


def test_the_wrapper_prefixes_absolute_option_paths_only(tmp_path: Path) -> None:
    w = tmp_path / "wrapper"
    w.write_text(wrapper_text("/opt/r"))
    w.chmod(0o755)
    r = subprocess.run([str(w), "--no-defaults", "--datadir=/var/tmp/x/db", "--user=root",
                        "--socket=/var/tmp/x/s.sock", "--innodb-buffer-pool-size=64M", "plain/arg"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["--no-defaults", "--datadir=/opt/r/var/tmp/x/db", "--user=root",
                                     "--socket=/opt/r/var/tmp/x/s.sock", "--innodb-buffer-pool-size=64M",
                                     "plain/arg"]


def test_a_second_run_on_a_locked_root_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the script runs as root only (the argument tests above cover non-root)")
    import fcntl

    root = tmp_path / "trixie"
    root.mkdir()
    (root / "keep").write_text("the other run's\n")
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = run("--root", str(root), "--setup-only")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"another run is using {root}" in r.stderr, r.stderr
    assert sorted(p.name for p in root.iterdir()) == ["keep"]  # no debootstrap, no mount points
