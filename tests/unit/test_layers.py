"""The package floors hold: every import (module level or inside a function) goes to a
lower floor, never sideways or up, and no module imports itself in a circle.

The floors, lowest first (the README's "Layers" table says why):
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "slurm_hetero"

FLOORS: dict[str, int] = {
    "errors": 0, "fileio": 0,
    "cliutil": 1, "templating": 1,
    "slurm": 2,
    "site": 3,
    "jobs": 4,
    "conf": 5, "predict": 5, "power": 5,
    "bridge": 6, "energy": 6, "containers": 6, "checkpoint": 6,
    "monitor": 7, "reports": 7, "replay": 7, "forecast": 7,
    "devcluster": 8,
    "container_demo": 9,
    "demo": 10,
    "cli": 11,
}


def unit_of(module: str) -> str:
    """`slurm_hetero.energy.agent` → `energy`; `slurm_hetero.fileio` → `fileio`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def modules() -> Iterator[tuple[str, Path]]:
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        yield name.removesuffix(".__init__"), f


def imports(module: str, path: Path) -> set[str]:
    """Every slurm_hetero module `path` imports, at any depth of the file."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("slurm_hetero")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] +
                                ([node.module] if node.module else []))
            if base.startswith("slurm_hetero"):
                out.add(base)
    return out


def test_every_unit_has_a_floor() -> None:
    units = {unit_of(m) for m, _ in modules()} - {""}
    assert units <= FLOORS.keys(), f"give these a floor in FLOORS: {sorted(units - FLOORS.keys())}"


def test_imports_go_down_only() -> None:
    wrong = []
    for module, path in modules():
        src = unit_of(module)
        for target in imports(module, path):
            dst = unit_of(target)
            if not dst or dst == src:
                continue
            if FLOORS[dst] >= FLOORS[src]:
                wrong.append(f"{module} (floor {FLOORS[src]}) imports {target} (floor {FLOORS[dst]})")
    assert wrong == [], "\n".join(wrong)


def test_no_module_cycles() -> None:
    known = dict(modules())
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = set()
        for t in imports(module, path):
            while t and t not in known:  # `from slurm_hetero.x import name` names a module x
                t = t.rpartition(".")[0]
            if t and t != module and t != "slurm_hetero":
                targets.add(t)
        graph[module] = targets
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            # A package's __init__ re-exporting its own modules is not a loop of code.
            if t.startswith(m + "."):
                continue
            if state.get(t) == 1:
                cycles.append([*stack[stack.index(t):], t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)
