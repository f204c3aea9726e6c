"""The package layering of pyproject.toml's ``[tool.importlinter]`` contracts, checked by import-linter: the
attention core, the shared layers and rollout are leaves; no domain imports another; the library core imports no
domain; no import cycles between sibling modules."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_import_contracts_are_kept():
    result = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--config", "pyproject.toml", "--no-cache"],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"lint-imports exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    assert "0 broken" in result.stdout, result.stdout
