"""hetero-containers.json: what the node-side wrapper and TaskProlog know of the site.

`slurm-hetero conf render` writes it next to slurm.conf (configless sites: into the node
folder, conf/nodefiles.py) and names it in oci.conf and the TaskProlog; here it is read
back with the standard library only, so the wrapper never parses YAML or validates the
site at job start. Node groups are stored once and nodes point at them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from slurm_hetero.conf.contract import FILENAME, FORMAT
from slurm_hetero.errors import InputError, RuntimeFailure
from slurm_hetero.site.images import BindMount, DriverInfo, Image, ImageVariant, split_ref


@dataclass(frozen=True)
class NodeFacts:
    name: str
    arch: str
    drivers: dict[str, DriverInfo]  # per stack
    env: dict[str, str]  # NCCL/HCCL settings of the node's fabric
    devices: dict[str, list[tuple[str, str]]]  # gres name → [(file under /dev, stack)] in IDX order
    dev_base: str  # host folder holding the device files (/dev; per node in the dev cluster)
    fs_base: str  # prefix of host driver folders ("" ; emulated per node in the dev cluster)

    @property
    def stacks(self) -> list[str]:
        return list(dict.fromkeys(s for files in self.devices.values() for _, s in files))


@dataclass(frozen=True)
class NodeConfig:
    doc: dict[str, Any]
    path: str = ""  # where it was read: the Prolog's device cache is found beside it

    @classmethod
    def load(cls, path: str) -> NodeConfig:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            raise RuntimeFailure(f"{path}: cannot read the container configuration: {e.strerror} "
                                 "(render it with `slurm-hetero conf render`)") from e
        except ValueError as e:
            raise RuntimeFailure(f"{path}: not valid JSON: {e}") from e
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise RuntimeFailure(f"{path}: unknown format (expected format {FORMAT}); re-render it")
        return cls(doc, path)

    @property
    def site(self) -> str:
        return str(self.doc["site"])

    @property
    def images_root(self) -> str:
        return str(self.doc["images_root"])

    @property
    def slurm_conf(self) -> str | None:
        """The slurm.conf to ask Slurm with; None (configless sites): the one slurmd gave the
        job ($SLURM_CONF), as Slurm's own clients find it."""
        value = self.doc.get("slurm_conf")
        return str(value) if value else None

    @property
    def runc(self) -> str:
        return str(self.doc["runc"])

    @property
    def mounts(self) -> list[BindMount]:
        return [BindMount(**m) for m in self.doc["mounts"]]

    @property
    def driver_dirs(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.doc["driver_dirs"].items()}

    @property
    def gres_env(self) -> dict[str, list[str]]:
        """Plugin-less GRES name → variables the TaskProlog exports its indices in."""
        return {k: list(v) for k, v in self.doc["gres_env"].items()}

    def image_refs(self) -> list[str]:
        return sorted(self.doc["images"])

    def image(self, ref: str) -> Image | None:
        data = self.doc["images"].get(ref)
        if data is None:
            return None
        name, tag = split_ref(ref)
        return Image(name=name, tag=tag or "", description=data.get("description", ""),
                     variants=tuple(ImageVariant(**v) for v in data["variants"]))

    def node(self, name: str) -> NodeFacts:
        idx = self.doc["nodes"].get(name)
        if idx is None:
            raise InputError(f"node {name!r} is not in site {self.site!r} "
                             f"({len(self.doc['nodes'])} nodes in {FILENAME})")
        g = self.doc["groups"][idx]
        per_node = bool(self.doc["per_node_dev"])
        dev_base = f"{self.doc['dev_dir']}/{name}" if per_node else self.doc["dev_dir"]
        return NodeFacts(
            name=name, arch=g["arch"],
            drivers={s: DriverInfo(**d) for s, d in g["drivers"].items()},
            env=dict(g["env"]),
            devices={k: [(f, s) for f, s in v] for k, v in g["devices"].items()},
            dev_base=dev_base,
            fs_base=f"{dev_base}/fs" if per_node else "",
        )
