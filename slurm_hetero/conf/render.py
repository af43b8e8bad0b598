"""Render slurm.conf, gres.conf, cgroup.conf, plugstack.conf, job_submit.lua and qos.sacctmgr.

A `Profile` holds everything that differs between a production deployment and the local
dev cluster (paths, ports, plugins); the site holds everything else. Rendering is pure:
`render_site` returns {filename: text}; `write_files` puts them on disk atomically.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from slurm_hetero.conf.bridge import bridge_context
from slurm_hetero.conf.containers import container_context
from slurm_hetero.conf.devices import device_files, device_paths
from slurm_hetero.conf.monitoring import HOSTS as MONITORING_HOSTS
from slurm_hetero.conf.monitoring import monitoring_files
from slurm_hetero.conf.nodefiles import NODE_FILES
from slurm_hetero.conf.profile import Profile
from slurm_hetero.conf.slurmconf import (
    accounting_enforce,
    effective_profile,
    gres_coverage,
    gres_names_kept,
    place_site_lines,
    slurm_view,
    with_kept_gres_lines,
)
from slurm_hetero.errors import InputError
from slurm_hetero.site.hooks import Hook, joined
from slurm_hetero.site.model import NodeGroup, Site
from slurm_hetero.site.slurmlines import NODE_ADDRESSING
from slurm_hetero.site.timelimits import over_time_limit
from slurm_hetero.slurm.parse import parse_duration_s
from slurm_hetero.templating import environment, lua_long_string

__all__ = ["MANIFEST", "NODE_FILES", "OUTPUTS", "Profile", "agent_config", "configless_node_dir",
           "device_paths", "devices_spec", "is_sampled", "manifest", "node_files_note", "node_hooks",
           "render_site", "render_template", "write_files"]
OUTPUTS: tuple[str, ...] = ("slurm.conf", "gres.conf", "cgroup.conf", "plugstack.conf",
                            "job_submit.lua", "qos.sacctmgr")
# containers: Slurm's OCI config, what the node-side wrapper reads, the TaskProlog.
OUTPUTS += ("oci.conf", "hetero-containers.json", "hetero-taskprolog")
# energy: the systemd unit of `node sample`, for nodes with a sampled backend, and
# the HealthCheckProgram that restores devices a killed slurmstepd left changed.
OUTPUTS += ("hetero-sampler.service", "hetero-healthcheck")
# The bridge daemon's systemd unit (controller); it re-reads the site file rendered beside it.
OUTPUTS += ("hetero-bridge.service",)
SITE_COPY = "site.yaml"
# Which hosts get each rendered file (the Ansible role reads it; everything else: all hosts).
MANIFEST = "manifest.json"
HOSTS = {"job_submit.lua": "controller", "qos.sacctmgr": "controller", "hetero-bridge.service": "controller",
         SITE_COPY: "controller", "hetero-sampler.service": "compute"}
# monitoring (conf/monitoring.py): the exporters' units, and for the Prometheus server its
# scrape jobs, target lists and rules ("prometheus": hosts that run no Slurm daemon).
HOSTS.update(MONITORING_HOSTS)
# ClusterShell folds hostlist terms in quadratic time: beyond this many, list them as given.
FOLD_TERMS_MAX = 64
MODES = {"hetero-taskprolog": 0o755, "hetero-healthcheck": 0o755}  # besides write_files' 0644
# power saving (site power: enabled): Slurm's Suspend/Resume/ResumeFailProgram, on the controller.
POWER_PROGRAMS = {"hetero-power-suspend": ("suspend", "SuspendProgram"),
                  "hetero-power-resume": ("resume", "ResumeProgram"),
                  "hetero-power-resume-failed": ("resume-failed", "ResumeFailProgram")}
MODES.update({name: 0o755 for name in POWER_PROGRAMS})
HOSTS.update({name: "controller" for name in POWER_PROGRAMS})
STACK_DEVICES = {"cuda": "nvml", "rocm": "amdsmi", "cann": "npu-smi"}
# npu-smi reports power and use only "now": `node sample` keeps the counters (energy/sampler.py)
# there, and wherever the site asks (node_agent.sample_stacks, e.g. cuda for whole-job use).
COUNTERLESS_STACKS = frozenset({"cann"})


def _words(options: tuple[tuple[str, str], ...], state: str, skip: frozenset[str] = frozenset()
           ) -> tuple[str, str]:
    """(State, the other option words as ' K=V ...') of a node group's or partition's options."""
    for key, value in options:
        if key.lower() == "state":
            state = value
    rest = "".join(f" {k}={v}" for k, v in options if k.lower() != "state" and k.lower() not in skip)
    return state, rest


def _context(site: Site, profile: Profile) -> dict[str, object]:
    slurm = slurm_view(site, profile)
    partitions = []
    for p in site.partitions:
        groups = site.groups_in(p.name)
        weights = [f"CPU={site.billing.cpu}", f"Mem={site.billing.mem_per_gb}G"]
        models = {a.model.id: a.model for g in groups for a in g.accelerators}
        weights += [f"GRES/{m.gres_name}:{m.gres_type}={round(m.units * site.billing.unit, 2)}"
                    for m in models.values()]
        terms = [g.names for g in groups] + ([p.extra_nodes] if p.extra_nodes else [])
        nodes = NodeSet.fromlist(terms) if len(terms) <= FOLD_TERMS_MAX else ",".join(terms)
        state, opts = _words(p.options, "UP")
        partitions.append({"p": p, "nodes": str(nodes), "billing": ",".join(weights),
                           "state": state, "opts": opts, "over_time": over_time_limit(p)})
    # The dev cluster writes each node's address and port itself.
    skip = NODE_ADDRESSING if profile.node_ports else frozenset()
    node_groups = [{"g": g, **dict(zip(("state", "opts"), _words(g.options, "UNKNOWN", skip),
                                       strict=True))} for g in site.node_groups]
    tres = ["gres/gpu", "gres/npu", "gres/shard"]
    tres += [f"gres/{m.gres_name}:{m.gres_type}" for m in site.models_in_use]
    tres += [t for t in site.slurm.accounting_tres if t.lower() not in {x.lower() for x in tres}]
    # The site's own gres.conf lines replace the generated ones of the nodes they cover
    # (not on the dev cluster, whose device files are emulated per node).
    covered = {} if profile.node_ports else gres_coverage(site)
    gres_lines = []
    for g in site.node_groups:
        if not g.accelerators:
            continue
        if profile.node_ports:  # dev cluster: every node has its own device folder
            for node in g.nodes:
                gres_lines += [{"nodes": node, **ln} for ln in device_files(g, node, profile)]
        else:
            gres_lines += [{"nodes": g.names, **ln} for ln in device_files(g, None, profile)
                           if not _covered(covered, str(ln["name"]), g.names)]
    gres_partitions: dict[str, list[str]] = {}
    for p in site.partitions:
        for g in site.groups_in(p.name):
            for a in g.accelerators:
                names = [a.model.gres_name] + (["shard"] if a.shards_per_device else [])
                for name in names:
                    if p.name not in gres_partitions.setdefault(name, []):
                        gres_partitions[name].append(p.name)
    return {
        "site": site,
        "slurm": slurm,
        "gres_partitions": gres_partitions,
        "profile": profile,
        "partitions": partitions,
        "node_groups": node_groups,
        "accounting_tres": ",".join(tres),
        "gres_types": sorted({m.gres_name for m in site.models_in_use}
                             | ({"shard"} if any(a.shards_per_device for g in site.node_groups
                                                 for a in g.accelerators) else set())
                             | (set() if profile.node_ports else gres_names_kept(site))),
        "gres_lines": gres_lines,
        "gres_prefix": slurm.gres_prefix,
        "model_lua": lua_long_string(profile.model_lua) if profile.model_lua else None,
        "partition_limits": {p.name: m for p in site.partitions
                             if (m := slurm_minutes(p.default_time or p.max_time)) is not None},
        "snapshot_path": profile.snapshot_path,
        "history_path": profile.history_path,
        "snapshot_check_s": profile.snapshot_check_s,
        "snapshot_stale_s": profile.snapshot_stale_s,
        "health_check_interval": (site.node_agent.restore_interval
                                  if profile.health_check_interval is None
                                  else profile.health_check_interval),
        "hooks": node_hooks(site, profile),
        "configless": site.slurm.configless,
        "node_folder": profile.node_folder(site.slurm.configless),
        **dict(zip(("enforce", "enforce_added"), accounting_enforce(site), strict=True)),
        "sampled_groups": [g.names for g in site.node_groups
                           if is_sampled(g, profile.agent_devices, site.node_agent.sample_stacks)],
        **bridge_context(site),
        **container_context(site, profile),
    }


def slurm_minutes(text: str | None) -> int | None:
    """A Slurm time (`2-00:00:00`, `1:00:00`, `30`) in whole minutes, rounded up; None for
    UNLIMITED.

    >>> slurm_minutes("2-00:00:00"), slurm_minutes("1:30:00"), slurm_minutes("UNLIMITED")
    (2880, 90, None)
    """
    seconds = parse_duration_s(text)
    return None if seconds is None else math.ceil(seconds / 60)


def _covered(covered: dict[str, NodeSet | None], name: str, nodes: str) -> bool:
    if name not in covered:
        return False
    within = covered[name]
    return within is None or bool(NodeSet(nodes) & within)


def render_site(site: Site, profile: Profile | None = None) -> dict[str, str]:
    """Render every configuration file of the site: {filename: text}."""
    given = profile or Profile()
    profile = effective_profile(site, given)
    env, ctx = environment(), _context(site, profile)
    files = {name: env.get_template(name + ".j2").render(ctx) for name in OUTPUTS if name != "slurm.conf"}
    slurm_conf = env.get_template("slurm.conf.j2")
    files["slurm.conf"] = place_site_lines(lambda lines: slurm_conf.render({**ctx, "site_lines": lines}),
                                           site, given)
    if site.slurm.gres_lines and not profile.node_ports:
        files["gres.conf"] = with_kept_gres_lines(files["gres.conf"], site.slurm.gres_lines)
    files = {name: files[name] for name in OUTPUTS}  # in OUTPUTS' order
    files["hetero-agent.json"] = agent_config(site, profile)
    files.update(monitoring_files(site, profile, f"{profile.conf_dir}/{SITE_COPY}"))
    if site.power.enabled:
        for name, (action, slot) in POWER_PROGRAMS.items():
            files[name] = env.get_template("hetero-power.j2").render(
                site=site, profile=profile, action=action, slot=slot)
    if site.path is not None:  # the bridge daemon's unit reads it from the same folder
        files[SITE_COPY] = Path(site.path).read_text(encoding="utf-8")
    return files


def manifest(files: Iterable[str], modes: dict[str, int] | None = None,
             hooks: Iterable[Hook] = (), site_rules: str | None = None, node_dir: str | None = None) -> str:
    """manifest.json of a rendered folder: each file, the hosts that get it (all, controller,
    compute, or prometheus: the Prometheus server) and its mode, so the deployment copies
    what render wrote and nothing else; the links the node hooks need on compute nodes
    (`node_hooks`) and the site's own job_submit rules the controller must have
    (slurm.job_submit.script). `node_dir` (configless sites): the folder compute nodes get
    NODE_FILES in, listed as `node_files`."""
    modes = {**MODES, **(modes or {})}
    entries = [{"name": name, "hosts": HOSTS.get(name, "all"), "mode": f"0{modes.get(name, 0o644):o}"}
               for name in files if name != MANIFEST]
    out: dict[str, object] = {"version": 1, "files": entries}
    links = [{"path": path, "target": target, "hosts": "compute"} for h in hooks for path, target in h.links]
    if links:
        out["links"] = links
    if site_rules:
        out["site_rules"] = site_rules
    if node_dir:
        names = set(files)
        out.update(node_dir=node_dir, node_files=[n for n in NODE_FILES if n in names])
    return json.dumps(out, indent=1) + "\n"


def configless_node_dir(site: Site, profile: Profile) -> str | None:
    """The folder compute nodes of a configless site get NODE_FILES in; None: not configless."""
    return profile.node_folder(True) if site.slurm.configless else None


def node_files_note(site: Site, profile: Profile, files: Iterable[str]) -> str | None:
    """What `conf render` says about a configless site: which files Slurm does not ship."""
    folder = configless_node_dir(site, profile)
    if folder is None:
        return None
    names = [n for n in NODE_FILES if n in set(files)]
    return (f"configless site (SlurmctldParameters=enable_configless): slurmd fetch only Slurm's own "
            f"files from slurmctld; install {', '.join(names)} on every compute node in {folder} "
            "(the Ansible role does; the rendered files name them there)")


def node_hooks(site: Site, profile: Profile) -> tuple[Hook, Hook]:
    """Prolog and Epilog as rendered: the node agent (the profile's programs) joined to the
    site's own (slurm.prolog, slurm.epilog), and the links each needs on every compute node
    (site/hooks.py)."""
    folder = profile.node_folder(site.slurm.configless)
    return (joined("Prolog", site.slurm.prolog, profile.prolog, folder),
            joined("Epilog", site.slurm.epilog, profile.epilog, folder))


def agent_config(site: Site, profile: Profile) -> str:
    """The node agent's config, read from next to slurm.conf (Slurm gives Prolog SLURM_CONF),
    or from the node folder (configless sites; energy/state.py config_path)."""
    groups = [{"nodes": g.names,
               "devices": devices_spec(g, profile.agent_devices, site.node_agent.sample_stacks)}
              for g in site.node_groups if g.accelerators]
    policies = {p.name: {k: v for k, v in asdict(p).items() if k != "name" and v}
                for p in site.energy_policies}
    out: dict[str, object] = {"site": site.name, "state_dir": profile.agent_state_dir,
                              "history": f"{profile.agent_state_dir}/history.jsonl", "groups": groups,
                              "policies": policies, "auto": asdict(site.energy_auto)}
    if not site.node_agent.write_comment:
        out["update_comment"] = False
    if site.node_agent.shared_spool:
        out["shared_spool"] = profile.agent_shared_spool or site.node_agent.shared_spool
    return json.dumps(out, indent=1) + "\n"


def devices_spec(group: NodeGroup, override: str | None = None,
                 sample_stacks: Iterable[str] = COUNTERLESS_STACKS) -> str:
    """The agent's device backend for a group's nodes (override: the dev cluster's fake,
    still sampled where the real backend would be)."""
    stacks = sorted({a.model.stack for a in group.accelerators})
    spec = override or next((STACK_DEVICES[s] for s in stacks if s in STACK_DEVICES), "none")
    sampled = any(s in set(sample_stacks) | COUNTERLESS_STACKS for s in stacks)
    return f"sampled:{spec}" if sampled and not spec.startswith("sampled:") else spec


def is_sampled(group: NodeGroup, override: str | None = None,
               sample_stacks: Iterable[str] = COUNTERLESS_STACKS) -> bool:
    """Does the agent meter this group's devices through `node sample`?"""
    return bool(group.accelerators) and devices_spec(group, override, sample_stacks).startswith("sampled:")


def render_template(name: str, **ctx: object) -> str:
    """Render one extra template (e.g. slurmdbd.conf for the dev cluster)."""
    return environment().get_template(name + ".j2").render(ctx)


def write_files(files: dict[str, str], out_dir: str | Path, modes: dict[str, int] | None = None) -> None:
    """Write files into out_dir all-or-nothing: into a temp dir first, then renamed in place."""
    out = Path(out_dir)
    modes = {**MODES, **(modes or {})}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create output folder: {e.strerror}") from e
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
            os.chmod(tmp / name, modes.get(name, 0o644))
        if not out.exists():
            os.rename(tmp, out)
            return
        if not out.is_dir():
            raise InputError(f"{out}: exists and is not a folder")
        for name in files:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
