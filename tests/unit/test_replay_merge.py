"""`replay merge`: two synthetic windows pooled and compared, figures worked out by hand
below; windows of other arms, speeds or sites refused with exit 2 naming the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hetero.errors import InputError
from slurm_hetero.replay import merge, report
from slurm_hetero.replay.cli import replay_group
from slurm_hetero.replay.fidelity import Fidelity
from slurm_hetero.replay.metrics import ALL, Outcome, figures
from slurm_hetero.replay.run import ArmResult
from slurm_hetero.replay.window import Window

POOL = "cpu@x86_64"
CAPACITY = {POOL: 10.0}


def no_cluster(workdir: Path) -> object:
    raise AssertionError("no cluster may be booted in these tests")


CLI = replay_group(no_cluster)


def job(i: int, t0: float, wait: float, run: float, cpus: int = 4) -> Outcome:
    return Outcome(str(i), str(100 + i), True, t0, t0, t0 + wait, t0 + wait + run, "COMPLETED",
                   int(run), int(run), 3600, cpus, 0, POOL)


def arm(name: str, t0: float, waits: list[float], run: float = 600.0, speed: float = 20.0) -> ArmResult:
    outs = [job(i, t0, w, run) for i, w in enumerate(waits)]
    figs = figures(outs, CAPACITY, t0, 1.0, t0 + 3600)
    return ArmResult(name, speed, Window(int(t0), 1.0), t0, t0 + 3600, outs, figs, True, [],
                     {"total": 10.0}, capacity=dict(CAPACITY))


def window_file(path: Path, t0: float, plain: list[float], bridge: list[float], *, speed: float = 20.0,
                arms: tuple[str, str] = ("plain", "bridge"), site_sha: str = "aa11",
                fid: Fidelity | None = None) -> Path:
    results = [arm(arms[0], t0, plain, speed=speed), arm(arms[1], t0, bridge, speed=speed)]
    meta = {"trace": "t.swf", "site": "site.yaml", "site_sha256": site_sha, "speed": speed}
    report.write(report.document(results, None, fid, meta), path)
    return path


def two_windows(tmp_path: Path) -> list[Path]:
    # Window 1: plain waits 100 and 300 s, bridge 50 and 100 s; window 2: one job each, 1200 and 600 s.
    # Every job runs 600 s on 4 of the pool's 10 CPUs.
    return [window_file(tmp_path / "w1.json", 0.0, [100, 300], [50, 100]),
            window_file(tmp_path / "w2.json", 10_000.0, [1200], [600])]


def test_merge_pools_the_windows_and_gives_a_t_interval(tmp_path: Path) -> None:
    doc = merge.merge(two_windows(tmp_path))
    plain, bridge = doc["figures"]["plain"][ALL], doc["figures"]["bridge"][ALL]
    # bsld = (wait + 600) / 600: plain 700/600, 900/600 | 1800/600; bridge 650/600, 700/600 | 1200/600.
    assert plain["ave_bsld"] == pytest.approx((700 / 600 + 900 / 600 + 1800 / 600) / 3)
    assert bridge["ave_bsld"] == pytest.approx((650 / 600 + 700 / 600 + 1200 / 600) / 3)
    assert plain["wait_mean"] == pytest.approx((100 + 300 + 1200) / 3)
    assert plain["wait_p50"] == pytest.approx(300)
    assert plain["wait_p90"] == pytest.approx(300 + 0.8 * (1200 - 300))  # numpy's linear quantile
    assert plain["jobs"] == 3 and bridge["started"] == 3
    # 3 jobs x 600 s x 4 CPUs over 10 CPUs x 2 windows x 3600 s.
    assert doc["figures"]["plain"][POOL]["utilisation"] == pytest.approx(3 * 600 * 4 / (10 * 7200))

    (row,) = doc["comparison"]
    assert row["arm"] == "bridge" and row["against"] == "plain" and row["comparable"]
    r1 = (650 / 600 + 700 / 600) / (700 / 600 + 900 / 600)  # window 1's AVEbsld ratio
    r2 = (1200 / 600) / (1800 / 600)
    assert row["ave_bsld_per_window"] == pytest.approx([r1, r2])
    assert row["ave_bsld_ratio"] == pytest.approx((r1 + r2) / 2)
    # Two windows: mean ± t(0.975, 1 df) x sd / sqrt(2), sd of two values = |r1 - r2| / sqrt(2).
    half = 12.706 * (abs(r1 - r2) / 2 ** 0.5) / 2 ** 0.5
    assert row["ave_bsld_ci95"] == pytest.approx([(r1 + r2) / 2 - half, (r1 + r2) / 2 + half])
    assert row["ave_bsld_pooled_ratio"] == pytest.approx(bridge["ave_bsld"] / plain["ave_bsld"])
    assert row["wait_mean_per_window"] == pytest.approx([75 / 200, 600 / 1200])
    assert row["wait_mean_pooled_ratio"] == pytest.approx(250 / (1600 / 3))
    assert "t-interval" in row["interval"]


def test_merge_cli_writes_a_file_show_prints_it(tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    r = CliRunner().invoke(CLI, ["merge", *map(str, two_windows(tmp_path)), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "bridge ÷ plain: AVEbsld 0.76 [" in r.output and "over 2 window(s)" in r.output
    assert json.loads(out.read_text())["format"] == merge.FORMAT
    r = CliRunner().invoke(CLI, ["show", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 window(s) merged" in r.output and "w2.json" in r.output and "t-interval" in r.output


def test_one_window_has_no_interval(tmp_path: Path) -> None:
    doc = merge.merge([window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100])])
    (row,) = doc["comparison"]
    assert row["ave_bsld_ci95"] is None and row["interval"] == "one window: no interval"
    assert row["ave_bsld_ratio"] == pytest.approx(1.125 / (4 / 3))


def test_differences_within_the_fidelity_error_are_not_compared(tmp_path: Path) -> None:
    # Window 1's fidelity: AVEbsld 30% off between x1 and x20, more than the arms differ.
    fid = Fidelity(20.0, 2, {"p90_abs": 5.0}, {}, {}, 1.0, 1.3)
    paths = [window_file(tmp_path / "w1.json", 0.0, [100, 300], [50, 100], fid=fid),
             window_file(tmp_path / "w2.json", 10_000.0, [1200], [600])]
    (row,) = merge.merge(paths)["comparison"]
    assert not row["comparable"] and "within the replay's own error" in row["why"]
    assert "w1.json" in row["why"] and "ave_bsld_ratio" not in row
    r = CliRunner().invoke(CLI, ["merge", *map(str, paths)])
    assert r.exit_code == 0 and "not comparable" in r.output


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"arms": ("plain", "bridge-nomodel")}, "arms plain,bridge-nomodel differ"),
    ({"speed": 50.0}, "speed x50 differs"),
    ({"site_sha": "bb22"}, "site site.yaml (sha256 bb22) differs"),
    ({"t0": 0.0}, "is already in"),
])
def test_windows_that_do_not_match_are_refused_with_exit_2(tmp_path: Path, kwargs: dict[str, object],
                                                             words: str) -> None:
    good = window_file(tmp_path / "w1.json", 0.0, [100, 300], [50, 100])
    t0 = float(kwargs.pop("t0", 10_000.0))  # type: ignore[arg-type]
    bad = window_file(tmp_path / "odd.json", t0, [1200], [600], **kwargs)  # type: ignore[arg-type]
    r = CliRunner().invoke(CLI, ["merge", str(good), str(bad), "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2, r.output
    assert "odd.json" in r.output and words in r.output
    assert not (tmp_path / "m.json").exists()


def test_other_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps({"format": "other"}))
    r = CliRunner().invoke(CLI, ["merge", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "x.json" in r.output and "not a replay result" in r.output
    with pytest.raises(InputError, match="not a merged replay result"):
        merge.read(tmp_path / "x.json")


def test_old_replay_files_without_capacity_still_load(tmp_path: Path) -> None:
    path = window_file(tmp_path / "w.json", 0.0, [100, 300], [50, 100])
    d = json.loads(path.read_text())
    for a in d["arms"]:
        del a["capacity"]
    path.write_text(json.dumps(d))
    results, _, _ = report.read(path)
    assert results[0].capacity == {} and results[0].figures[ALL].wait_mean == 200.0
    assert merge.merge([path])["figures"]["plain"][POOL]["utilisation"] == pytest.approx(2 * 600 * 4 / 36000)


def test_t975_matches_the_t_distribution() -> None:
    from scipy.stats import t  # lightgbm's dependency: here only to check the table

    for df in (1, 2, 5, 29, 30, 31, 45, 100, 1000):
        assert merge.t975(df) == pytest.approx(float(t.ppf(0.975, df)), abs=6e-4)


# ---- replay run --windows N --via-slurm: the plan, the array's argv, a task ------------------------

def test_windows_need_via_slurm_and_a_count(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "replay"
    base = ["run", "--trace", str(data / "kth-window.swf"), "--site", str(data / "kth-site.yaml"),
            "--start", "850956401", "--arms", "plain", "--workdir", str(tmp_path)]
    r = CliRunner().invoke(CLI, [*base, "--windows", "2"])
    assert r.exit_code == 2 and "--via-slurm" in r.output
    r = CliRunner().invoke(CLI, [*base, "--windows", "2", "--via-slurm"])  # base has --workdir
    assert r.exit_code == 2 and "--workdir" in r.output and "scratch" in r.output
    r = CliRunner().invoke(CLI, [*base[:-2], "--windows", "0", "--via-slurm"])
    assert r.exit_code == 2 and "--windows 0" in r.output


def test_the_array_is_an_argv_list_and_user_text_stays_data(tmp_path: Path) -> None:
    from slurm_hetero.replay import array

    odd = tmp_path / "out; rm -rf $HOME"  # a folder name a shell would read as two commands
    common = array.common_argv(Path("t $(x).swf"), Path("s.yaml"), 0.5, 0.0, 20.0, "plain,bridge", "auto",
                               "root", None, None)
    p = array.plan(odd, [100, 1900], common, array.task_minutes(2, 0.5, 0.0, None, 20.0, None))
    argv = array.sbatch_argv(p, ["--partition=batch"])
    assert argv[:2] == ["sbatch", "--parsable"] and "--array=0-1" in argv and "--partition=batch" in argv
    assert argv[-2:] == [sys.executable, str(odd.absolute() / "plan.json")]
    assert argv[-3] == str(odd.absolute() / "replay-window.sh")
    array.write_plan(p)
    script = (odd / "replay-window.sh").read_text()
    assert script == array.SCRIPT and 'exec "$1" -m slurm_hetero.replay.array "$2"' in script
    doc = json.loads((odd / "plan.json").read_text())
    assert doc["argv"][1][:2] == ["--start", "1900"]
    assert doc["argv"][0][doc["argv"][0].index("--trace") + 1] == str(Path("t $(x).swf").absolute())


def test_a_task_runs_its_window_without_the_outer_jobs_variables(tmp_path: Path) -> None:
    from slurm_hetero.replay import array

    # A stand-in for the Python the plan names: records its argv and environment, exits 0 or 3.
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$RECORD.argv\"\nenv > \"$RECORD.env\"\n"
                    "mkdir -p \"$(dirname \"$RECORD\")\"\nexit \"$CODE\"\n")
    fake.chmod(0o755)
    p = array.plan(tmp_path / "out", [100, 1900], ["--hours", "0.5"], 10)
    array.write_plan(p)
    doc = json.loads((tmp_path / "out" / "plan.json").read_text())
    doc["python"] = str(fake)
    (tmp_path / "out" / "plan.json").write_text(json.dumps(doc))
    scratch = tmp_path / "scratch"
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(scratch), "SLURM_ARRAY_TASK_ID": "1",
           "SLURM_ARRAY_JOB_ID": "77", "SLURM_CONF": "/outer/slurm.conf", "SBATCH_PARTITION": "x",
           "RECORD": str(tmp_path / "rec"), "CODE": "0"}
    (scratch / "slurm-hetero-replay-77_1").mkdir(parents=True)
    assert array.run_task(tmp_path / "out" / "plan.json", env) == 0
    argv = (tmp_path / "rec.argv").read_text().splitlines()
    assert argv[:5] == ["-m", "slurm_hetero.cli", "replay", "run", "--start"] and argv[5] == "1900"
    assert argv[-4:] == ["--workdir", str(scratch / "slurm-hetero-replay-77_1"), "-o",
                         str((tmp_path / "out" / "window-1").absolute())]
    seen = dict(line.split("=", 1) for line in (tmp_path / "rec.env").read_text().splitlines() if "=" in line)
    assert {k for k in seen if k.startswith(("SLURM_", "SBATCH_"))} == {"SLURM_HETERO_OUTER_JOB"}
    assert seen["SLURM_HETERO_OUTER_JOB"] == "77_1"
    assert not (scratch / "slurm-hetero-replay-77_1").exists()  # removed after success
    (scratch / "slurm-hetero-replay-77_1").mkdir()
    assert array.run_task(tmp_path / "out" / "plan.json", {**env, "CODE": "3"}) == 3
    assert (scratch / "slurm-hetero-replay-77_1").exists()  # kept for its logs
    with pytest.raises(InputError, match="SLURM_ARRAY_TASK_ID"):
        array.run_task(tmp_path / "out" / "plan.json", {**env, "SLURM_ARRAY_TASK_ID": "2"})


def test_missing_windows_are_named_with_their_logs(tmp_path: Path) -> None:
    from slurm_hetero.errors import RuntimeFailure
    from slurm_hetero.replay import array

    p = array.plan(tmp_path, [100, 1900], [], 10)
    window_file(array.window_out(p, 0) / "replay.json", 0.0, [100], [50])
    with pytest.raises(RuntimeFailure, match=r"1 of 2 windows wrote no replay.json \(see .*window-1.log"):
        array.results(p)


def test_each_pool_is_compared_too(tmp_path: Path) -> None:
    gpu = "v100@x86_64"
    cap = {POOL: 10.0, gpu: 4.0}

    def arm2(name: str, t0: float, cpu_wait: float, gpu_wait: float) -> ArmResult:
        outs = [job(0, t0, cpu_wait, 600.0),
                Outcome("1", "101", True, t0, t0, t0 + gpu_wait, t0 + gpu_wait + 600, "COMPLETED", 600, 600,
                        3600, 1, 2, gpu)]
        return ArmResult(name, 20.0, Window(int(t0), 1.0), t0, t0 + 3600, outs,
                         figures(outs, cap, t0, 1.0, t0 + 3600), True, [], {}, capacity=cap)

    paths = []
    for k, (t0, waits) in enumerate([(0.0, ((100, 400), (100, 200))), (10_000.0, ((50, 800), (50, 200)))]):
        (pc, pg), (bc, bg) = waits
        path = tmp_path / f"w{k}.json"
        report.write(report.document([arm2("plain", t0, pc, pg), arm2("bridge", t0, bc, bg)], None, None,
                                     {"site": "s.yaml", "speed": 20.0}), path)
        paths.append(path)
    (row,) = merge.merge(paths)["comparison"]
    g = row["pools"][gpu]
    assert g["wait_mean_per_window"] == pytest.approx([200 / 400, 200 / 800])
    assert g["wait_mean_pooled_ratio"] == pytest.approx(400 / 1200)
    assert row["pools"][POOL]["wait_mean_per_window"] == pytest.approx([1.0, 1.0])
    assert row["pools"][POOL]["wait_mean_ci95"] == pytest.approx([1.0, 1.0])  # no spread, no width
    r = CliRunner().invoke(CLI, ["merge", *map(str, paths)])
    assert r.exit_code == 0 and f"  {gpu}: AVEbsld" in r.output
