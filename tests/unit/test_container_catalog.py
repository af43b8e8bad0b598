"""The site's image catalog: versions, image names, and the exact messages for bad input."""

from __future__ import annotations

import pytest

from slurm_hetero.site import load_site_text
from slurm_hetero.site.images import at_least, at_most, ref_problem, split_ref, version_key
from slurm_hetero.site.load import SiteError

SITE = """\
name: t
partitions:
  - {name: main, default: true}
node_groups:
  - names: g1
    architecture: x86_64
    sockets: 1
    cores_per_socket: 8
    memory: 64GB
    partitions: [main]
    accelerators:
      - {model: a100-80gb, count: 2}
    drivers:
      cuda: {driver: "535.104.05", max_version: "12.2"}
    fabric: ib
  - names: n1
    architecture: arm64
    sockets: 1
    cores_per_socket: 8
    memory: 64GB
    partitions: [main]
    accelerators:
      - {model: ascend-910b, count: 8}
containers:
  images_root: /srv/images
  drivers:
    cann: {driver: "24.1.rc1", max_version: "8.0"}
  fabrics:
    ib: {NCCL_IB_HCA: "mlx5"}
  mounts:
    - {source: /scratch, mode: rw}
    - {source: /data/sets, destination: /datasets, always: true}
images:
  "pytorch:24.05":
    variants:
      - {arch: x86_64, stack: cuda, version: "12.4", min_driver: "550.54.14"}
      - {arch: x86_64, stack: cuda, version: "12.1", bundle: /opt/pt-cu121}
      - {arch: ARMv8, stack: cann, version: "8.0.RC1"}
      - {arch: x86_64, stack: cpu}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(SiteError) as e:
        load_site_text(text, "site.yaml")
    return e.value.lines


def test_versions_compare_as_numbers_and_prereleases_first() -> None:
    assert version_key("12.10") > version_key("12.9")
    assert version_key("8.0.RC1") < version_key("8.0.0") < version_key("8.0.1")
    assert at_most("12.2.2", "12.2") and not at_most("12.4", "12.2")
    assert at_most("8.0.RC1", "8.0") and not at_most("8.1.RC1", "8.0")
    assert at_least("550.54.14", "550.54.14") and not at_least("535.104.05", "550.54.14")


@pytest.mark.parametrize(("ref", "problem"), [
    ("pytorch:24.05", None),
    ("nvidia/pytorch:24.05-py3", None),
    ("pytorch", "needs a tag"),
    ("../etc:1", "NAME must be"),
    ("a/../b:1", "NAME must be"),
    ("a..b:1", "without '..'"),
    ("/abs/path:1", "NAME must be"),
    ("x:.hidden", "TAG must be"),
    ("x\0y:1", "NUL"),
    ("x:" + "t" * 129, "TAG must be"),
])
def test_image_reference_grammar(ref: str, problem: str | None) -> None:
    got = ref_problem(ref)
    assert (got is None) if problem is None else (got is not None and problem in got), got


def test_split_ref() -> None:
    assert split_ref("nvidia/pytorch:24.05") == ("nvidia/pytorch", "24.05")
    assert split_ref("busybox") == ("busybox", None)


def test_catalog_loads() -> None:
    site = load_site_text(SITE)
    img = site.images["pytorch:24.05"]
    assert [v.label for v in img.variants] == ["x86_64/cuda12.4", "x86_64/cuda12.1", "aarch64/cann8.0.RC1",
                                               "x86_64/cpu"]
    assert img.bundle_path(img.variants[0], "/srv/images") == "/srv/images/pytorch/24.05/x86_64-cuda12.4"
    assert img.bundle_path(img.variants[1], "/srv/images") == "/opt/pt-cu121"
    assert img.logical_path("/srv/images/") == "/srv/images/pytorch/24.05"
    g, n = site.node_groups
    assert dict(g.drivers)["cuda"].max_version == "12.2" and g.fabric == "ib"
    assert dict(n.drivers)["cann"].driver == "24.1.rc1"  # the site-wide default
    assert [(m.source, m.destination, m.mode, m.always) for m in site.containers.mounts] == [
        ("/scratch", "/scratch", "rw", False), ("/data/sets", "/datasets", "ro", True)]


BAD = [
    (SITE.replace('"pytorch:24.05":', '"../pytorch:24.05":'),
     ["site.yaml:35:5: images.../pytorch:24.05: image '../pytorch:24.05': NAME must be '/'-separated "
      "components of letters, digits, '.', '_' or '-' starting with a letter or digit, without '..'\n"
      "    hint: e.g. pytorch:24.05 or nvidia/pytorch:24.05-py3"]),
    (SITE.replace('stack: cann, version: "8.0.RC1"', "stack: cann"),
     ["site.yaml:38:9: images.pytorch:24.05.variants[2]: a cann variant needs the version of cann it "
      "was built for\n    hint: add version: \"12.4\" (the toolkit version, quoted)"]),
    (SITE.replace('version: "12.4", min_driver', "version: 12.4, min_driver"),
     ["site.yaml:36:46: images.pytorch:24.05.variants[0].version: 12.4 is not of type 'string'\n"
      "    hint: quote versions: \"12.4\""]),
    (SITE.replace("{arch: x86_64, stack: cpu}", "{arch: sparc, stack: cpu, version: \"1\"}"),
     ["site.yaml:39:16: images.pytorch:24.05.variants[3].arch: unknown architecture 'sparc'\n"
      "    hint: allowed: x86_64, aarch64 (aliases arm64, ARMv8)"]),
    (SITE.replace("bundle: /opt/pt-cu121", "bundle: ../../etc"),
     ["site.yaml:37:62: images.pytorch:24.05.variants[1].bundle: '../../etc' must not contain '..'\n"
      "    hint: an absolute folder, or one relative to <images_root>/<name>/<tag>"]),
    (SITE.replace('version: "12.1", bundle: /opt/pt-cu121', 'version: "12.4"'),
     ["site.yaml:37:9: images.pytorch:24.05.variants[1]: variant x86_64/cuda12.4 is listed twice"]),
    (SITE.replace("fabric: ib", "fabric: ethernet"),
     ["site.yaml:15:13: node_groups[0].fabric: unknown fabric 'ethernet'\n    hint: known: ib"]),
    (SITE.replace('cuda: {driver: "535.104.05"', 'cann: {driver: "535.104.05"'),
     ["site.yaml:14:13: node_groups[0].drivers.cann: the group has no cann accelerators\n"
      "    hint: declare drivers for the stacks of its accelerators: cuda"]),
    (SITE.replace('driver: "24.1.rc1"', 'driver: "new"'),
     ["site.yaml:27:20: containers.drivers.cann.driver: 'new' is not a version\n"
      "    hint: a version starts with a digit, e.g. \"12.4\" or \"8.0.RC1\" (quote it)"]),
    (SITE.replace("{source: /scratch, mode: rw}", "{source: /, destination: /proc/x}"),
     ["site.yaml:31:16: containers.mounts[0].source: mounting the host's / is not allowed\n"
      "    hint: allow the folders users need, e.g. /scratch",
      "site.yaml:31:32: containers.mounts[0].destination: '/proc/x' is reserved in containers\n"
      "    hint: not /, /proc, /sys, /dev, /tmp/slurm, /var/run/slurm"]),
    (SITE.replace("{source: /scratch, mode: rw}", "{source: /scratch/../etc}"),
     ["site.yaml:31:16: containers.mounts[0].source: '/scratch/../etc' must not contain '..'",
      "site.yaml:31:7: containers.mounts[0].destination: '/scratch/../etc' must not contain '..'"]),
    (SITE.replace("images_root: /srv/images", "images_root: srv/images"),
     ["site.yaml:25:16: containers.images_root: 'srv/images' is not allowed: must match ^/\n"
      "    hint: absolute folder holding <name>/<tag> bundles on every node"]),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_catalogs_name_the_field(text: str, expected: list[str]) -> None:
    assert errors_of(text) == expected
