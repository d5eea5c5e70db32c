"""What ``pip install`` puts into site-packages: the relay and the fake upstream its offline
mode loads (entry point ``relay.offline_upstream``), never the harnesses or the tests."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"relay", "fakeupstream"}
HARNESSES = {"scenarios", "live", "bench", "tests"}


def checkout_copy(dest: Path) -> Path:
    """The source tree without build leftovers: setuptools builds in ``build/`` beside the
    sources and packs whatever it finds there, so a stale tree could hide a regression."""
    names = ["setup.cfg", "pyproject.toml", "README.md", "LICENSE", *SHIPPED, *HARNESSES]
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "fixtures")
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=skip)
        else:
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = checkout_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--wheel-dir", str(out), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_the_relay_and_its_offline_upstream_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == SHIPPED
    assert not top & HARNESSES
    assert "relay/app/cli.py" in names and "fakeupstream/embedded.py" in names


def test_the_wheel_declares_the_commands_the_offline_upstream_and_its_license(
    wheel: Path,
) -> None:
    archive = zipfile.ZipFile(wheel)
    (dist_info,) = {n.split("/", 1)[0] for n in archive.namelist() if ".dist-info/" in n}
    points = configparser.ConfigParser()
    points.read_string(archive.read(f"{dist_info}/entry_points.txt").decode())
    assert points["console_scripts"]["relay"] == "relay.app.cli:main"
    assert points["relay.offline_upstream"]["fake"] == "fakeupstream.embedded:create"
    metadata = archive.read(f"{dist_info}/METADATA").decode().splitlines()
    assert {"License: MIT", "License-Expression: MIT"} & set(metadata)
    assert "License-File: LICENSE" in metadata
    assert "Requires-Python: >=3.11" in metadata
    platforms = {line.split(" :: ", 1)[1] for line in metadata if "Operating System" in line}
    assert platforms == {"POSIX :: Linux", "MacOS"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "Supported platforms: **Linux and macOS**, with **Python 3.11 or newer**" in readme
    # Metadata 2.4 keeps license files under licenses/; older setuptools beside METADATA.
    (licence,) = [
        archive.read(name).decode()
        for name in archive.namelist()
        if name in (f"{dist_info}/LICENSE", f"{dist_info}/licenses/LICENSE")
    ]
    assert licence == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License")


def test_what_the_wheel_ships_imports_nothing_it_leaves_out(wheel: Path, tmp_path: Path) -> None:
    """Every module of the wheel imports from the wheel and its requirements alone: the
    editable install's finder is dropped and the checkout is not on the path."""
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    program = f"""
import importlib, importlib.util, pkgutil, sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in type(f).__module__]
sys.path.insert(0, {str(unpacked)!r})
for name in {sorted(HARNESSES)!r}:
    assert importlib.util.find_spec(name) is None, name
count = 0
for package in {sorted(SHIPPED)!r}:
    root = importlib.import_module(package)
    assert root.__file__.startswith({str(unpacked)!r}), root.__file__
    for module in pkgutil.walk_packages(root.__path__, package + "."):
        if module.name.endswith("__main__"):
            continue  # importing one runs it
        importlib.import_module(module.name)
        count += 1
print(count)
"""
    done = subprocess.run(
        [sys.executable, "-I", "-c", program],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 100  # every module, not a few
