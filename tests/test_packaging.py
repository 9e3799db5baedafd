"""The package as a user installs it: a plain wheel carries every subpackage and the templates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel from the checkout and unpack it (no dependencies) into a folder."""
    dist = tmp_path_factory.mktemp("dist")
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(REPO)], check=True, timeout=300)
    wheels = list(dist.glob("profreport-*.whl"))
    assert len(wheels) == 1
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                    "--target", str(target), str(wheels[0])], check=True, timeout=300)
    return target


def run_from(target: Path, code: str) -> str:
    """Run Python code with the unpacked wheel first on the path, from a neutral folder."""
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=target.parent,
                            capture_output=True, text=True, timeout=120, check=True)
    return result.stdout


def test_wheel_holds_the_packages_under_profreport_only(wheel_install: Path) -> None:
    top_level = sorted(p.name for p in wheel_install.iterdir() if not p.name.endswith("-info"))
    assert top_level == ["bin", "profreport"] or top_level == ["profreport"]
    for sub in ("parsers", "reports", "runner", "templates"):
        assert (wheel_install / "profreport" / sub / "__init__.py").is_file()


def test_wheel_imports_from_itself_and_carries_templates(wheel_install: Path) -> None:
    out = run_from(wheel_install, (
        "import importlib.resources, profreport, profreport.parsers\n"
        "import profreport.reports.analysis.results\n"
        "print(profreport.__file__)\n"
        "print(sorted(p.name for p in importlib.resources.files('profreport.templates')"
        ".iterdir() if p.name.endswith(('.j2', '.css'))))\n"))
    module_file, templates = out.splitlines()
    assert module_file.startswith(str(wheel_install))
    assert templates != "[]", "the wheel carries no templates"
