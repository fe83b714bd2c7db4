"""The shape of the code base: imports run one way (no cycle in skipcore/, function-level imports counted), down
the layers of the layout by role (`LAYERS`: a lower layer never imports a higher one), the library never imports
its commands, app/ and notebooks/ use no test helpers, and the package installs a `skipcore` console script that
finds the shipped data from anywhere."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

PKG = REPO / "skipcore"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(REPO).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(path: Path, package: str) -> set[str]:
    """Every module named by an import anywhere in the file (inside functions too), relative ones resolved."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        graph[m] = {t for t in _imports(p, pkg) if t in mods and t != m}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle among modules, ignoring the edge from a package to its own submodules' re-exports only when the
    submodule does not import the package back (the package root re-exporting is not a cycle by itself)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_in_skipcore():
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


# The layout by role, lowest layer first (docs/architecture.md; design notes, "Layout sketch"). A module
# imports only from its own layer or lower ones: the decode loop never imports an evaluation or a figure, a
# figure never imports the command line. Inside a layer, imports may go either way but never in a cycle.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "skipcore.errors",
            "skipcore.version",
            "skipcore.files",
            "skipcore.output_lock",
            "skipcore.threads",
            "skipcore.plain_numbers",
            "skipcore.shipped",
            "skipcore.lazy_exports",
            "skipcore.schedule",
        ),
    ),
    ("the fast path's arithmetic", ("skipcore.kernels",)),
    ("model families, data, metrics", ("skipcore.adapters", "skipcore.data", "skipcore.metrics")),
    ("measurement", ("skipcore.measure",)),
    ("traces", ("skipcore.traces",)),
    ("the decode loop and its policies", ("skipcore.decode",)),
    ("depth policies, models", ("skipcore.policies", "skipcore.models")),
    ("lens and training", ("skipcore.lens", "skipcore.training")),
    ("evaluation and its labels", ("skipcore.evaluate", "skipcore.labels")),
    ("figures", ("skipcore.plots",)),
    ("the public API (the package root)", ("skipcore",)),
    ("the command line", ("skipcore.commands", "skipcore.__main__")),
]


def layer_of(module: str) -> int | None:
    """The layer a module belongs to: the one naming it or the package that holds it (the root only by name)."""
    for i, (_, homes) in enumerate(LAYERS):
        for home in homes:
            if module == home or (home != "skipcore" and module.startswith(home + ".")):
                return i
    return None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that goes up the layers, naming both modules and both layers."""
    out = []
    for mod in sorted(graph):
        for target in sorted(graph[mod]):
            here, there = layer_of(mod), layer_of(target)
            if here is not None and there is not None and there > here:
                out.append(
                    f"{mod} (layer {here}, {LAYERS[here][0]}) imports {target} (layer {there}, {LAYERS[there][0]})"
                )
    return out


def test_the_layer_checker_names_the_offending_import():
    graph = {
        "skipcore.decode.engine": {"skipcore.plots.trace", "skipcore.schedule"},
        "skipcore.schedule": set(),
    }
    assert layer_violations(graph) == [
        "skipcore.decode.engine (layer 5, the decode loop and its policies) imports skipcore.plots.trace "
        "(layer 9, figures)"
    ]
    assert layer_of("skipcore") == 10 and layer_of("skipcore.labels") == 8 and layer_of("skipcorex") is None


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_lower_layers_never_import_higher_ones():
    bad = layer_violations(import_graph())
    assert not bad, "a lower layer imports a higher one:\n" + "\n".join(bad)


# what the rest of the library may import of the kernels: the door (`kernels/door.py`), and the typed values a
# choice of dtype is said in (the command line reads the attention dtypes without torch)
KERNEL_DOOR = {"skipcore.kernels.door", "skipcore.kernels.precision", "skipcore.kernels.attention_dtypes"}


def test_the_kernels_are_reached_through_their_door():
    graph = import_graph()
    bad = sorted(
        f"{mod} imports {target}"
        for mod, targets in graph.items()
        if not mod.startswith("skipcore.kernels")
        for target in targets
        if target.startswith("skipcore.kernels.") and target not in KERNEL_DOOR
    )
    assert not bad, "the kernels reached past their door (skipcore/kernels/door.py):\n" + "\n".join(bad)


def test_the_library_never_imports_its_commands():
    graph = import_graph()
    for mod, targets in graph.items():
        if mod.startswith("skipcore.commands") or mod == "skipcore.__main__":
            continue
        assert not any(t.startswith("skipcore.commands") for t in targets), mod


def _user_code_imports() -> dict[str, set[str]]:
    found = {}
    for p in (REPO / "app").rglob("*.py"):
        found[str(p.relative_to(REPO))] = _imports(p, "app")
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
        tmp = nb.with_suffix(".py")
        found[str(nb.relative_to(REPO))] = set()
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module:
                found[str(nb.relative_to(REPO))] |= {node.module}
            elif isinstance(node, ast.Import):
                found[str(nb.relative_to(REPO))] |= {a.name for a in node.names}
        assert not tmp.exists()
    return found


def test_app_and_notebooks_use_no_test_helpers_or_private_modules():
    for where, names in _user_code_imports().items():
        bad = {
            n for n in names if n.startswith("skipcore.models.testing") or "._" in n.replace("__init__", "")
        }
        assert not bad, f"{where} imports {sorted(bad)}"


def test_public_api_names_what_users_call():
    import skipcore

    for name in (
        "SkipEngine",
        "Schedule",
        "schedule_for_speedup",
        "load_model",
        "read_trace",
        "write_trace",
        "StaticPolicy",
        "CalmPolicy",
        "AdaptivePolicy",
        "run_sweep",
        "SweepConfig",
        "summarize",
    ):
        assert name in skipcore.__all__ and getattr(skipcore, name) is not None, name
    assert "engine.generate(" in skipcore.__doc__


@pytest.mark.slow
def test_console_script_runs_from_any_folder(tmp_path):
    """`pip install -e .` (scripts/test.sh does it) gives a `skipcore` command; the shipped default model and
    corpus are found from outside the repository."""
    script = Path(sys.executable).parent / "skipcore"
    assert script.is_file(), "no skipcore console script: run `pip install -e .` (scripts/test.sh does)"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [str(script), "generate", "--limit", "1", "--max-new-tokens", "4", "--threads", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "layer speedup" in run.stderr and run.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["generate", "train", "sweep", "bench", "data"])
def test_every_subcommand_has_help(command):
    run = subprocess.run(
        [sys.executable, "-m", "skipcore", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert run.returncode == 0 and "usage:" in run.stdout, run.stderr
