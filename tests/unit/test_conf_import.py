"""`conf import`: a production-style slurm.conf/gres.conf (22.05: 345 nodes in hostlists, two
controllers, DEFAULT lines, an Include, a NodeSet, partitions with options; 24.11: configless,
GPUs/NPUs/GH200, shards, cloud nodes, AutoDetect) becomes a site file whose render means
what the original meant, plus slurm-hetero's parts.

The same files start a real slurmctld (22.05 here, 24.11 from Debian 13) as they are and as
rendered from the import, with identical node, partition and config dumps but for the
documented hetero parts; that check needs root and the daemons, so it is not a unit test.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from ClusterShell.NodeSet import NodeSet

from slurm_hetero.conf import render_site
from slurm_hetero.conf.cli import conf_import
from slurm_hetero.conf.importer import Imported, import_site, match_model, read_conf
from slurm_hetero.errors import InputError
from slurm_hetero.site import load_site_text
from slurm_hetero.site.catalog import builtin_catalog_data, model_from_fields
from slurm_hetero.site.slurmlines import pairs, unquote

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
OLD, NEW = DATA / "22.05", DATA / "24.11"


# --- an independent reading of what a slurm.conf means ----------------------------------------


class Meaning:
    """Nodes and partitions with DEFAULT lines applied, and the global settings."""

    def __init__(self, text_or_path: str | Path) -> None:
        if isinstance(text_or_path, Path):
            lines = [at.text for at in read_conf(text_or_path)]
        else:
            lines = [ln.split("#")[0].strip() for ln in text_or_path.splitlines()]
        self.nodes: dict[str, dict[str, str]] = {}
        self.partitions: dict[str, dict[str, str]] = {}
        self.settings: dict[str, list[str]] = {}
        self.records: list[str] = []
        defaults: dict[str, dict[str, str]] = {"nodename": {}, "partitionname": {}}
        for line in filter(None, lines):
            found = pairs(line)
            kind, name = found[0][0].lower(), unquote(found[0][1])
            words = {k.lower(): unquote(v) for k, v in found[1:]}
            if "features" in words:
                words["feature"] = words.pop("features")
            if kind in defaults and name.upper() == "DEFAULT":
                defaults[kind].update(words)
            elif kind == "nodename":
                for node in NodeSet(name):
                    self.nodes[node] = {**defaults[kind], **words}
            elif kind == "partitionname":
                self.partitions[name] = {**defaults[kind], **words}
            elif kind in ("nodeset", "downnodes"):
                self.records.append(" ".join(f"{k}={v}" for k, v in found))
            else:
                for k, v in found:
                    self.settings.setdefault(k.lower(), []).append(unquote(v))

    def hardware(self, node: str) -> tuple[int, int, int, int, int, Counter[str]]:
        """(CPUs, sockets, cores per socket, threads per core, RealMemory, GRES items)."""
        w = self.nodes[node]
        cores, threads = int(w.get("corespersocket", 1)), int(w.get("threadspercore", 1))
        # Without Sockets, Slurm infers them from CPUs (`NodeName=n1 CPUs=8` is 8 sockets of
        # 1 core, as a 22.05 slurmctld shows it).
        sockets = int(w.get("sockets") or int(w.get("socketsperboard", 0)) * int(w.get("boards", 1))
                      or int(w.get("cpus", cores * threads)) // (cores * threads))
        cpus = int(w.get("cpus") or sockets * cores * threads)
        return cpus, sockets, cores, threads, int(w.get("realmemory", 1)), Counter(
            item for item in w.get("gres", "").split(",") if item)

    def partition_nodes(self, name: str) -> NodeSet:
        out = NodeSet()
        for term in re.split(r",(?![^\[]*\])", self.partitions[name].get("nodes", "")):
            if term == "ALL":
                out.update(NodeSet.fromlist(list(self.nodes)))
            elif term.isalpha() and term not in self.nodes:  # a NodeSet by feature
                rec = next(r for r in self.records if r.startswith(f"NodeSet={term} "))
                feature = rec.split("Feature=")[1]
                out.update(NodeSet.fromlist([n for n, w in self.nodes.items()
                                             if feature in w.get("feature", "").split(",")]))
            elif term:
                out.update(NodeSet(term))
        return out


def imported(which: str, **kw: object) -> tuple[Imported, dict[str, str]]:
    folder = OLD if which == "22.05" else NEW
    result = import_site(folder / "slurm.conf", folder / "gres.conf", **kw)  # type: ignore[arg-type]
    return result, render_site(load_site_text(result.text, "imported.yaml"))


@pytest.fixture(scope="module")
def old() -> tuple[Imported, dict[str, str]]:
    return imported("22.05", gres_map={"a100": "a100-80gb"})


@pytest.fixture(scope="module")
def new() -> tuple[Imported, dict[str, str]]:
    return imported("24.11", version="24.11")


# Keys whose value the render changes on purpose (the hetero parts), and comma lists it
# extends; every other setting of the original must come out the same.
REPLACED = {"healthcheckprogram", "plugstackconfig"}
EXTENDED = {"prologflags", "accountingstorageenforce", "accountingstoragetres", "grestypes", "cpufreqgovernors"}


def assert_same_meaning(original: Meaning, rendered: Meaning) -> None:
    assert set(rendered.nodes) == set(original.nodes)
    for node in original.nodes:
        assert rendered.hardware(node) == original.hardware(node), node
        before, after = original.nodes[node], rendered.nodes[node]
        assert set(before.get("feature", "").split(",")) - {""} <= set(after["feature"].split(",")), node
        for key in ("tmpdisk", "corespeccount", "memspeclimit", "nodeaddr"):
            assert after.get(key) == before.get(key), (node, key)
        assert after.get("state", "UNKNOWN").upper() == before.get("state", "UNKNOWN").upper(), node
    assert set(rendered.partitions) == set(original.partitions)
    for name, before in original.partitions.items():
        after = rendered.partitions[name]
        assert rendered.partition_nodes(name) == original.partition_nodes(name), name
        for key, value in before.items():
            if key not in ("nodes", "tresbillingweights"):
                assert after.get(key, "").upper() == value.upper(), (name, key)
        assert after.get("default", "NO").upper() == before.get("default", "NO").upper(), name
    for key, values in original.settings.items():
        if key in REPLACED or key in ("include",):
            continue
        got = rendered.settings.get(key)
        if key in EXTENDED:
            assert got and set(values[-1].lower().split(",")) <= set(got[-1].lower().split(",")), key
        elif key == "slurmctldhost":
            assert got == values  # the primary, then the backups, in order
        else:
            assert got == values[-1:], key  # once, the value Slurm used
    for record in original.records:
        assert record in rendered.records


# --- reading the files ----------------------------------------------------------------------


def test_read_conf_joins_continuations_cuts_comments_and_reads_includes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.conf").write_text("KillWait=30   # seconds\nInclude deeper.conf\n")
    (tmp_path / "sub" / "deeper.conf").write_text("MinJobAge=300\n")
    (tmp_path / "slurm.conf").write_text(textwrap.dedent("""\
        # a comment
        SchedulerParameters=bf_continue,\\
        bf_window=4320
        AuthAltParameters=jwt_key=/k\\#1   # an escaped hash stays
        include sub/more.conf

        ClusterName=x
        """))
    lines = read_conf(tmp_path / "slurm.conf")
    assert [(Path(at.file).name, at.line, at.text) for at in lines] == [
        ("slurm.conf", 2, "SchedulerParameters=bf_continue,bf_window=4320"),
        ("slurm.conf", 4, "AuthAltParameters=jwt_key=/k\\#1"),
        ("more.conf", 1, "KillWait=30"),
        ("deeper.conf", 1, "MinJobAge=300"),
        ("slurm.conf", 7, "ClusterName=x"),
    ]


def test_include_globs_and_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for n in (2, 1):
        (tmp_path / "d" / f"{n}.conf").write_text(f"Key{n}=v\n")
    (tmp_path / "abs.conf").write_text("Abs=v\n")
    (tmp_path / "slurm.conf").write_text(f"Include d/*.conf\nInclude {tmp_path}/abs.conf\n")
    assert [at.text for at in read_conf(tmp_path / "slurm.conf")] == ["Key1=v", "Key2=v", "Abs=v"]


def test_a_missing_or_looping_include_is_located(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nInclude nodes.conf\n")
    with pytest.raises(InputError, match=r"slurm.conf:2: cannot read .*nodes.conf: No such file"):
        read_conf(tmp_path / "slurm.conf")
    (tmp_path / "slurm.conf").write_text("ClusterName=x\nInclude slurm.conf\n")
    with pytest.raises(InputError, match=r"slurm.conf:2: Include nested more than 8 deep"):
        read_conf(tmp_path / "slurm.conf")


@pytest.mark.parametrize(("gres", "model"), [
    ("a100-80gb", "a100-80gb"), ("A100_80GB", "a100-80gb"), ("nvidia_a100-sxm4-80gb", "a100-80gb"),
    ("nvidia_h100_80gb_hbm3", "h100"), ("910b", "ascend-910b"), ("mi300x", "mi300x"),
    ("a100", None), ("rtx8000", None), ("tesla", None),
])
def test_gres_types_map_to_catalog_models(gres: str, model: str | None) -> None:
    catalog = {mid: model_from_fields(mid, f) for mid, f in builtin_catalog_data().items()}
    name = "npu" if gres == "910b" else "gpu"
    found = match_model(name, gres, catalog, {})
    assert (found.id if found else None) == model
    assert match_model("gpu", "a100", catalog, {"a100": "a100-40gb"}).id == "a100-40gb"  # type: ignore[union-attr]
    assert match_model("npu", "a100_80gb", catalog, {}) is None  # a GPU model is no npu


# --- the 22.05 site ---------------------------------------------------------------------------


def test_the_22_05_site_keeps_its_meaning(old: tuple[Imported, dict[str, str]]) -> None:
    _, files = old
    assert_same_meaning(Meaning(OLD / "slurm.conf"), Meaning(files["slurm.conf"]))


def test_the_22_05_site_file(old: tuple[Imported, dict[str, str]]) -> None:
    result, _ = old
    site = load_site_text(result.text)
    assert site.name == "kestrel" and [str(c) for c in site.slurm.controllers] == \
        ["kestrel-ctl1(10.20.0.11)", "kestrel-ctl2(10.20.0.12)"]
    assert (site.slurm.accounting_host, site.slurm.accounting_port, site.slurm.accounting_tres) == \
        ("kestrel-dbd", 6819, ("license/matlab",))
    groups = {g.names: g for g in site.node_groups}
    # cn[001-004] are also in debug: a group of their own; the nodes of one line stay together.
    assert list(groups) == ["cn[001-004]", "cn[005-256]", "bigmem[01-08]", "gpu-a001", "gpu-a[002-032]",
                            "gpu-v[01-16]", "arm[01-24]"]
    assert groups["cn[001-004]"].partitions == ("compute", "debug", "maint")
    arm = groups["arm[01-24]"]
    assert (arm.architecture, arm.extra_features, arm.options) == ("aarch64", ("arm64", "altra"),
                                                                   (("TmpDisk", "400000"),))
    assert [(a.model.id, a.model.gres_type, a.count) for a in groups["gpu-a001"].accelerators] == \
        [("a100-80gb", "a100", 4)]  # the site's GRES type is kept: --gres=gpu:a100 still works
    gpu = next(p for p in site.partitions if p.name == "gpu")
    assert gpu.options == (("OverSubscribe", "NO"), ("QOS", "gpu")) and gpu.extra_nodes == "mps01,viz[01-04]"
    assert site.node_agent.health_check == "/usr/sbin/nhc" and site.node_agent.restore_interval == 600
    # Kept whole, its DEFAULT values written in (its own MaxTime over the DEFAULT's).
    assert site.slurm.keep_partitions == ("PartitionName=viz State=UP MaxTime=12:00:00 DefaultTime=01:00:00 "
                                          "OverSubscribe=NO Nodes=viz[01-04] AllowAccounts=vizlab",)
    assert "SchedulerParameters=bf_continue,bf_max_job_test=2000,bf_window=10080,bf_resolution=300," \
           "default_queue_depth=500" in site.slurm.extra_lines
    assert 'DownNodes=cn256 Reason="failed DIMM, ticket 4711" State=DOWN' in site.slurm.extra_lines
    assert len(site.all_nodes) == 256 + 8 + 32 + 16 + 24


def test_the_22_05_notes_say_what_changes(old: tuple[Imported, dict[str, str]]) -> None:
    notes = "\n".join(old[0].notes)
    for expected in (
        "nodes.conf:9: NodeName=gpu-a[001-032]: Weight=10 replaced",
        "slurm.conf:39: Prolog=/etc/slurm/prolog.d/*: kept (slurm.prolog); the node agent joins it as "
        "/etc/slurm/prolog.d/zz-slurm-hetero (run first)",
        "slurm.conf:40: Epilog=/etc/slurm/epilog.d/*: kept (slurm.epilog)",
        "slurm.conf:44: JobSubmitPlugins=lua: the site's job_submit.lua keeps running, inside the bridge's, "
        f"before it (slurm.job_submit): copy {OLD}/job_submit.lua to {OLD.resolve()}/job_submit.site.lua",
        "plugstack.conf: 2 line(s) kept (slurm.plugstack_lines)",
        "nodes.conf:12: NodeName=viz[01-04]: kept as written (GRES type gpu:rtx8000:2 matches no catalog model",
        "nodes.conf:13: NodeName=mps01: kept as written (GRES mps:200 has no catalog model",
        "slurm.conf:89: partition gpu: TRESBillingWeights replaced",
        "slurm.conf:92: partition viz: kept as written (none of its nodes is modeled)",
        "cgroup.conf: not imported",
    ):
        assert expected in notes, expected
    assert "SelectType" not in notes  # the site's own is what slurm-hetero writes
    # Its own enforcement has limits already: nothing to add, nothing to say.
    assert "AccountingStorageEnforce" not in notes and "PrologFlags" not in notes


def test_the_22_05_kept_lines_survive_the_render(old: tuple[Imported, dict[str, str]]) -> None:
    _, files = old
    conf = files["slurm.conf"]
    assert re.search(r"\nNodeName=viz\[01-04\] .*Gres=gpu:rtx8000:2\n", conf)
    assert re.search(r"\nNodeName=mps01 .*Gres=gpu:v100:2,mps:200 CPUs=40\n", conf)
    assert "\nPartitionName=viz " in conf and "AllowAccounts=vizlab" in conf
    assert "\nGresTypes=gpu,mps\n" in conf
    original = [" ".join(ln.split()) for ln in (OLD / "gres.conf").read_text().splitlines()
                if ln and not ln.startswith("#")]
    assert set(original) <= set(files["gres.conf"].splitlines())
    # The 4 GPUs of gpu-a001 are still the site's a100s to jobs, to billing and to accounting.
    assert 'GRES/gpu:a100=16.0' in conf and ",gres/gpu:a100," in conf


def test_without_a_map_an_ambiguous_gres_type_keeps_its_nodes_as_written() -> None:
    result, files = imported("22.05")
    site = load_site_text(result.text)
    assert not any(n.startswith("gpu-a") for n in site.all_nodes)
    assert any("NodeName=gpu-a[001-032]" in line for line in site.slurm.keep_nodes)
    assert any("--map a100=MODEL" in n for n in result.notes)
    assert_same_meaning(Meaning(OLD / "slurm.conf"), Meaning(files["slurm.conf"]))


# --- the 24.11 site -------------------------------------------------------------------------------


def test_the_24_11_site_keeps_its_meaning(new: tuple[Imported, dict[str, str]]) -> None:
    _, files = new
    assert_same_meaning(Meaning(NEW / "slurm.conf"), Meaning(files["slurm.conf"]))


def test_the_24_11_site_file(new: tuple[Imported, dict[str, str]]) -> None:
    result, files = new
    site = load_site_text(result.text)
    assert site.slurm.version == (24, 11) and 'local GRES_PREFIX = "gres/"' in files["job_submit.lua"]
    groups = {g.names: g for g in site.node_groups}
    assert (groups["npu[001-048]"].architecture, groups["npu[001-048]"].resource_type) == ("aarch64", "NPU")
    assert groups["gh-[01-32]"].architecture == "aarch64"
    l40s = groups["l40s-[01-16]"].accelerators[0]
    assert (l40s.model.id, l40s.count, l40s.shards_per_device) == ("l40s", 4, 16)
    assert groups["burst-[01-16]"].options == (("State", "CLOUD"),)
    assert site.slurm.keep_partitions == ("PartitionName=reserved-q1 MaxTime=2-00:00:00 DefaultTime=1:00:00 "
                                          "State=INACTIVE",)
    # gres.conf: the lines `conf render` writes itself are left to it; AutoDetect is kept.
    assert site.slurm.gres_lines == ("NodeName=h100-[001-064],gh-[01-32],l40s-[01-16] AutoDetect=nvml",)
    original = {" ".join(ln.split()) for ln in (NEW / "gres.conf").read_text().splitlines()}
    assert original == {ln for ln in files["gres.conf"].splitlines() if not ln.startswith("#")}


def test_slurm_defaults_are_pinned_where_the_file_is_silent(new: tuple[Imported, dict[str, str]]) -> None:
    result, files = new
    conf = Meaning(files["slurm.conf"]).settings
    # Not in the 24.11 file, and not what the greenfield template writes: Slurm's own values.
    assert conf["returntoservice"] == ["0"] and conf["mpidefault"] == ["none"]
    assert conf["prioritymaxage"] == ["7-0"] and conf["priorityweightqos"] == ["0"]
    assert conf["defmempercpu"] == ["4000"] and "defmempernode" not in conf  # the file's own
    notes = "\n".join(result.notes)
    assert "HealthCheckProgram is not set" in notes and "SlurmctldLogFile" not in notes


def test_an_unset_default_memory_stays_unset(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text("ClusterName=mini\nSlurmctldHost=h\nNodeName=n[1-2] CPUs=4\n"
                                         "PartitionName=p Nodes=n[1-2] Default=YES\n")
    result = import_site(tmp_path / "slurm.conf")
    conf = Meaning(render_site(load_site_text(result.text))["slurm.conf"]).settings
    assert conf["defmempernode"] == ["0"] and "defmempercpu" not in conf
    notes = "\n".join(result.notes)
    assert "SelectType is not set: Slurm 22.05 then allocates whole nodes" in notes
    assert "AccountingStorageType is not set" in notes and "no feature names the architecture" in notes


# --- errors and the command -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("NodeName=a[1-2] CPUs=2\nNodeName=a2 CPUs=2\n", r"slurm.conf:2: node a2 is defined twice"),
    ("NodeName=a[2-1] CPUs=2\n", r"slurm.conf:1: bad hostlist 'a\[2-1\]'"),
    ('NodeName=a1 Feature="x\n', r"slurm.conf:1: a double quote is not closed"),
    ("NodeName=a1 CPUs\n", r"slurm.conf:1: 'CPUs' is not Key=Value"),
    ("ClusterName=x\n", r"no node could be modeled"),
])
def test_files_slurm_could_not_read_are_refused_with_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "slurm.conf").write_text(text)
    with pytest.raises(InputError, match=message):
        import_site(tmp_path / "slurm.conf")


def _group() -> click.Group:
    group = click.Group()
    group.add_command(conf_import)
    return group


def test_the_command_writes_the_site_file_and_notes(tmp_path: Path) -> None:
    out = tmp_path / "site.yaml"
    args = ["import", str(OLD / "slurm.conf"), "-o", str(out), "--map", "a100=a100-80gb", "--slurm-version", "22.05"]
    result = CliRunner().invoke(_group(), args)
    assert result.exit_code == 0, result.output
    assert "note: " in result.output and f"wrote {out}" in result.output
    site = load_site_text(out.read_text())
    assert site.slurm.version == (22, 5) and site.slurm.gres_lines  # gres.conf beside slurm.conf was read
    again = CliRunner().invoke(_group(), args)
    assert again.exit_code == 2 and "exists (use --force to replace it)" in again.output


@pytest.mark.parametrize(("args", "message"), [
    (["--map", "a100"], "--map 'a100': use TYPE=MODEL"),
    (["--slurm-version", "21.08"], "--slurm-version 21.08: allowed: 22.05"),
    (["--name", "Kestrel"], "--name Kestrel: a site name is lowercase"),
])
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(_group(), ["import", str(NEW / "slurm.conf"), *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(_group(), ["import", str(tmp_path / "nope.conf")])
    assert result.exit_code == 2 and "nope.conf: cannot read" in result.output, result.output


def test_per_node_addresses_stay_lined_up_with_their_names(tmp_path: Path) -> None:
    (tmp_path / "slurm.conf").write_text(textwrap.dedent("""\
        ClusterName=addr
        NodeName=n[01-04] NodeAddr=10.0.0.[1-4] CPUs=8 Feature=x86_64
        NodeName=b1,a1 NodeAddr=10.0.1.1,10.0.1.2 CPUs=8 Feature=x86_64
        NodeName=s[1-4] NodeAddr=10.0.2.[1-4] CPUs=8 Feature=x86_64
        PartitionName=all Nodes=ALL Default=YES
        PartitionName=some Nodes=s[1-2]
        """))
    result = import_site(tmp_path / "slurm.conf")
    site = load_site_text(result.text)
    # s[1-4] would have to be split for `some`: that partition is kept as written instead.
    assert [(g.names, g.options) for g in site.node_groups] == [("n[01-04]", (("NodeAddr", "10.0.0.[1-4]"),)),
                                                               ("s[1-4]", (("NodeAddr", "10.0.2.[1-4]"),))]
    assert site.slurm.keep_nodes == ("NodeName=b1,a1 NodeAddr=10.0.1.1,10.0.1.2 CPUs=8 Feature=x86_64",)
    assert site.slurm.keep_partitions == ("PartitionName=some Nodes=s[1-2]",)
    conf = render_site(site)["slurm.conf"]
    assert_same_meaning(Meaning((tmp_path / "slurm.conf").read_text()), Meaning(conf))
