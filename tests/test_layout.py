"""The package's layering, read from the source with ast (docs/internals.md draws it): imports point down
the layers, no module imports another's underscore name, and imports sit at the top of a module except
where an optional dependency is imported on use."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "t2t"
# Layers, lowest first; a module may import its own layer's modules and any lower layer's.
LAYERS = [
    {"t2t.errors", "t2t.config", "t2t.registry", "t2t.hub", "t2t.terminal", "t2t.allocator", "t2t.extras",
     "t2t.durable"},
    {"t2t.models"},
    {"t2t.data"},
    {"t2t.checkpoints"},
    {"t2t.evaluation"},
    {"t2t.training"},
    {"t2t.serve"},
    {"t2t.cli", "t2t.testing"},
    # the public surface and the module paths that saved runs' --module files and pickles import
    {"t2t", "t2t.task", "t2t.sources", "t2t.preprocessors", "t2t.metrics", "t2t.vocab"},
]
# Imported where used: optional dependencies (t2t runs without them), and heavy libraries that `import t2t`
# and most commands never need (datasets and huggingface_hub take seconds; matplotlib only draws plots;
# torch.distributed's FSDP and checkpoint modules only under torchrun).
ON_USE = {"transformers", "tokenizers", "msgpack", "datasets", "huggingface_hub", "matplotlib", "torch.distributed",
          "peft", "tensorstore", "tensorflow", "pyarrow"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    for i, layer in enumerate(LAYERS):
        if any(module.startswith(prefix + ".") for prefix in layer if prefix != "t2t"):
            return i
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and docs/internals.md")


def imports_of(tree: ast.Module):
    """(imported t2t module, imported names, node) for every import of a t2t module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "t2t":
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                yield (target if target in MODULES else node.module), alias.name, node
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "t2t":
                    yield alias.name, None, node


def test_every_module_has_a_layer():
    for name in MODULES:
        layer_of(name)


def test_imports_point_down_the_layers():
    upward = [f"{name} imports {target}" for name, tree in TREES.items() for target, _, _ in imports_of(tree)
              if target in MODULES and layer_of(target) > layer_of(name)]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph = {name: {t for t, _, _ in imports_of(tree) if t in MODULES and t != name} for name, tree in TREES.items()}
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                pytest.fail("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]) if nxt in path
                            else f"import cycle through {nxt}")
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_no_module_imports_another_modules_underscore_name():
    private = [f"{name} imports {target}.{imported}" for name, tree in TREES.items()
               for target, imported, _ in imports_of(tree)
               if imported and imported.startswith("_") and imported != "__all__"]
    assert private == []


def test_imports_sit_at_the_top_except_optional_dependencies():
    local = []
    for name, tree in TREES.items():
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    local += [f"{name}.{func.name} imports {m}" for m in modules
                              if not any(m == lib or m.startswith(lib + ".") for lib in ON_USE)]
    assert local == []


def test_import_t2t_does_not_load_the_compiler():
    """torch.compile's machinery (torch._dynamo, seconds to load) comes in when something is compiled, not
    when t2t is imported (a module-level torch.compile would load it)."""
    code = "import sys, t2t; assert 'torch._dynamo' not in sys.modules, 'import t2t loaded torch._dynamo'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
