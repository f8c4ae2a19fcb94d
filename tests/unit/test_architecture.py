"""Architecture rules (issue 13), checked statically on the source: no import cycle, no
function-local import that hides one, the layers import only downwards, every file is at most
about 450 lines, and a sampler's name is written once (in the registry)."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pplsamplers"
MAX_LINES = 450
LAYERS = {  # a module may import only from its own layer or lower ones
    "types": 0,
    "validation": 0,
    "cache": 0,
    "potential": 1,
    "pdmp": 2,
    "kernels": 3,
    "diagnostics": 3,
    "infer": 4,
    "registry": 5,
    "samplers": 6,
    "select": 6,
    "datasets": 6,
    "checkpoint": 6,
    "cli": 7,
    "__init__": 8,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> tuple[set[str], list[str]]:
    """(module-level pplsamplers imports, function-local pplsamplers imports)."""
    tree = ast.parse(path.read_text())
    top, local = set(), []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("pplsamplers")
        ):
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            target = top if node in tree.body else None
            if target is None:
                local.append(node.module)
            else:
                top.update(names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pplsamplers"):
                    (top.add(alias.name) if node in tree.body else local.append(alias.name))
    return top, local


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        top, _ = imports(path)
        targets = {t for t in top if t in known}
        # importing a.b.c runs the __init__ of a.b first (the root package's always runs first
        # and is the public re-export layer, so it is left out)
        for t in list(targets):
            parts = t.split(".")
            targets.update(
                ".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in known
            )
        # a package's own submodules import siblings through it (the package runs first)
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        edges[name] = targets - {name} - ancestors
    return edges


def test_no_import_cycle():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_no_function_local_imports_of_the_package():
    hidden = {name: imports(path)[1] for name, path in modules().items()}
    # the CLI defers the JAX stack so that `pplsamplers --help` answers at once
    hidden = {name: local for name, local in hidden.items() if local and name != "pplsamplers.cli"}
    assert not hidden, f"function-local imports hide the dependency graph: {hidden}"


def layer(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    return LAYERS[key]


def test_layers_import_only_downwards():
    bad = []
    for name, targets in graph().items():
        for target in targets:
            if target != "pplsamplers" and layer(target) > layer(name):
                bad.append(f"{name} -> {target}")
    assert not bad, "upward imports: " + ", ".join(sorted(bad))


def test_only_potential_knows_numpyro_internals():
    internal = re.compile(r"^\s*(from|import) numpyro\.(handlers|primitives|distributions\.util)")
    offenders = [
        name
        for name, path in modules().items()
        if ".potential" not in name
        and any(internal.match(line) for line in path.read_text().splitlines())
    ]
    assert not offenders, f"NumPyro internals used outside potential/: {offenders}"


def test_files_are_short():
    long = {
        name: n
        for name, p in modules().items()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_a_sampler_name_is_written_once():
    from pplsamplers.registry import SAMPLERS

    offenders = []
    for name, path in modules().items():
        if name in ("pplsamplers.registry",):
            continue
        text = path.read_text()
        for sampler in SAMPLERS:
            if re.search(rf"""==\s*["']{sampler}["']|["']{sampler}["']\s*:""", text):
                offenders.append(f"{name}: {sampler!r}")
    assert not offenders, "sampler names dispatched on outside the registry: " + ", ".join(
        offenders
    )
