"""The supported PyTorch range (pyproject.toml) and the exact pins each supported torch is installed with
(constraints/torch-X.txt, README.md's Install), and that CI installs and tests each of them."""

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = sorted((REPO / "constraints").glob("torch-*.txt"))


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{path.name}: {line} is not an exact pin"
            pins[requirement.name.lower().replace("_", "-")] = specifier.version
    return pins


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_every_supported_torch_has_a_pin_file():
    assert [path.name for path in CONSTRAINTS] == ["torch-2.13.0.txt", "torch-2.14.1.txt"]


@pytest.mark.parametrize("path", CONSTRAINTS, ids=lambda path: path.name)
def test_pin_file_agrees_with_pyproject(path):
    pins = _pins(path)
    project = _project()
    torch_version = path.stem.removeprefix("torch-")
    assert pins["torch"] == torch_version
    extras = project["optional-dependencies"]
    for line in project["dependencies"] + [line for extra in extras.values() for line in extra]:
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{path.name} pins no {name} ({line})"
        assert requirement.specifier.contains(pins[name]), f"{path.name}: {line}"


def test_supported_pythons():
    assert all(SpecifierSet(_project()["requires-python"]).contains(v) for v in ("3.11", "3.12"))


@pytest.mark.parametrize("path", CONSTRAINTS, ids=lambda path: path.name)
def test_ci_and_readme_install_each_pin_file(path):
    name = f"constraints/{path.name}"
    assert name in (REPO / ".ci" / "run").read_text()
    assert name in (REPO / "README.md").read_text()
