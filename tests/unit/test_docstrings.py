"""Constructors with many parameters document them (issue 49, item 8).

Every public class of the project's packages whose ``__init__`` takes more than ``MAX_UNDOCUMENTED`` parameters
(``self``, ``*args`` and ``**kwargs`` not counted) has an ``Args:`` section, in the class docstring or in
``__init__``'s, in the style of PyG's layers (one entry per argument: its meaning, type if not obvious, default),
and that section names every one of those parameters. Read with :mod:`ast`: nothing is imported, no model built.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hub", "vision", "graph", "audio", "tabular", "medical", "timeseries")
MAX_UNDOCUMENTED = 3  # parameters an __init__ may take without an Args: section


def _parameters(init: ast.FunctionDef) -> list[str]:
    args = init.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)][1:]  # without self


def _args_section(doc: str) -> str | None:
    """The text of the ``Args:`` section (up to the next unindented line after it), or None without one."""
    match = re.search(r"^(\s*)Args:\s*$", doc, re.MULTILINE)
    if match is None:
        return None
    indent, lines = len(match.group(1)), []
    for line in doc[match.end():].splitlines()[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        lines.append(line)
    return "\n".join(lines)


def undocumented(source: str, where: str = "<string>") -> list[str]:
    """``where:line Class`` for each public class whose __init__ takes too many parameters to go without an
    ``Args:`` section and has none, or whose section does not name some of them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None or len(params := _parameters(init)) <= MAX_UNDOCUMENTED:
            continue
        docs = [ast.get_docstring(node, clean=True) or "", ast.get_docstring(init, clean=True) or ""]
        sections = [s for s in map(_args_section, docs) if s is not None]
        if not sections:
            found.append(f"{where}:{node.lineno} {node.name} ({len(params)} parameters, no Args: section)")
            continue
        text = "\n".join(sections)
        missing = [p for p in params if not re.search(rf"\b{re.escape(p)}\b", text)]
        if missing:
            found.append(f"{where}:{node.lineno} {node.name} (Args: does not name {', '.join(missing)})")
    return found


def test_checker_catches_a_constructor_without_args():
    source = '''
class Documented:
    """A layer.

    Args:
        a: first.
        b: second.
        c, d: the others.
    """
    def __init__(self, a, b, c, d=1):
        pass

class Missing:
    """No section."""
    def __init__(self, a, b, c, d=1):
        pass

class Partial:
    """A layer.

    Args:
        a: first.
        b: second.

    Shapes: c and d are not in the section.
    """
    def __init__(self, a, b, *, c, d):
        pass

class Small:
    def __init__(self, a, b, c, *args, **kwargs):
        pass

class _Private:
    def __init__(self, a, b, c, d):
        pass
'''
    assert undocumented(source) == ["<string>:13 Missing (4 parameters, no Args: section)",
                                    "<string>:18 Partial (Args: does not name c, d)"]


def test_public_constructors_document_their_arguments():
    files = sorted(f for package in PACKAGES for f in (ROOT / package).rglob("*.py"))
    assert len(files) > 50, f"found only {len(files)} source files under {ROOT}"
    found = [entry for f in files for entry in undocumented(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    listing = "\n".join(found)
    assert not found, (f"public classes whose __init__ takes more than {MAX_UNDOCUMENTED} parameters need an Args: "
                       f"section naming each (see vision/models/cct.py's ConvTokenizer):\n{listing}")
