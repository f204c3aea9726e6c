"""The core names no input kind and no domain: what a kind does is declared on its class (``<domain>/kinds.py``) and
read through it, so a string ``"image"`` or ``"tabular"`` in ``hub/`` code is a seam import-linter cannot see.
Docstrings may name them in prose."""
import ast
from pathlib import Path

from hub.core import registry
from hub.kinds import KINDS

HUB = Path(__file__).resolve().parents[2] / "hub"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def string_constants(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant of ``source`` that is not a docstring (f-strings' literal parts
    included)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def forbidden_names() -> set[str]:
    """Every registered kind's name and every domain package's name (all domains imported)."""
    registry.import_domains()
    names = set(KINDS.names()) | set(registry.domain_packages())
    names |= {KINDS.get(name).domain for name in KINDS.names()}
    return names


def test_string_constants_finds_code_strings_but_not_docstrings():
    source = '"""Module: image."""\ndef f():\n    """Kind image."""\n    return {"kind": "image", "x": f"{1}audio"}\n'
    assert sorted(text for _, text in string_constants(source)) == ["audio", "image", "kind", "x"]


def test_the_names_cover_every_domain_and_kind():
    names = forbidden_names()
    assert {"vision", "graph", "audio", "tabular", "medical", "timeseries"} <= names
    assert {"image", "scene", "table", "survival_table", "icu_stays", "sensor_series", "traffic_series"} <= names


def test_hub_code_names_no_kind_and_no_domain():
    names = forbidden_names()
    found = [f"{path.relative_to(HUB.parent)}:{line}: {text!r}" for path in sorted(HUB.rglob("*.py"))
             for line, text in string_constants(path.read_text()) if text in names]
    assert not found, "kind or domain names in hub/ code (declare them on the kind instead):\n" + "\n".join(found)


def input_spec_keys(source: str) -> list[tuple[int, str]]:
    """``(line, key)`` of every constant key read from an ``input_spec`` in ``source``: ``x.input_spec["key"]``,
    ``input_spec.get("key")``, ``spec.pop("key")`` and the like."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "pop", "setdefault") and node.args:
            target, key = node.func.value, node.args[0]
        else:
            continue
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        if name in ("input_spec", "spec") and isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((node.lineno, key.value))
    return found


def test_input_spec_keys_finds_reads():
    source = 'a = card.input_spec["preprocessor"]\nb = input_spec.get("channels", 1)\nc = other["x"]\n'
    assert input_spec_keys(source) == [(1, "preprocessor"), (2, "channels")]


def test_hub_code_reads_no_kind_field_of_an_input_spec():
    """An ``input_spec``'s fields beyond ``kind`` belong to its kind's ``Spec``: the core asks the kind (a hook such
    as ``target_units`` or ``ood_input_scores``) instead of reading them."""
    found = [f"{path.relative_to(HUB.parent)}:{line}: {key!r}" for path in sorted(HUB.rglob("*.py"))
             for line, key in input_spec_keys(path.read_text()) if key != "kind"]
    assert not found, "input_spec fields read in hub/ (ask the input kind instead):\n" + "\n".join(found)
