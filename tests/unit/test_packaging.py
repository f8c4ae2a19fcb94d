"""Issue 17 part 2: the wheel installs one top-level package, and its demo runs from it.

The wheel is built from the working tree and installed (``--no-deps``) into a fresh venv
outside the repository; the dependencies come from this venv's site-packages through a
``.pth`` line (a plain path entry: the editable install's own ``.pth`` there is not
processed, so the repository is not importable from the new venv).  scikit-learn is blocked
in the new venv (``sitecustomize``) to show that the core and the demo do not need it.
"""

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(args, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv with the wheel installed, a working directory outside the repo)."""
    pytest.importorskip("hatchling", reason="the test extra installs hatchling to build offline")
    tmp = tmp_path_factory.mktemp("packaging")
    wheels = tmp / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", wheels, ROOT], cwd=tmp)  # fmt: skip
    (wheel,) = wheels.glob("pplsamplers-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
        ).stdout.strip()
    )
    (site / "_repo_venv_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['sklearn'] = None\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
         cwd=tmp)  # fmt: skip
    work = tmp / "elsewhere"
    work.mkdir()
    return wheel, python, work


def test_wheel_holds_only_the_pplsamplers_package(installed):
    wheel, _, _ = installed
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"pplsamplers", wheel.name.split("-py")[0] + ".dist-info"}, tops
    assert "pplsamplers/datasets/logistic_regression.py" in zipfile.ZipFile(wheel).namelist()


def test_installed_package_imports_without_models_or_sklearn(installed):
    _, python, work = installed
    code = (
        "import importlib.util, pplsamplers\n"
        "assert 'site-packages' in pplsamplers.__file__, pplsamplers.__file__\n"
        "assert importlib.util.find_spec('models') is None, 'a top-level models package'\n"
        "from pplsamplers.datasets import logistic_regression as lr\n"
        "try:\n"
        "    lr.load_data(dataset='breast_cancer')\n"
        "except ImportError as error:\n"
        "    assert 'pplsamplers[datasets]' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('sklearn is blocked; breast_cancer must name the extra')\n"
        "print('ok', pplsamplers.__file__)\n"
    )
    out = _run([python, "-c", code], cwd=work).stdout
    assert str(ROOT) not in out


def test_installed_demo_small_runs(installed):
    _, python, work = installed
    script = python.parent / "pplsamplers"
    result = _run([script, "demo", "--small", "--out", work / "out", "--no-progress"], cwd=work)
    assert "auto -> " in result.stdout and "ESS/s" in result.stdout
    assert (work / "out" / "demo.nc").stat().st_size > 0
