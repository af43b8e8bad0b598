"""The names rendered files and the node-side runtime (container wrapper, TaskProlog) agree
on. conf/ writes them, containers/ reads them; both import them from here."""

from __future__ import annotations

FILENAME = "hetero-containers.json"
FORMAT = 1
# GRES names Slurm has a plugin for (it sets their variables); every other name gets ours.
PLUGIN_GRES = ("gpu", "mps", "shard", "nic")
# A shard is a slice of a GPU: the container needs the GPU's device file.
GRES_ALIAS = {"shard": "gpu", "mps": "gpu"}
CONTROL_DEVICES = {
    "cuda": ("nvidiactl", "nvidia-uvm"),
    "cann": ("davinci_manager", "devmm_svm", "hisi_hdc"),
    "rocm": ("kfd",),
}
VISIBLE_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "ROCR_VISIBLE_DEVICES",
                "cann": "ASCEND_RT_VISIBLE_DEVICES"}
MOUNTS_VAR = "SLURM_HETERO_MOUNTS"
