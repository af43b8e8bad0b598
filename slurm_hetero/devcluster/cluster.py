"""The local cluster: every daemon's state, logs and pid files live in one workdir.

Layout of a workdir:
    etc/     slurm.conf and friends (SLURM_CONF=etc/slurm.conf selects this cluster)
    munge/   key, socket, pid, log of this cluster's own munged
    db/      this cluster's own MariaDB (datadir, socket, pid): root-only (0700); it
             listens on no TCP port, and its root account is root's alone (unix_socket)
    dev/     emulated accelerator device files, one folder per node
    lib/     the slurm_hetero package and the SPANK plugin, installed for the node side
    run/user/UID/  each user's runtime folder (logind's /run/user/UID): runc's state
    log/ run/ state/ spool/
    cluster.json   ports and site path of the running cluster

Jobs of other users than root run here too: the workdir, etc/, lib/, run/, spool/ and dev/
are theirs to read and search, root's alone to change; db/, the munge key and
slurmdbd.conf stay root's alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from slurm_hetero.bridge.daemon import ExtendPolicy
from slurm_hetero.bridge.history import HISTORY_FILE
from slurm_hetero.conf.containers import emulated_paths
from slurm_hetero.conf.nodefiles import NODE_DIR, NODE_FILES
from slurm_hetero.conf.render import (
    COUNTERLESS_STACKS,
    Profile,
    device_paths,
    is_sampled,
    node_hooks,
    render_site,
    render_template,
    write_files,
)
from slurm_hetero.containers.bundle import write_stubs
from slurm_hetero.devcluster import clock as fakeclock
from slurm_hetero.devcluster import procs
from slurm_hetero.devcluster.access import ensure_system_user, node_python, unreachable_part
from slurm_hetero.energy.fake import FakeDevices
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.predict.tail import tail_path
from slurm_hetero.site.model import Site
from slurm_hetero.site.slurmlines import unquote
from slurm_hetero.slurm.commands import (
    assoc_mgr_user_argv,
    cancel_user_argv,
    ping_argv,
    sacctmgr_argv,
    sacctmgr_list_argv,
    sinfo_nodes_argv,
    squeue_ids_argv,
)
from slurm_hetero.slurm.parse import NodeInfo, parse_sinfo_nodes
from slurm_hetero.slurm.runner import Runner

# Slurm's config parser cannot quote paths: keep the workdir to these characters.
_SAFE_PATH = re.compile(r"^[A-Za-z0-9._/+-]+$")
ACCOUNT = "hetero"
PACKAGE = Path(__file__).resolve().parents[1]  # the slurm_hetero package lib/ installs
# runc's state, in each user's runtime folder as Slurm's oci.conf examples have it
# (/run/user/%U): %U is the job's uid.
RUNC_STATE = "slurm-hetero-runc"
SUPERVISOR_MODULE = "slurm_hetero.devcluster.supervise"


def _sql_quote(text: str) -> str:
    """A string literal for MariaDB (account names read back from mysql.user)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def default_workdir(site_name: str = "demo") -> Path:
    """$SLURM_HETERO_HOME/SITE; else root's clusters (root runs them) live in
    /var/lib/slurm-hetero/SITE, where other users' jobs reach them (root's home is private),
    anyone else's in ~/.local/state/slurm-hetero/SITE."""
    base = os.environ.get("SLURM_HETERO_HOME") or (
        "/var/lib/slurm-hetero" if os.getuid() == 0 else os.path.expanduser("~/.local/state/slurm-hetero"))
    return Path(base) / site_name


def find_spank_plugin() -> str | None:
    """The built SPANK plugin: $SLURM_HETERO_SPANK, else spank/build/ of this checkout."""
    env = os.environ.get("SLURM_HETERO_SPANK")
    if env:
        return env
    built = Path(__file__).resolve().parents[2] / "spank" / "build" / "hetero.so"
    return str(built) if built.exists() else None


def _emulated_device(path: Path) -> None:
    """A character device standing in for an accelerator (a harmless copy of /dev/null).

    slurmd accepts plain files too (with a warning), so without CAP_MKNOD we fall back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_char_device():
        return
    path.unlink(missing_ok=True)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        path.touch()


# A configless slurmd ($1: this cluster's munge socket, $2: node-etc, $3: NODE_DIR, then its
# argv) in its own mount namespace (Cluster.start_slurmd). Arguments, never interpolated.
_CONFIGLESS_SLURMD = ('mount -t tmpfs -o mode=755 tmpfs /run && mkdir /run/munge && '
                      'ln -s "$1" /run/munge/munge.socket.2 && mount --bind "$2" "$3" && shift 3 && '
                      'exec env -u SLURM_CONF "$@"')


def with_configless(site: Site) -> Site:
    """The site with SlurmctldParameters=enable_configless (added to the site's own
    SlurmctldParameters where it has one)."""
    if site.slurm.configless:
        return site
    lines = list(site.slurm.extra_lines)
    mine = [i for i, ln in enumerate(lines) if ln.split("=", 1)[0].strip().lower() == "slurmctldparameters"]
    if not mine:
        lines.append("SlurmctldParameters=enable_configless")
    else:  # Slurm takes the last one
        value = unquote(lines[mine[-1]].split("=", 1)[1].strip())
        lines[mine[-1]] = f"SlurmctldParameters={value},enable_configless"
    return dataclasses.replace(site, slurm=dataclasses.replace(site.slurm, extra_lines=tuple(lines)))


def _hook_link(link: Path, target: str, key: str) -> None:
    """One file of a Prolog/Epilog folder (conf/render.py node_hooks), as the Ansible role
    links it on every compute node; all of this cluster's nodes run on this machine."""
    try:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and os.readlink(link) == target:
            return
        tmp = link.with_name(f".{link.name}.tmp")
        tmp.unlink(missing_ok=True)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except OSError as e:
        raise InputError(f"slurm.{key.lower()}: cannot link {link} -> {target} for the node agent: "
                         f"{e.strerror}") from e


def bridge_every(clock: fakeclock.ClockSpec | None) -> float:
    """Seconds between the bridge daemon's rounds: 2 s, and on a replay clock once a real
    second at most (each round runs squeue and sinfo: K rounds a real second would not fit).

    >>> bridge_every(None), bridge_every(fakeclock.ClockSpec(1)), bridge_every(fakeclock.ClockSpec(20))
    (2.0, 2.0, 20.0)
    """
    return 2.0 if clock is None else max(2.0, clock.speed)


def daemon_margin(every: float, rounds: float | None = None) -> tuple[float, float]:
    """(seconds, share of the limit) before a shortened limit's end at which the cluster's
    bridge daemon extends it: as it ships, 120 s or three rounds, and 10%; with `rounds` (the
    replay's tight arms) that many rounds and no share.

    >>> daemon_margin(2.0), daemon_margin(50.0), daemon_margin(50.0, 1.5)
    ((120.0, 0.1), (150.0, 0.1), (75.0, 0.0))
    """
    if rounds is not None:
        return rounds * every, 0.0
    return max(ExtendPolicy.margin_s, 3 * every), ExtendPolicy.share


def without_bridge(slurm_conf: str) -> str:
    """slurm.conf with the bridge's job_submit.lua taken out (replay's `plain` arm).

    >>> without_bridge("A=1\\nJobSubmitPlugins=lua\\nB=2\\n")
    'A=1\\n# JobSubmitPlugins: none (replay arm without the bridge)\\nB=2\\n'
    """
    return re.sub(r"(?m)^JobSubmitPlugins=.*$", "# JobSubmitPlugins: none (replay arm without the bridge)",
                  slurm_conf)


# Each emulated node is a slurmd process (~6.5 MB, a port); beyond this one machine chokes.
MAX_LOCAL_NODES = 64
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL
STEP_ID_MAX = 4294967291  # the batch step's id in its socket name; job ids below MaxJobId (8 digits)


# Commands (comm) of the processes a cluster runs, for `down`'s sweep of what its pidfiles missed.
LEFTOVER_COMMANDS = ("slurm", "munged", "mariadbd")


class ClusterMeta(TypedDict, total=False):
    """cluster.json: what `up` chose (ports, nodes) and what later commands need."""

    site: str
    site_path: str
    nodes: list[str]
    ctld_port: int
    dbd_port: int
    node_ports: dict[str, int]
    model: str | None
    sampled_nodes: list[str]  # nodes whose devices `node sample` meters (npu-smi stand-ins)
    # Replay: the accelerated clock every Slurm process reads, and whether the
    # bridge (job_submit.lua, bridge daemon) is on. Absent: real time, bridge on.
    clock: dict[str, float]  # {"speed": K, "offset_s": OFF}
    bridge: bool
    power: bool  # power saving on: a node's slurmd may be stopped (the node "asleep")
    configless: bool  # slurmd fetch their files from slurmctld (`start_slurmd`)
    exporters: dict[str, int]  # Prometheus exporters: node name (or "cluster") -> port


@dataclass(frozen=True)
class Daemon:
    name: str
    pidfile: Path
    expect: str  # substring of its command line, to never signal a reused pid
    log: Path
    supervised: bool = False  # restarted by its supervisor: may be down for a moment


class Cluster:
    def __init__(self, workdir: str | Path):
        self.workdir = Path(workdir).absolute()
        w = self.workdir
        if not _SAFE_PATH.match(str(w)):
            raise InputError(f"--workdir {str(w)!r}: Slurm cannot use this path; "
                             "allowed characters are letters, digits and . _ / + -")
        self.etc, self.log, self.run, self.state = w / "etc", w / "log", w / "run", w / "state"
        self.spool, self.dev, self.munge, self.db = w / "spool", w / "dev", w / "munge", w / "db"
        self.lib = w / "lib"  # the node side's code (`_install_lib`)
        self.conf = self.etc / "slurm.conf"
        # configless: slurm-hetero's node files, seen by each slurmd as NODE_DIR (start_slurmd)
        self.node_etc = w / "node-etc"
        self.agent_dir = w / "agent"  # the node agent's state and log
        # For a site with node_agent.shared_spool: every node's figures, one writer per job.
        self.shared_spool = w / "shared-spool"
        # The agent's devices: a file-backed fake per node (energy/fake.py).
        self.fake_devices = f"fake:{self.dev}/{{node}}/fake-devices.json"
        self.meta = w / "cluster.json"
        self.clock_file = self.run / "clock.json"  # the clock holder's join settings
        self.runner = Runner(slurm_conf=str(self.conf), timeout=30)
        self._join_clock()

    # ---- the accelerated clock (replay) -----------------------------------------------
    def clock(self) -> fakeclock.ClockSpec | None:
        return fakeclock.from_meta(self.info().get("clock"))

    def _join_clock(self) -> None:
        """Clients (this runner) and every daemon started from here read the cluster's
        clock when it has one and its holder runs; else real time."""
        live = self.clock() is not None and self.pid(self.daemon("clock")) is not None
        held = fakeclock.read_env(str(self.clock_file)) if live else {}
        self.runner.extra_env = fakeclock.join_env(held, fakeclock.libfaketime()) if held else {}

    def _start_clock(self, spec: fakeclock.ClockSpec) -> None:
        self.clock_file.unlink(missing_ok=True)
        fakeclock.remove_stale_segments()
        for _ in range(3):  # a wrapper that exits at once met a clock left with its pid: again
            proc = self._spawn(fakeclock.holder_argv(spec, str(self.clock_file), str(self.run / "clock.pid")),
                               log=self.log / "clock.log")
            def up_or_gone(p: subprocess.Popen[bytes] = proc) -> bool:
                return bool(fakeclock.read_env(str(self.clock_file))) or p.poll() is not None

            procs.wait_until(up_or_gone, 20)
            if fakeclock.read_env(str(self.clock_file)):
                self._join_clock()
                return
            if proc.poll() is None:
                break
            fakeclock.remove_stale_segments()
        raise RuntimeFailure("the clock holder (faketime) did not start in 20 s\n" + self.explain())

    # ---- what runs -------------------------------------------------------------------
    def info(self) -> ClusterMeta:
        try:
            data: ClusterMeta = json.loads(self.meta.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def daemons(self) -> list[Daemon]:
        """Daemons in start order (stopped in reverse)."""
        meta = self.info()
        nodes = meta.get("nodes", [])
        # The clock holder, when there is one, comes first: stopped last, after everything
        # that reads its clock.
        out = [Daemon("clock", self.run / "clock.pid", fakeclock.HOLDER_MODULE, self.log / "clock.log")
               ] if meta.get("clock") else []
        out += [
            Daemon("munged", self.munge / "munged.pid", "munged", self.munge / "munged.log"),
            Daemon("mariadb", self.db / "mariadb.pid", "mariadbd", self.db / "mariadb.log"),
            Daemon("slurmdbd", self.run / "slurmdbd.pid", "slurmdbd", self.log / "slurmdbd.log"),
            Daemon("slurmctld", self.run / "slurmctld.pid", "slurmctld", self.log / "slurmctld.log"),
        ]
        # The bridge daemon and its supervisor, which restarts it when it dies; the supervisor
        # comes after it here, so that `down` stops the supervisor first.
        if meta.get("bridge", True):
            out.append(Daemon("bridge", self.run / "bridge.pid", "bridge run", self.log / "bridge.log",
                              supervised=True))
            out.append(Daemon("bridge supervisor", self.run / "bridge-supervisor.pid", SUPERVISOR_MODULE,
                              self.log / "bridge.log"))
        out += [Daemon(f"sampler {n}", self.run / f"sampler-{n}.pid", "node sample",
                       self.log / f"sampler-{n}.log") for n in self.info().get("sampled_nodes", [])]
        out += [Daemon(f"slurmd {n}", self.run / f"slurmd-{n}.pid", "slurmd",
                       self.log / f"slurmd-{n}.log", supervised=bool(meta.get("power"))) for n in nodes]
        # Exporters last: stopped first, before the daemons they ask.
        out += [Daemon(f"exporter {n}", self.run / f"exporter-{n}.pid", "slurm_hetero.monitor",
                       self.log / f"exporter-{n}.log") for n in meta.get("exporters", {})]
        return out

    def daemon(self, name: str) -> Daemon | None:
        return next((d for d in self.daemons() if d.name == name), None)

    def pid(self, d: Daemon | None) -> int | None:
        if d is None:
            return None
        pid = procs.read_pid(d.pidfile)
        # Its name is not enough: a stale pidfile's pid may now be another cluster's slurmctld.
        return pid if pid and procs.alive(pid, d.expect) and procs.owned_by(pid, self.workdir) else None

    def stepds(self, jid: int) -> list[int]:
        """The slurmstepds of this cluster's job `jid` (another cluster on the machine may
        have a job of the same id: only those holding this cluster's files count)."""
        r = subprocess.run(["pgrep", "-f", f"slurmstepd: \\[{int(jid)}\\."], capture_output=True,
                           text=True, check=False)
        return [int(p) for p in r.stdout.split() if procs.is_under(int(p), self.workdir)]

    def is_up(self) -> bool:
        """Every daemon runs (a supervised one may be between two runs: its supervisor runs)."""
        ds = self.daemons()
        return bool(self.info()) and all(self.pid(d) for d in ds if not d.supervised)

    def nodes(self) -> dict[str, NodeInfo]:
        return parse_sinfo_nodes(self.runner.out(sinfo_nodes_argv()))

    # ---- up ---------------------------------------------------------------------------
    def up(self, site: Site, timeout: float = 90.0, log: object = print,
           model: Path | None = None, clock: fakeclock.ClockSpec | None = None,
           bridge: bool = True, configless: bool = False, margin_rounds: float | None = None) -> float:
        """Boot the cluster (or check an already running one); returns seconds to all-idle.
        `model`: an exported runtime model to compile into the bridge.

        For replay: `clock` runs every Slurm process on one accelerated clock
        (`clock.py`; slurm.conf then has no HealthCheck/TaskProlog, no Prolog/Epilog unless
        `clock.hooks`, its timeouts scaled, and the NPU samplers are not started);
        `bridge=False` leaves the bridge out (no job_submit.lua, no bridge daemon): Slurm as it comes.

        `configless` (implied by a configless site): slurmctld serves the configuration (the
        site gains SlurmctldParameters=enable_configless) and every slurmd fetches it
        (`start_slurmd`), as a configless site's nodes do: slurm-hetero's node files are only
        in NODE_DIR."""
        say = log if callable(log) else print
        t0 = time.monotonic()
        if self.is_up() and self.info().get("site") == site.name:
            say(f"cluster {site.name} already up in {self.workdir}")
            self._install_lib(say)  # this checkout's node-side code, as a fresh `up` would
            if model is not None:
                self.load_model(site, model)
            self._wait_idle(timeout)
            return time.monotonic() - t0
        if len(site.all_nodes) > MAX_LOCAL_NODES:
            raise InputError(f"{site.path or site.name}: the dev cluster runs one slurmd per node; "
                             f"this site has {len(site.all_nodes)} nodes, at most {MAX_LOCAL_NODES} "
                             "run on one machine (use the Ansible role for a real cluster)")
        longest = max(len(f"{self.spool.resolve()}/{n}/{n}_{'9' * 8}.{STEP_ID_MAX}") for n in site.all_nodes)
        if longest > SOCKET_PATH_MAX:
            # slurmstepd's socket is SlurmdSpoolDir/NODE/NODE_JOB.STEP: longer, and every job
            # fails to launch and is requeued, pending for ever ("socket path ... too long").
            raise InputError(f"{self.workdir}: too deep for a dev cluster: its step sockets would "
                             f"be {longest} characters long, a Unix socket path at most "
                             f"{SOCKET_PATH_MAX}; use a shorter folder")
        if any(self.pid(d) for d in self.daemons()):
            gone = [d.name for d in self.daemons() if not d.supervised and not self.pid(d)]
            say(f"a previous cluster in this workdir is partly running ({', '.join(gone) or 'another site'} "
                "not): stopping it first")
            self.down(log=say)
        self._open_folders(say)
        self._install_lib(say)
        self.runtime_dir(0, 0)
        nodes = site.all_nodes
        ports = procs.free_ports(2 + len(nodes))
        meta: ClusterMeta = {"site": site.name, "site_path": str(site.path or ""), "nodes": nodes,
                "ctld_port": ports[0], "dbd_port": ports[1],
                "node_ports": dict(zip(nodes, ports[2:], strict=True)),
                "model": str(model.resolve()) if model else self.info().get("model"),
                "sampled_nodes": [n for g in site.node_groups
                                  if is_sampled(g, self.fake_devices, site.node_agent.sample_stacks)
                                  for n in g.nodes]}
        if clock is not None:
            # The samplers feed the node agent, which replay takes out with the Prolog (kept
            # with `clock.hooks`, for the fake GPUs' policies: npu-smi nodes get no counters).
            meta["clock"] = fakeclock.to_meta(clock)
            meta["sampled_nodes"] = []
        if not bridge:
            meta["bridge"] = False
        if site.power.enabled:
            meta["power"] = True
        if configless or site.slurm.configless:  # the rendered files name NODE_DIR then
            meta["configless"] = True
            site = with_configless(site)
        write_files({"cluster.json": json.dumps(meta, indent=1)}, self.workdir)
        self._write_confs(site, meta)
        self._start_munge()
        self._start_mariadb()
        if clock is not None:
            self._start_clock(clock)  # after munged and MariaDB: they stay on real time
        dbd_port = meta["dbd_port"]
        self.start_slurmdbd(dbd_port)
        limits = self._register_accounting(site)
        self.start_slurmctld()
        self._apply_qos_limits(limits)
        if bridge:
            every = bridge_every(clock)
            margin, share = daemon_margin(every, margin_rounds)
            self.start_bridge(site, every=every, margin=margin, share=share)
        for n in meta["sampled_nodes"]:
            self._spawn([sys.executable, "-m", "slurm_hetero.cli", "node", "sample", "--node", n,
                         "--pidfile", str(self.run / f"sampler-{n}.pid")],
                        log=self.log / f"sampler-{n}.log")
        for n in nodes:
            self.start_slurmd(n)
        self._wait_idle(timeout - (time.monotonic() - t0))
        # A sampler writes its own pidfile once Python has imported it (seconds on a loaded
        # machine): `up` is done only when it has, or a second `up` sees a daemon missing and
        # boots the cluster again.
        samplers = [d for d in self.daemons() if d.name.startswith("sampler ")]
        if not procs.wait_until(lambda: all(self.pid(d) for d in samplers),
                                max(10.0, timeout - (time.monotonic() - t0))):
            missing = [d.name for d in samplers if not self.pid(d)]
            raise RuntimeFailure(f"{', '.join(missing)} did not come up (see {self.log})\n" + self.explain())
        return time.monotonic() - t0

    # ---- what other users' jobs need -------------------------------------------------------
    def _open_folders(self, say: Callable[[str], object]) -> None:
        """The workdir and the folders jobs read, root's and searchable by all (whatever
        the umask); the database's root's alone. Says when a folder above the workdir keeps
        other users out (only root's jobs can run then)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.workdir.stat().st_uid != os.getuid():
            raise InputError(f"--workdir {self.workdir}: owned by another user, who could change the "
                             "files root's daemons run; use a folder of your own")
        for d in (self.workdir, self.etc, self.log, self.run, self.state, self.spool, self.dev):
            d.mkdir(exist_ok=True)
            os.chmod(d, 0o755)
        self.db.mkdir(mode=0o700, exist_ok=True)
        blocked = unreachable_part(self.workdir)
        if blocked is not None:
            say(f"note: other users cannot search {blocked}: only root's jobs can run on this cluster "
                f"(a --workdir under /var/lib or /tmp lets theirs run)")
        py = node_python()
        if unreachable_part(py) is not None:
            say(f"note: other users cannot run {py}: their jobs' TaskProlog and containers fail")

    def _install_lib(self, say: Callable[[str], object]) -> None:
        """This checkout's slurm_hetero package and SPANK plugin into lib/, readable by every
        job's user and only root's to change, as a real site installs them under
        /usr/local/lib/slurm-hetero: the TaskProlog and the container wrapper run from there
        (as the job's user, `python3 -I -S`), sbatch loads the plugin from there, wherever
        the checkout lives. The package is swapped in whole."""
        self.lib.mkdir(exist_ok=True)
        os.chmod(self.lib, 0o755)
        new = Path(tempfile.mkdtemp(prefix=".install.", dir=self.lib))
        try:
            shutil.copytree(PACKAGE, new / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
            # Compiled by root: users cannot write __pycache__ there. -d: the installed path
            # in tracebacks.
            r = subprocess.run([node_python(), "-I", "-m", "compileall", "-q", "-d",
                                str(self.lib / PACKAGE.name), str(new / PACKAGE.name)],
                               capture_output=True, text=True, check=False)
            if r.returncode != 0:
                say(f"note: {node_python()} could not compile all of lib/ (the node side may still run):\n"
                    + (r.stdout + r.stderr).strip()[-500:])
            plugin = find_spank_plugin()
            if plugin:
                shutil.copyfile(plugin, new / "hetero.so")
            for root, dirs, files in os.walk(new):
                for name in dirs:
                    os.chmod(os.path.join(root, name), 0o755)
                for name in files:
                    os.chmod(os.path.join(root, name), 0o755 if name.endswith(".so") else 0o644)
            installed = self.lib / PACKAGE.name
            if installed.exists():
                installed.rename(new / "previous")
            (new / PACKAGE.name).rename(installed)
            if plugin:
                os.replace(new / "hetero.so", self.lib / "hetero.so")
            else:
                (self.lib / "hetero.so").unlink(missing_ok=True)
        finally:
            shutil.rmtree(new, ignore_errors=True)

    def spank_plugin(self) -> str | None:
        """The SPANK plugin plugstack.conf names: the copy in lib/ once installed."""
        installed = self.lib / "hetero.so"
        return str(installed) if installed.exists() else find_spank_plugin()

    def runtime_dir(self, uid: int, gid: int) -> Path:
        """run/user/UID: a user's own folder (0700), made by root as logind makes
        /run/user/UID on a real node; oci.conf points runc's state there (`runc_root`), so
        no user sees or changes another's containers, and no user can make another's."""
        top = self.run / "user"
        top.mkdir(exist_ok=True)
        os.chmod(top, 0o755)
        d = top / str(uid)
        d.mkdir(mode=0o700, exist_ok=True)
        os.chown(d, uid, gid)
        os.chmod(d, 0o700)
        return d

    def runc_root(self, uid: int = 0) -> Path:
        """runc's state folder for the containers of user `uid` (oci.conf's --root)."""
        return self.run / "user" / str(uid) / RUNC_STATE

    def add_user(self, name: str, timeout: float = 30.0) -> pwd.struct_passwd:
        """Let the local user `name` (made if missing: a system user without home or shell)
        run jobs here: an association in the cluster's account, as root has, and its runtime
        folder. Returns once slurmctld knows the association."""
        user = ensure_system_user(name)
        site = self.info().get("site")
        if not site:
            raise RuntimeFailure(f"no cluster in {self.workdir}: `cluster up` first")
        # check=False: an association that exists already is "nothing new added" (exit 1).
        self.runner.run(sacctmgr_argv("add", "user", name, f"account={ACCOUNT}", f"cluster={site}"),
                        check=False)
        self.runtime_dir(user.pw_uid, user.pw_gid)

        def known() -> bool:
            r = self.runner.run(assoc_mgr_user_argv(name), check=False, timeout=10)
            return f"UserName={name}(" in str(r.stdout)

        if not procs.wait_until(known, timeout, 0.3):
            raise RuntimeFailure(f"slurmctld does not know user {name} {timeout:.0f} s after sacctmgr added "
                                 "it\n" + self.explain())
        return user

    def start_slurmd(self, node: str, rebooted: bool = False, env: dict[str, str] | None = None) -> None:
        """One node's slurmd; `rebooted`: report a fresh boot (-b), as a resumed node must;
        `env`: what to add to (or change in) its environment (a fault: a skewed clock).

        Configless, each slurmd runs in a mount namespace of its own: Slurm 22.05's slurmd
        fetches its configuration before it knows AuthInfo and has no --authinfo (23.x), so
        it asks munge at the default /run/munge/munge.socket.2 (here a link to this cluster's
        socket, on a private /run that also keeps the /run/slurm/conf link slurmd makes to
        its cache apart from the other slurmds'); and NODE_DIR is this cluster's node-etc/."""
        argv = ["slurmd", *(["-b"] if rebooted else []), "-N", node]
        if self.info().get("configless"):
            server = f"127.0.0.1:{self.info()['ctld_port']}"
            Path(NODE_DIR).mkdir(mode=0o755, parents=True, exist_ok=True)  # the mount point
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _CONFIGLESS_SLURMD, "sh",
                    str(self.munge / "munge.socket"), str(self.node_etc), NODE_DIR,
                    *argv, "--conf-server", server]
        self._spawn(argv, env=env)

    def start_exporters(self, site: Site, every: float = 1.0, tier_s: float = 10.0,
                        cluster_every: float = 60.0, sacct_every: float = 600.0,
                        fast_every: float = 10.0) -> dict[str, int]:
        """A node exporter for every node (its fake devices, as the agent sees them) and the
        cluster exporter, on free loopback ports; `monitor/prometheus.yml` (with its rules)
        scrapes them. Returns {node or "cluster": port}; `down` stops them. On a replay clock
        the exporters run on it: their seconds are the clock's."""
        from slurm_hetero.monitor.cluster import ACCOUNTING_TIMEOUT_S
        from slurm_hetero.monitor.render import PrometheusSettings, render_prometheus

        meta = self.info()
        nodes = meta.get("nodes", [])
        ports = dict(zip([*nodes, "cluster"], procs.free_ports(len(nodes) + 1), strict=True))
        arch = {n: g.architecture for g in site.node_groups for n in g.nodes}
        py = [sys.executable, "-m", "slurm_hetero.monitor"]
        # The exporters' timeouts run on the clock too: slurmdbd gets its 10 s in real time
        # (at x50, 0.2 real s made a busy slurmdbd look down and fired HeteroAccountingDown).
        speed = float(meta.get("clock", {}).get("speed", 1.0))
        for name, port in ports.items():
            common = ["--port", str(port), "--listen", "127.0.0.1",
                      "--pidfile", str(self.run / f"exporter-{name}.pid")]
            argv = ([*py, "cluster-exporter", "--site", str(site.path), "--snapshot",
                     str(self.state / "hetero-snapshot.lua"), "--every", f"{cluster_every:g}",
                     "--sacct-every", f"{sacct_every:g}", "--fast-every", f"{fast_every:g}",
                     "--accounting-timeout", f"{min(3600.0, ACCOUNTING_TIMEOUT_S * speed):g}", *common]
                    if name == "cluster" else
                    [*py, "node-exporter", "--node", name, "--every", f"{every:g}", "--tier", f"{tier_s:g}",
                     "--arch", arch.get(name, "x86_64"), *common])
            self._spawn(argv, log=self.log / f"exporter-{name}.log")
        meta["exporters"] = ports
        write_files({"cluster.json": json.dumps(meta, indent=1)}, self.workdir)
        for name, port in ports.items():
            if not procs.wait_until(functools.partial(procs.port_open, port), 30):
                raise RuntimeFailure(f"the {name} exporter did not listen on {port}:\n"
                                     + (self.log / f"exporter-{name}.log").read_text()[-2000:])
        settings = PrometheusSettings(node_targets=[f"127.0.0.1:{ports[n]}" for n in nodes],
                                      cluster_targets=[f"127.0.0.1:{ports['cluster']}"])
        write_files(render_prometheus(settings), self.workdir / "monitor")
        return ports

    def stop_exporters(self) -> None:
        meta = self.info()
        for d in self.daemons():
            if d.name.startswith("exporter "):
                pid = self.pid(d)
                if pid:
                    procs.stop(pid, d.expect)
        meta.pop("exporters", None)
        write_files({"cluster.json": json.dumps(meta, indent=1)}, self.workdir)

    def ship_energy(self) -> int:
        """Ship every node's spooled per-job figures into the accounting record now (the
        health check does it each cycle; the demo and tests that read them at once call
        this). Returns how many were written."""
        from slurm_hetero.energy.ship import ship, ship_shared
        from slurm_hetero.energy.state import AgentConfig, NodeState

        cfg = AgentConfig.load(self.etc / "hetero-agent.json")
        # One node after the other from here: no health checks at once to spread out.
        nodes = self.info().get("nodes", [])
        written = sum(ship(self.runner, NodeState(cfg, n), n, sleep=lambda _: None).written for n in nodes)
        if cfg.shared_spool:
            self.shared_spool.mkdir(mode=0o755, exist_ok=True)
            written += sum(ship_shared(self.runner, cfg.shared_spool, n).written for n in nodes)
        return written

    def load_model(self, site: Site, model: Path | None) -> None:
        """Compile an exported runtime model into the running bridge (None: take it out).
        slurmctld re-reads job_submit.lua when it changes: no restart."""
        meta = self.info()
        meta["model"] = str(model.resolve()) if model else None
        write_files({"cluster.json": json.dumps(meta, indent=1)}, self.workdir)
        files = render_site(site, self.profile(meta))
        write_files({"job_submit.lua": files["job_submit.lua"]}, self.etc)

    def profile(self, meta: ClusterMeta) -> Profile:
        host = socket.gethostname().split(".")[0]
        model = meta.get("model")
        try:
            model_lua = Path(str(model)).read_text() if model else None
        except OSError as e:
            raise InputError(f"--model {model}: cannot read the exported model: {e.strerror}") from e
        return Profile(
            conf_dir=str(self.etc), ctld_host=host, ctld_addr="127.0.0.1",
            ctld_port=meta["ctld_port"], dbd_host="127.0.0.1", dbd_port=meta["dbd_port"],
            state_dir=str(self.state), spool_dir=str(self.spool), log_dir=str(self.log),
            run_dir=str(self.run), dev_dir=str(self.dev), slurm_user="root",
            auth_info=f"socket={self.munge / 'munge.socket'}",
            proctrack="proctrack/linuxproc", task_plugins="task/none", config_overrides=True,
            mail_prog="/bin/true",
            spank_plugin=self.spank_plugin(),
            slurm_version=self.runner.version(),
            # The node agent from this environment, with file-backed fake devices per node.
            prolog=str(Path(sys.executable).parent / "slurm-hetero-prolog"),
            epilog=str(Path(sys.executable).parent / "slurm-hetero-epilog"),
            restore=str(Path(sys.executable).parent / "slurm-hetero-restore"),
            agent_cli=str(Path(sys.executable).parent / "slurm-hetero"),
            # Every node in turn (CYCLE) within 20 s: a device a killed slurmstepd left
            # changed is back to its defaults within about that.
            health_check_interval=20,
            agent_state_dir=str(self.agent_dir),
            agent_shared_spool=str(self.shared_spool),  # used where the site asks for one
            agent_devices=self.fake_devices,
            node_ports=dict(meta["node_ports"]),
            # containers and the TaskProlog run as the job's user: the installed lib/ under
            # an interpreter every user can run; runc's state per user, image bundles in
            # the workdir.
            python=node_python(), hetero_lib=str(self.lib),
            runc_root=str(self.run / "user" / "%U" / RUNC_STATE), images_root=str(self.workdir / "images"),
            # Runtime model: compiled in when given. The bridge daemon writes the snapshot
            # (its heartbeat) every 2 s: 10 s without one means it is down (on a replay
            # clock it writes less often in faked seconds: 5 rounds without one).
            model_lua=model_lua,
            snapshot_stale_s=max(10, int(5 * bridge_every(fakeclock.from_meta(meta.get("clock"))))),
        )

    def _write_confs(self, site: Site, meta: ClusterMeta) -> None:
        profile = self.profile(meta)
        if not meta.get("bridge", True):  # no daemon ends jobs at their own limits: no OverTimeLimit
            site = dataclasses.replace(site, partitions=tuple(
                dataclasses.replace(p, predicted_limits=False) for p in site.partitions))
        files = render_site(site, profile)
        self.shared_spool.mkdir(exist_ok=True)
        self.shared_spool.chmod(0o755)  # root's alone, as the agent checks
        # A site without accelerators renders an empty GresTypes= line, which Slurm refuses
        # (conf/render.py should leave it out; until then the dev cluster does).
        files["slurm.conf"] = re.sub(r"(?m)^GresTypes=\n", "", files["slurm.conf"])
        spec = fakeclock.from_meta(meta.get("clock"))
        if spec is not None:
            files["slurm.conf"] = fakeclock.accelerate_conf(files["slurm.conf"], spec)
        if not meta.get("bridge", True):
            files["slurm.conf"] = without_bridge(files["slurm.conf"])
        files["slurmdbd.conf"] = render_template(
            "slurmdbd.conf", dbd_port=meta["dbd_port"], db_socket=self.db_socket,
            auth_info=profile.auth_info, log_dir=self.log, run_dir=self.run)
        write_files(files, self.etc, modes={"slurmdbd.conf": 0o600})
        if meta.get("configless"):  # what a configless node has of ours: NODE_DIR's files
            write_files({n: files[n] for n in NODE_FILES if n in files}, self.node_etc)
            os.chmod(self.node_etc, 0o755)
        for hook in node_hooks(site, profile):  # the agent beside the site's own Prolog/Epilog
            for link, target in hook.links:
                _hook_link(self._on_node(link), target, hook.key)
        write_stubs(site, str(profile.images_root))  # containers: what --image names
        for g in site.node_groups:
            for node in g.nodes:
                (self.spool / node).mkdir(parents=True, exist_ok=True)
                for path in device_paths(g, node, profile):
                    _emulated_device(Path(path))
                # containers: control devices and driver folders the wrapper mounts.
                ctl_devices, driver_dirs = emulated_paths(site, profile, g, node)
                for path in ctl_devices:
                    _emulated_device(Path(path))
                for path in driver_dirs:
                    Path(path).mkdir(parents=True, exist_ok=True)
                fake = self.dev / node / "fake-devices.json"
                if g.accelerators and not fake.exists():
                    a = g.accelerators[0]
                    # Where the real backend has no counters (npu-smi), neither has the fake:
                    # `node sample` keeps them, as it would on the real node.
                    counter = not any(x.model.stack in COUNTERLESS_STACKS for x in g.accelerators)
                    FakeDevices.create(fake, a.model.gres_name, a.count, a.model.id,
                                       default_w=a.model.tdp_watts,
                                       memory_mib=a.model.device_memory_mib, counter=counter)

    def _on_node(self, path: str) -> Path:
        """Where a node path lies on this machine: NODE_DIR's files are node-etc/'s when configless."""
        if self.info().get("configless") and path.startswith(NODE_DIR + "/"):
            return self.node_etc / path[len(NODE_DIR) + 1:]
        return Path(path)

    def _spawn(self, argv: list[str], log: Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a daemon detached from our session (it outlives `cluster up`)."""
        out = open(log or os.devnull, "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(argv, env={**self.runner.env(), **(env or {})}, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.workdir)
        except FileNotFoundError as e:
            raise RuntimeFailure(f"{argv[0]}: not installed (run `make deps` as root)") from e
        finally:
            out.close()

    def _start(self, name: str, argv: list[str], ready: Callable[[], bool], timeout: float = 30.0,
               env: dict[str, str] | None = None) -> None:
        proc = self._spawn(argv, env=env)

        def ready_or_failed() -> bool:
            # Daemons fork and their first process exits 0; a non-zero exit is a failure.
            return ready() or (proc.poll() is not None and proc.returncode != 0)

        procs.wait_until(ready_or_failed, timeout)
        if not ready():
            why = f"exited {proc.returncode}" if proc.returncode else f"did not come up in {timeout:.0f} s"
            raise RuntimeFailure(f"{name} {why}\n" + self.explain())

    def _start_munge(self) -> None:
        self.munge.mkdir(mode=0o755, exist_ok=True)
        os.chmod(self.munge, 0o755)  # munged wants execute for all on its socket folder
        key = self.munge / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
        sock = self.munge / "munge.socket"
        # --force: munged wants every folder above its socket open to all users, which a
        # private workdir (a 0700 home) is not; then only root's clients reach it.
        self._start("munged", [
            "munged", "--force", f"--socket={sock}", f"--key-file={key}",
            f"--pid-file={self.munge}/munged.pid",
            f"--log-file={self.munge}/munged.log", f"--seed-file={self.munge}/munged.seed",
        ], lambda: sock.exists() and self.pid(self.daemon("munged")) is not None)

    @property
    def db_socket(self) -> Path:
        return self.db / "mysql.sock"

    def _start_mariadb(self) -> None:
        """This cluster's own MariaDB, reachable only by root on this machine: no TCP port
        (skip-networking), its socket in a root-only folder, and its root account
        authenticated by the connecting process's uid (unix_socket), with no password."""
        os.chmod(self.db, 0o700)
        data = self.db / "data"
        # Its own temporary folder: with /tmp shared, two clusters bootstrapping at once
        # (parallel tests, replays side by side) once lost a temporary table file to each
        # other ("Error on delete of '/tmp/#sql-temptable-...'") and mysql_install_db failed.
        tmp = self.db / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        if not (data / "mysql").exists():
            shutil.rmtree(data, ignore_errors=True)
            r = subprocess.run(["mysql_install_db", "--no-defaults", f"--datadir={data}",
                                "--user=root", "--auth-root-authentication-method=socket",
                                "--skip-test-db", f"--tmpdir={tmp}"],
                               capture_output=True, text=True, check=False,
                               env={**os.environ, "TMPDIR": str(tmp)})
            if r.returncode != 0:
                raise RuntimeFailure("mysql_install_db failed:\n" + r.stderr[-2000:])
        mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        self.db_socket.unlink(missing_ok=True)
        self._spawn([mariadbd, "--no-defaults", f"--datadir={data}",
                     f"--socket={self.db_socket}", "--skip-networking", f"--tmpdir={tmp}",
                     "--user=root", f"--pid-file={self.db}/mariadb.pid",
                     "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
                     "--innodb-log-file-size=16M"], log=self.db / "mariadb.log")
        if not procs.wait_until(lambda: procs.unix_socket_open(self.db_socket), 60):
            raise RuntimeFailure("MariaDB did not come up in 60 s\n" + self.explain())
        self._lock_down_db()

    def _sql(self, statement: str) -> str:
        client = shutil.which("mariadb") or shutil.which("mysql") or "mysql"
        # --skip-ssl: the client of MariaDB 11.4+ (Debian 13) demands TLS by default, which a
        # server without certificates (Debian 12's 10.11) refuses; over a root-only unix
        # socket TLS adds nothing.
        r = subprocess.run([client, "--no-defaults", "--skip-ssl", f"--socket={self.db_socket}", "-u", "root",
                            "-N", "-B", "-e", statement], capture_output=True, text=True,
                           check=False, timeout=30)
        if r.returncode != 0:
            raise RuntimeFailure(f"MariaDB: {statement[:60]}...: {r.stderr.strip()[-300:]}")
        return r.stdout

    def _lock_down_db(self) -> None:
        """Only root@localhost by socket uid: no anonymous or TCP-host accounts, no test
        database (also for a data folder made before this was so)."""
        accounts = [ln.split("\t") for ln in self._sql(
            "SELECT User, Host FROM mysql.user WHERE Host <> '' AND "
            "(User = '' OR (User = 'root' AND Host <> 'localhost'))").splitlines() if ln]
        drops = [f"DROP USER IF EXISTS {_sql_quote(u)}@{_sql_quote(h)};" for u, h in accounts]
        self._sql(" ".join([*drops, "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket;",
                            "DROP DATABASE IF EXISTS test;", "FLUSH PRIVILEGES;"]))

    def start_bridge(self, site: Site, every: float = 2.0, margin: float = ExtendPolicy.margin_s,
                     wait: float = 60.0, history: bool = True, share: float = ExtendPolicy.share) -> None:
        """The bridge daemon (capacity snapshot and heartbeat, limit extensions, SiteFactor),
        under a supervisor that restarts it when it dies; `wait`: seconds for its first
        snapshot (a queue of tens of thousands of jobs takes longer to read, and a loaded
        machine longer to start Python: 20 s failed a replay among ten); without
        `history` it publishes no users' history (the model's predictions stay as exported)."""
        if site.path is None:
            raise InputError("cluster up needs a site loaded from a file (the daemon re-reads it)")
        snap = self.state / "hetero-snapshot.lua"
        snap.unlink(missing_ok=True)
        bridge = [sys.executable, "-m", "slurm_hetero.cli", "bridge", "run",
                  "--site", str(site.path.resolve()), "--snapshot", str(snap), "--every", str(every),
                  "--margin", str(margin), "--margin-share", str(share),
                  "--pidfile", str(self.run / "bridge.pid")]
        model = self.info().get("model")
        if not history:
            bridge += ["--no-history"]
        elif model and tail_path(Path(str(model))).is_file():  # the users' history goes on from it
            bridge += ["--model-tail", str(tail_path(Path(str(model))))]
        (self.state / HISTORY_FILE).unlink(missing_ok=True)  # a new daemon publishes its own
        self._spawn([sys.executable, "-m", SUPERVISOR_MODULE, "--name", "bridge",
                     "--pidfile", str(self.run / "bridge-supervisor.pid"), "--", *bridge],
                    log=self.log / "bridge.log")
        if not procs.wait_until(snap.exists, wait):
            raise RuntimeFailure(f"the bridge daemon wrote no snapshot in {wait:g} s\n" + self.explain())

    def stop_bridge(self) -> None:
        """The supervisor first (it stops the daemon), then the daemon if it outlived it."""
        for d in sorted((d for d in self.daemons() if d.name.startswith("bridge")),
                        key=lambda d: d.supervised):
            pid = self.pid(d)
            if pid:
                procs.stop(pid, d.expect)

    def restart_slurmctld(self, timeout: float = 30.0) -> None:
        """Stop slurmctld and start it again: jobs come back from its saved state, partitions
        from slurm.conf (a crash or an upgrade). On a replay clock only while its holder runs
        (the new slurmctld joins it, as the first did; without it, it would start off it)."""
        d = self.daemon("slurmctld")
        pid = self.pid(d)
        if d is not None and pid:
            procs.stop(pid, d.expect)
        self.start_slurmctld(timeout)

    def start_slurmctld(self, timeout: float = 30.0) -> None:
        """slurmctld, until it answers a ping."""
        self._check_clock("slurmctld")
        self._start("slurmctld", ["slurmctld"], self._ctld_ready, timeout=timeout)

    def start_slurmdbd(self, port: int | None = None, timeout: float = 30.0) -> None:
        """slurmdbd, until its port (cluster.json's, unless given) takes connections. It
        reaches MariaDB through its socket only: StorageHost=localhost makes the client
        library use a unix socket, MYSQL_UNIX_PORT says which."""
        self._check_clock("slurmdbd")
        dbd_port = port if port is not None else self.info().get("dbd_port", 0)
        self._start("slurmdbd", ["slurmdbd"], lambda: procs.port_open(dbd_port), timeout=timeout,
                    env={"MYSQL_UNIX_PORT": str(self.db_socket)})

    def _check_clock(self, name: str) -> None:
        """A daemon started on a replay cluster must join its clock: refuse while the holder
        does not run (it would start a clock of its own)."""
        if self.clock() is not None and not self.runner.extra_env:
            raise RuntimeFailure(f"{name}: the cluster's replay clock is not running; "
                                 "it cannot start on that clock")

    def _ctld_ready(self) -> bool:
        r = self.runner.run(ping_argv(), check=False, timeout=5)
        return "UP" in str(r.stdout)

    def _register_accounting(self, site: Site) -> list[list[str]]:
        """Cluster, QoS tiers, account and user; returns the tiers' GrpTRES commands, which
        name GRES TRES that exist only once slurmctld has registered them."""
        limits: list[list[str]] = []
        existing = self.runner.out(sacctmgr_list_argv("cluster", "cluster"))
        if site.name not in existing.split():
            self.runner.run(sacctmgr_argv("add", "cluster", site.name))
        qos_file = (self.etc / "qos.sacctmgr").read_text()
        have_qos = self.runner.out(sacctmgr_list_argv("qos", "name")).split()
        for line in qos_file.splitlines():
            argv = shlex.split(line, comments=True)
            if not argv:
                continue
            if argv[2:4] == ["add", "qos"] and argv[4] in have_qos:
                continue
            if any(a.startswith("GrpTRES=") for a in argv):
                limits.append(argv)
                continue
            self.runner.run(argv)
        self.runner.run(sacctmgr_argv("add", "account", ACCOUNT, f"cluster={site.name}",
                                      "description=slurm-hetero dev cluster", "organization=local"),
                        check=False)
        self.runner.run(sacctmgr_argv("add", "user", "root", f"account={ACCOUNT}", f"cluster={site.name}"),
                        check=False)
        return limits

    def _apply_qos_limits(self, commands: list[list[str]]) -> None:
        for argv in commands:
            last: list[str] = []

            def applied(argv: list[str] = argv, last: list[str] = last) -> bool:
                p = self.runner.run(argv, check=False)
                last[:] = [str(p.stderr or p.stdout)]
                return p.returncode == 0

            # slurmctld registers the GRES TRES with slurmdbd just after it starts.
            if not procs.wait_until(applied, 30, 1.0):
                raise RuntimeFailure(f"{' '.join(argv)} failed: {''.join(last).strip()}")

    def _wait_idle(self, timeout: float) -> None:
        want = set(self.info().get("nodes", []))
        last: dict[str, NodeInfo] = {}

        def all_idle() -> bool:
            nonlocal last
            try:
                last = self.nodes()
            except RuntimeFailure:
                return False
            return want <= {n for n, i in last.items() if i.state in ("idle", "mixed", "allocated")}

        if not procs.wait_until(all_idle, max(timeout, 5.0), 0.5):
            bad = [f"  {n}: {i.state} {i.reason}".rstrip() for n, i in sorted(last.items())
                   if i.state not in ("idle", "mixed", "allocated")]
            missing = sorted(want - set(last))
            msg = "nodes did not all become idle:\n" + "\n".join(bad)
            if missing:
                msg += f"\n  not known to slurmctld: {', '.join(missing)}"
            raise RuntimeFailure(msg + "\n" + self.explain())

    # ---- down -------------------------------------------------------------------------
    def down(self, log: object = print) -> list[str]:
        """Stop every process this cluster started; returns the names stopped."""
        say = log if callable(log) else print
        stopped = []
        ds = self.daemons()
        if self.pid(self.daemon("slurmctld")) and self.pid(self.daemon("munged")):  # end jobs cleanly
            try:
                users = self.runner.run(sacctmgr_list_argv("user", "user"), check=False, timeout=10).stdout
                for user in dict.fromkeys(["root", *users.split()]):
                    self.runner.run(cancel_user_argv(user), check=False, timeout=10)
                procs.wait_until(lambda: not self.runner.run(
                    squeue_ids_argv(), check=False, timeout=5).stdout.strip(), 10)
            except RuntimeFailure as e:  # best effort: a slow slurmdbd must never stop `down` itself
                say(f"jobs not ended cleanly ({e}); stopping the daemons")
        for d in reversed(ds):
            pid = self.pid(d)
            if pid:
                procs.stop(pid, d.expect)
                stopped.append(d.name)
        # Leftovers: slurmstepds, and job processes whose slurmstepd died (proctrack/linuxproc
        # cannot reap those). They hold files in our spool; their sessions go with them.
        for pid in procs.processes_under(self.spool):
            procs.stop_session(pid)
            stopped.append(f"leftover {pid}")
        # A slurmstepd still finishing a job cancelled just before the stop may hold only our
        # log files (not the spool), and a daemon its pidfile no longer names still has its cwd
        # in our log folder (a slurmctld outlived a replay array task's `down` once, on CI):
        # any Slurm, munge or MariaDB process with files of this cluster is ours.
        for pid in procs.processes_under(self.workdir):
            if procs.command_name(pid).startswith(LEFTOVER_COMMANDS):
                say(f"left running, stopped: {pid} {procs.cmdline(pid).strip()}")
                procs.stop_session(pid)
                stopped.append(f"leftover {pid}")
        say(f"stopped {len(stopped)} processes of {self.workdir}")
        return stopped

    # ---- diagnosis --------------------------------------------------------------------
    def log_files(self) -> list[Path]:
        return [d.log for d in self.daemons() if d.log.exists()]

    def explain(self, lines: int = 12) -> str:
        """The log lines that most likely explain a failure: errors and fatals, newest last."""
        out = []
        for f in self.log_files():
            text = f.read_text(errors="replace").splitlines()
            bad = [ln for ln in text if re.search(r"error|fatal|ERROR|Error", ln)]
            if bad:
                out.append(f"--- {f.relative_to(self.workdir)}")
                out += bad[-lines:]
        return "\n".join(out) or "(no errors in the logs)"
