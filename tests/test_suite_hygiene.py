"""The suite itself: tests leave torch's configuration as they found it, whatever pytest's version.

``monkeypatch.setattr`` on torch's config modules (``torch._dynamo.config``, ``torch._inductor.config``, …) is
undone by pytest 9 by deleting the attribute, since those modules keep their values outside ``__dict__``; every
later reader of the setting then fails. Tests use torch's own ``config.patch(...)`` instead."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def monkeypatched_torch_configs(tree: ast.Module) -> list[int]:
    """Lines of ``monkeypatch.setattr(<torch...config...>, ...)`` calls, by object or by dotted string."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "monkeypatch" and node.args):
            target = node.args[0]
            dotted = target.value if isinstance(target, ast.Constant) else ast.unparse(target)
            parts = str(dotted).split(".")
            if parts[0] == "torch" and "config" in parts:
                lines.append(node.lineno)
    return lines


def test_no_test_monkeypatches_torch_configuration():
    found = [f"{path.relative_to(TESTS)}:{line}" for path in sorted(TESTS.rglob("*.py"))
             for line in monkeypatched_torch_configs(ast.parse(path.read_text(), str(path)))]
    assert not found, f"use torch's config.patch(...) instead of monkeypatch at {', '.join(found)}"


def test_the_check_finds_both_spellings_of_a_monkeypatched_torch_setting():
    source = ('monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)\n'
              'monkeypatch.setattr("torch._inductor.config.freezing", True)\n'
              'monkeypatch.setattr(torch, "compile", slow)\n'
              'monkeypatch.setattr(kernels, "MAX_GRAPHS", 1)\n')
    assert monkeypatched_torch_configs(ast.parse(source)) == [1, 2]
