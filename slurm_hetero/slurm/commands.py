"""Command lines for the Slurm commands the rest of the package runs, apart from their
parsers (scontrol.py, squeue.py, sacct.py, parse.py hold those).

Every builder returns a fresh list: callers may extend it. Job ids are checked to be
numbers (array/het ids `12_3`, `12+1` allowed) so that no text from a job can become an
option of the command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from slurm_hetero.slurm.parse import SACCT_DELIMITER, SINFO_FORMAT, check_trusted

_JOB_ID = re.compile(r"\d{1,12}(?:[_+]\d{1,12})?")
# sinfo -O: one line per node, `|` after each field (user text cannot appear here). CPUs
# (allocated/idle/other/total), memory and memory allocated (MiB) come last: readers of the
# first five fields are unchanged.
CAPACITY_FIELDS = "NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|,CPUsState:|,Memory:|,AllocMem:|"
PENDING_FORMAT = "%i|%P|%q|%u|%a|%V|%r"


def job_ids(ids: Iterable[str | int]) -> list[str]:
    """ids as strings, each checked to be a Slurm job id."""
    out = [str(i) for i in ids]
    bad = [i for i in out if not _JOB_ID.fullmatch(i)]
    if bad:
        raise ValueError(f"not a Slurm job id: {bad[0]!r}")
    return out


def ping_argv() -> list[str]:
    return ["scontrol", "ping"]


def release_argv(ids: Sequence[str | int]) -> list[str]:
    """`scontrol release` of held jobs (one comma-separated list: one RPC)."""
    return ["scontrol", "release", ",".join(job_ids(ids))]


def cancel_argv(ids: Sequence[str | int]) -> list[str]:
    return ["scancel", *job_ids(ids)]


def cancel_user_argv(user: str) -> list[str]:
    """Every job of one user, batch step included (`--full`)."""
    return ["scancel", "--full", f"--user={user}"]


def sinfo_nodes_argv() -> list[str]:
    """One line per node in `SINFO_FORMAT` (parse.parse_sinfo_nodes)."""
    return ["sinfo", "-N", "-h", "-o", SINFO_FORMAT]


def sinfo_capacity_argv() -> list[str]:
    """One line per node: name, long state, GRES, GRES in use, features, CPUs A/I/O/T,
    memory, memory allocated."""
    return ["sinfo", "-N", "-h", "-O", CAPACITY_FIELDS]


def squeue_ids_argv() -> list[str]:
    """The ids of every job slurmctld still lists."""
    return ["squeue", "-h", "-o", "%i"]


def squeue_states_argv() -> list[str]:
    """`ID STATE` of every job slurmctld still lists, ended ones (MinJobAge) included."""
    return ["squeue", "-h", "-t", "all", "-o", "%i %T"]


# Job id, state, start, end, nodes and the reason: none of them text a user writes (the
# reason last all the same). Times as epoch seconds (SLURM_TIME_FORMAT=%s).
OBSERVE_FORMAT = "%i|%T|%S|%e|%N|%r"


def squeue_observe_argv() -> list[str]:
    """Every job slurmctld still lists, ended ones included, in `OBSERVE_FORMAT` (replay's poll).

    >>> squeue_observe_argv()
    ['squeue', '-h', '-t', 'all', '-o', '%i|%T|%S|%e|%N|%r']
    """
    return ["squeue", "-h", "-t", "all", "-o", OBSERVE_FORMAT]


def squeue_reasons_argv() -> list[str]:
    """`ID REASON` of every job slurmctld still lists (a held one's reason is JobHeldUser or
    JobHeldAdmin; a running or ended one's None)."""
    return ["squeue", "-h", "-t", "all", "-o", "%i %r"]


def squeue_pending_argv() -> list[str]:
    """Pending jobs in `PENDING_FORMAT` (the reason last: it is the only free text)."""
    return ["squeue", "-h", "-t", "PD", "-o", PENDING_FORMAT]


def sacct_ended_argv(since: str, until: str, fields: Sequence[str], states: Sequence[str]) -> list[str]:
    """Allocations of every user that ended in [since, until] (sacct's local time text)."""
    return ["sacct", "-X", "-n", "-P", "-a", f"--delimiter={SACCT_DELIMITER}", "-S", since, "-E", until,
            "-s", ",".join(states), "-o", ",".join(check_trusted(fields))]


def sacct_window_argv(since: str, until: str, fields: Sequence[str], duplicates: bool = False) -> list[str]:
    """Allocations of every user that existed in [since, until], `|`-separated; with
    `duplicates`, each incarnation of a requeued job (-D)."""
    return ["sacct", "-a", "-X", *(["-D"] if duplicates else []), "-P", "-n", "-S", since, "-E", until,
            "-o", ",".join(check_trusted(fields))]


def sacctmgr_argv(*words: str) -> list[str]:
    """sacctmgr without its confirmation prompt."""
    return ["sacctmgr", "-i", *words]


def sacctmgr_list_argv(entity: str, field: str) -> list[str]:
    """One column of `sacctmgr list ENTITY`, no header."""
    return sacctmgr_argv("-n", "-P", "list", entity, f"format={field}")


def sacctmgr_ping_argv() -> list[str]:
    """The cheapest question only slurmdbd answers (sacctmgr asks it, never slurmctld): the
    cluster names it keeps. Whether it answers is whether accounting is reachable.

    >>> sacctmgr_ping_argv()
    ['sacctmgr', '-i', '-n', '-P', 'list', 'cluster', 'format=Cluster']
    """
    return sacctmgr_list_argv("cluster", "Cluster")


# Node events and reservations come with admin-written text (Reason) last: `|` in it only
# lengthens that field. Times as epoch seconds need SLURM_TIME_FORMAT=%s (sacct.epoch_runner).
EVENT_FIELDS = ("NodeName", "Start", "End", "State", "TRES", "Reason")
RESERVATION_FIELDS = ("Name", "Start", "End", "Flags", "NodeNames")


def sacctmgr_events_argv(since: str, until: str) -> list[str]:
    """Node events (down, drain, ...) overlapping [since, until] (sacct's local time text)."""
    return sacctmgr_argv("-n", "-P", "show", "event", f"start={since}", f"end={until}",
                         f"format={','.join(EVENT_FIELDS)}")


def sacctmgr_reservations_argv(since: str, until: str) -> list[str]:
    """Reservations overlapping [since, until]; only maintenance ones cost capacity."""
    return sacctmgr_argv("-n", "-P", "show", "reservation", f"start={since}", f"end={until}",
                         f"format={','.join(RESERVATION_FIELDS)}")


def sacct_job_json_argv(job_id: str | int) -> list[str]:
    """One job with its steps as JSON (user text stays inside JSON strings)."""
    return ["sacct", "--json", "-j", job_ids([job_id])[0]]


def _user(user: str) -> str:
    """user, checked to be a plain user name (never an option or a second key)."""
    if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}", user):
        raise ValueError(f"not a user name: {user!r}")
    return user


def admin_level_argv(user: str) -> list[str]:
    """A user's AdminLevel in the accounting database (None, Operator, Administrator)."""
    return sacctmgr_argv("-n", "-P", "show", "user", _user(user), "format=AdminLevel")


def sbatch_wrap_argv(options: Sequence[str], wrap: str) -> list[str]:
    """sbatch --parsable OPTIONS --wrap WRAP (the wrap is one argument: sbatch runs it with sh)."""
    return ["sbatch", "--parsable", *options, "--wrap", wrap]


def sbatch_script_argv(options: Sequence[str], script: str, args: Sequence[str] = ()) -> list[str]:
    """sbatch --parsable OPTIONS SCRIPT ARGS..."""
    return ["sbatch", "--parsable", *options, script, *args]


# ---- power saving (slurm_hetero.power) -------------------------------------------------------
# Node names must look like node names: a name from slurmctld's argv or the site file can never
# become an option (`-...`) or a second key (`a state=down`) of the command.
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
POWER_STATES = ("power_up", "power_down")


def node_names(names: Iterable[str]) -> list[str]:
    """names, each checked to be a plain node name."""
    out = list(names)
    bad = [n for n in out if not _NODE_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"not a node name: {bad[0]!r}")
    return out


def nodes_oneliner_argv(names: Sequence[str] = ()) -> list[str]:
    """Every node (or those named), one line each (`scontrol -o show node`: State, CPUAlloc,
    LastBusyTime, ...)."""
    return ["scontrol", "-o", "show", "node"] + ([",".join(node_names(names))] if names else [])


def reservations_oneliner_argv() -> list[str]:
    """Every reservation, one line each (Nodes, StartTime, EndTime, State)."""
    return ["scontrol", "-o", "show", "reservation"]


def busy_nodes_argv() -> list[str]:
    """The node lists of jobs holding nodes (running, suspended, completing, configuring)."""
    return ["squeue", "-h", "-t", "R,S,CG,CF", "-o", "%N"]


def node_power_argv(names: Sequence[str], state: str) -> list[str]:
    """`scontrol update nodename=A,B state=power_up|power_down` (one RPC for all)."""
    if state not in POWER_STATES:
        raise ValueError(f"not a power state: {state!r}")
    if not names:
        raise ValueError("no nodes")
    return ["scontrol", "update", f"nodename={','.join(node_names(names))}", f"state={state}"]


def requeue_argv(ids: Sequence[str | int]) -> list[str]:
    """`scontrol requeue` of running batch jobs: ended (SIGTERM, KillWait, SIGKILL) and put
    back in the queue with their restart count one higher."""
    return ["scontrol", "requeue", ",".join(job_ids(ids))]


# ---- `slurm-hetero why` (reports/why.py) -----------------------------------------------------
# QoS and association limits, `|`-separated: names and TRES lists are admin-written and hold
# no `|`. The fields are sacctmgr's format names on 22.05 and 24.11.
QOS_LIMIT_FIELDS = ("Name", "Priority", "GrpTRES", "GrpTRESMins", "GrpTRESRunMins", "GrpJobs", "GrpSubmit",
                    "GrpWall", "MaxTRES", "MaxTRESPerNode", "MaxTRESMins", "MaxTRESPU", "MaxTRESPA",
                    "MaxJobsPU", "MaxSubmitPU", "MaxWall", "MinTRES")
ASSOC_LIMIT_FIELDS = ("Account", "User", "Partition", "QOS", "GrpTRES", "GrpTRESMins", "GrpTRESRunMins",
                      "GrpJobs", "GrpSubmit", "GrpWall", "MaxTRES", "MaxTRESPerNode", "MaxTRESMins",
                      "MaxJobs", "MaxSubmit", "MaxWall")
_ACCOUNT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}")


def sacctmgr_qos_limits_argv() -> list[str]:
    """Every QoS with its limits, one line each in `QOS_LIMIT_FIELDS` order."""
    return sacctmgr_argv("-n", "-P", "show", "qos", f"format={','.join(QOS_LIMIT_FIELDS)}")


def sacctmgr_assoc_limits_argv(account: str) -> list[str]:
    """The associations of `account` (its own line and each user's), in `ASSOC_LIMIT_FIELDS`
    order: a limit may sit on the account's line or on the user's."""
    if not _ACCOUNT.fullmatch(account):
        raise ValueError(f"not an account name: {account!r}")
    return sacctmgr_argv("-n", "-P", "show", "assoc", "where", f"accounts={account}",
                         f"format={','.join(ASSOC_LIMIT_FIELDS)}")


def squeue_start_argv(job_id: str | int) -> list[str]:
    """`ID START` of one pending job: slurmctld's expected start (needs SLURM_TIME_FORMAT=%s
    for epoch seconds; `N/A` when it has none)."""
    return ["squeue", "--start", "-h", "-j", job_ids([job_id])[0], "-o", "%i %S"]


# `squeue --start` of every pending job: the reason last (the only field that is text).
START_FORMAT = "%i|%S|%r"


def squeue_start_all_argv() -> list[str]:
    """`ID|START|REASON` (START_FORMAT) of every pending job: slurmctld's expected start
    (epoch seconds under SLURM_TIME_FORMAT=%s, `N/A` when it has none) and the reason it
    waits (parse.parse_squeue_start)."""
    return ["squeue", "--start", "-h", "-t", "PD", "-o", START_FORMAT]


def show_config_argv() -> list[str]:
    """slurmctld's running configuration (`Key = Value` lines; SlurmUser among them)."""
    return ["scontrol", "show", "config"]


def sdiag_argv() -> list[str]:
    """slurmctld's statistics (its RPC counts, the DBD agent queue: replay.faults.dbd_queue)."""
    return ["sdiag"]


# ---- the dev cluster and its soak faults (devcluster/) ---------------------------------------
def show_node_argv(node: str) -> list[str]:
    """`scontrol show node NODE`: one node's `Key=Value` record (parse.parse_kv_record).

    >>> show_node_argv("npu-01")
    ['scontrol', 'show', 'node', 'npu-01']
    """
    return ["scontrol", "show", "node", *node_names([node])]


def node_state_argv(node: str) -> list[str]:
    """One node's state as sinfo prints it (`idle`, `mixed`, `down*`, ...), no header.

    >>> node_state_argv("npu-01")
    ['sinfo', '-h', '-N', '-n', 'npu-01', '-o', '%T']
    """
    return ["sinfo", "-h", "-N", "-n", *node_names([node]), "-o", "%T"]


def node_jobs_argv(node: str) -> list[str]:
    """The plain ids (`%A`: an array task's or a het component's own, which scontrol takes) of
    the jobs holding NODE (configuring, running, suspended, completing).

    >>> node_jobs_argv("npu-01")
    ['squeue', '-h', '-t', 'CF,R,S,CG', '-w', 'npu-01', '-o', '%A']
    """
    return ["squeue", "-h", "-t", "CF,R,S,CG", "-w", *node_names([node]), "-o", "%A"]


def squeue_state_argv(job_id: str | int) -> list[str]:
    """One job's state (`PENDING`, `RUNNING`, ...) while slurmctld lists it; no line once it
    has forgotten the job.

    >>> squeue_state_argv(42)
    ['squeue', '-h', '-j', '42', '-o', '%T']
    """
    return ["squeue", "-h", "-j", *job_ids([job_id]), "-o", "%T"]


def sacct_state_argv(job_id: str | int) -> list[str]:
    """One job's state in accounting (the allocation's line only).

    >>> sacct_state_argv(42)
    ['sacct', '-j', '42', '-X', '-n', '-P', '-o', 'State']
    """
    return ["sacct", "-j", *job_ids([job_id]), "-X", "-n", "-P", "-o", "State"]


def assoc_mgr_user_argv(user: str) -> list[str]:
    """slurmctld's cached associations of one user (`UserName=NAME(UID)` once it knows them).

    >>> assoc_mgr_user_argv("alice")
    ['scontrol', '-o', 'show', 'assoc_mgr', 'users=alice', 'flags=assoc']
    >>> assoc_mgr_user_argv("-x")
    Traceback (most recent call last):
    ...
    ValueError: not a user name: '-x'
    """
    return ["scontrol", "-o", "show", "assoc_mgr", f"users={_user(user)}", "flags=assoc"]
