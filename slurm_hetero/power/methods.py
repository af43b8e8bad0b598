"""How a node is powered down and up: ipmi, redfish, a site command, or the dev cluster.

Every method takes node names that `program` has already checked against the site, builds
argv lists (never a shell) or one HTTPS request, and raises PowerError on failure.
Passwords come from a file only its owner may read (mode 0600 or stricter: root, or the
SlurmUser slurmctld runs the programs as), never from argv: ipmitool reads it itself
(`-f`), redfish reads it here.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from slurm_hetero.errors import RuntimeFailure
from slurm_hetero.site.model import PowerSettings

ACTIONS = ("suspend", "resume", "restart")
Exec = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


class PowerError(RuntimeFailure):
    pass


class Method(Protocol):
    def __call__(self, action: str, node: str) -> None: ...


def run_argv(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def _checked(execute: Exec, argv: list[str], timeout: float) -> None:
    try:
        r = execute(argv, timeout)
    except FileNotFoundError as e:
        raise PowerError(f"{argv[0]}: not installed") from e
    except subprocess.TimeoutExpired as e:
        raise PowerError(f"{argv[0]}: no answer in {timeout:g} s") from e
    if r.returncode != 0:
        why = (r.stderr or r.stdout or "").strip().splitlines()[-1:] or [""]
        raise PowerError(f"{argv[0]} exited {r.returncode}: {why[0][:300]}")


def read_password(path: str) -> str:
    """The first line of a password file that only its owner (root) may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise PowerError(f"{path}: cannot read the BMC password file: {e.strerror}") from e
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or st.st_uid != os.geteuid():
            raise PowerError(f"{path}: the BMC password file must be ours and mode 0600 "
                             f"(it is 0{stat.S_IMODE(st.st_mode):o}, uid {st.st_uid})")
        return f.readline().rstrip("\r\n")


class Ipmi:
    """`ipmitool -I lanplus -H <bmc> -U <user> -f <password_file> chassis power off|on|reset`."""

    VERB: ClassVar[dict[str, str]] = {"suspend": "off", "resume": "on", "restart": "reset"}

    def __init__(self, p: PowerSettings, execute: Exec = run_argv):
        self.p, self.execute = p, execute

    def argv(self, action: str, node: str) -> list[str]:
        p = self.p
        return ["ipmitool", "-I", p.interface, "-H", p.bmc.replace("{node}", node), "-U", p.user,
                "-f", p.password_file, "chassis", "power", self.VERB[action]]

    def __call__(self, action: str, node: str) -> None:
        timeout = self.p.suspend_timeout if action == "suspend" else self.p.resume_timeout
        _checked(self.execute, self.argv(action, node), min(timeout, 60))


class Redfish:
    """POST <system>/Actions/ComputerSystem.Reset {"ResetType": ForceOff|On|ForceRestart},
    basic auth, TLS verified unless the site says verify_tls: false."""

    RESET: ClassVar[dict[str, str]] = {"suspend": "ForceOff", "resume": "On", "restart": "ForceRestart"}

    def __init__(self, p: PowerSettings, timeout: float = 30.0):
        self.p, self.timeout = p, timeout

    def request(self, action: str, node: str) -> urllib.request.Request:
        url = self.p.url.replace("{node}", node).rstrip("/") + "/Actions/ComputerSystem.Reset"
        token = base64.b64encode(f"{self.p.user}:{read_password(self.p.password_file)}".encode()).decode()
        return urllib.request.Request(url, method="POST",
                                      data=json.dumps({"ResetType": self.RESET[action]}).encode(),
                                      headers={"Content-Type": "application/json",
                                               "Authorization": f"Basic {token}"})

    def __call__(self, action: str, node: str) -> None:
        req = self.request(action, node)
        ctx = ssl.create_default_context()
        if not self.p.verify_tls:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=ctx) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            raise PowerError(f"{req.full_url}: HTTP {e.code} {e.reason}") from e
        except (urllib.error.URLError, OSError) as e:
            raise PowerError(f"{req.full_url}: {getattr(e, 'reason', e)}") from e
        if status not in (200, 202, 204):
            raise PowerError(f"{req.full_url}: HTTP {status}")


class Command:
    """The site's own argv, `{node}` replaced by the node's name (restart: resume's)."""

    def __init__(self, p: PowerSettings, execute: Exec = run_argv):
        self.p, self.execute = p, execute

    def argv(self, action: str, node: str) -> list[str]:
        base = self.p.suspend_argv if action == "suspend" else self.p.resume_argv
        return [a.replace("{node}", node) for a in base]

    def __call__(self, action: str, node: str) -> None:
        timeout = self.p.suspend_timeout if action == "suspend" else self.p.resume_timeout
        _checked(self.execute, self.argv(action, node), timeout)


class DevCluster:
    """The dev cluster (slurm_hetero.devcluster.power): stop the node's slurmd; on resume wait
    boot_delay, then start it again. Run as a module: this package sits below devcluster/."""

    def __init__(self, p: PowerSettings, slurm_conf: str, execute: Exec = run_argv):
        self.p, self.slurm_conf, self.execute = p, slurm_conf, execute

    def argv(self, action: str, node: str) -> list[str]:
        return [sys.executable, "-m", "slurm_hetero.devcluster.power", action, "--conf", self.slurm_conf,
                "--boot-delay", f"{self.p.boot_delay:g}", node]

    def __call__(self, action: str, node: str) -> None:
        _checked(self.execute, self.argv(action, node), self.p.resume_timeout)


def method_for(p: PowerSettings, slurm_conf: str | None = None) -> Method:
    if p.method == "ipmi":
        return Ipmi(p)
    if p.method == "redfish":
        return Redfish(p)
    if p.method == "devcluster":
        return DevCluster(p, slurm_conf or os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    return Command(p)


def describe(p: PowerSettings) -> Sequence[str]:
    """One line per setting that matters for the method (for `power status`)."""
    if p.method == "ipmi":
        return [f"ipmi: {p.bmc} as {p.user} ({p.interface})"]
    if p.method == "redfish":
        return [f"redfish: {p.url} as {p.user}{'' if p.verify_tls else ' (TLS not verified)'}"]
    if p.method == "devcluster":
        return [f"devcluster: slurmd stopped/started, boot delay {p.boot_delay:g} s"]
    return [f"command: suspend {list(p.suspend_argv)}, resume {list(p.resume_argv)}"]
