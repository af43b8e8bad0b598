"""Start-up path for oci.conf and the TaskProlog: `python3 -I -S .../oci_run.py run ...`.

-S skips site-packages (and an editable install's import hooks), which saves tens of
milliseconds per container task; the node-side modules need only the standard library,
found again here from this file's own location.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if sys.argv[1:2] == ["taskprolog"]:
        from slurm_hetero.containers.taskprolog import main as taskprolog

        sys.exit(taskprolog(sys.argv[2:]))
    from slurm_hetero.containers.wrapper import main

    sys.exit(main(sys.argv[1:]))
