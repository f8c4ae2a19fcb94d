"""The ``pplsamplers`` command: demo and fit write a summary, a PNG and a netCDF file."""

import subprocess
import sys
from pathlib import Path

import arviz as az
import pytest

from pplsamplers.cli import main

ROOT = Path(__file__).resolve().parents[2]


def small_demo_options(out_dir) -> list[str]:
    """A demo small enough for a unit test: N = 2000, d = 3, 2 chains × 100 draws."""
    return ["--N", "2000", "--d", "3", "--num-samples", "100", "--num-warmup", "100",
            "--num-chains", "2", "--out", str(out_dir), "--no-progress"]  # fmt: skip


def test_demo_small_defaults_to_auto_and_explains(tmp_path, capsys):
    code = main(["demo", *small_demo_options(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "AutoSampler (rules) chose: nuts" in out and "N = 2000" in out  # the explanation
    assert "ess_bulk" in out and "r_hat" in out and "auto -> nuts" in out
    assert "ESS/epoch" in out  # NUTS epochs come from its leapfrog steps
    assert (tmp_path / "demo_trace.png").stat().st_size > 10_000
    idata = az.from_netcdf(tmp_path / "demo.nc")
    assert idata.posterior["w"].shape == (2, 100, 3)
    assert idata.attrs["pplsamplers_auto_kernel"] == "nuts"
    assert "n_steps" in idata.sample_stats


def test_demo_with_sgld_control_variate(tmp_path, capsys):
    code = main(["demo", "--sampler", "sgld", *small_demo_options(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ess_bulk" in out and "r_hat" in out and "ESS/epoch" in out
    assert (tmp_path / "demo_trace.png").stat().st_size > 10_000
    idata = az.from_netcdf(tmp_path / "demo.nc")
    assert idata.posterior["w"].shape == (2, 100, 3)
    assert "data_evals" in idata.sample_stats


def test_fit_model_file_with_data_options(tmp_path, capsys):
    code = main(
        [
            "fit",
            str(ROOT / "models" / "linear_gaussian.py"),
            "--sampler",
            "psgld",
            "--num-samples",
            "50",
            "--num-warmup",
            "50",
            "--num-chains",
            "1",
            "--subsample-size",
            "10",
            "--data",
            "N=100",
            "D=2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "theta[0]" in capsys.readouterr().out
    assert (tmp_path / "linear_gaussian.nc").exists()
    assert (tmp_path / "linear_gaussian_trace.png").exists()


def test_fit_with_nuts_uses_full_data(tmp_path, capsys):
    code = main(
        [
            "fit",
            str(ROOT / "models" / "logistic_regression.py"),
            "--sampler",
            "nuts",
            "--num-samples",
            "50",
            "--num-warmup",
            "50",
            "--num-chains",
            "1",
            "--data",
            "N=200",
            "d=2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "w[1]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "no/such/file.py"], "does not exist"),
        (
            [
                "fit",
                str(ROOT / "models" / "linear_gaussian.py"),
                "--subsample-size",
                "0",
                "--data",
                "N=20",
            ],
            "subsample_size",
        ),
        (["fit", str(ROOT / "models" / "linear_gaussian.py"), "--data", "N"], "KEY=VALUE"),
        (
            [
                "fit",
                str(ROOT / "models" / "linear_gaussian.py"),
                "--step-size",
                "-1",
                "--data",
                "N=20",
            ],
            "step_size",
        ),
        (["demo", "--num-samples", "0"], "--num-samples"),
    ],
)
def test_errors_are_one_clear_line(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)] if argv[0] == "demo" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pplsamplers: error:") and message in err
    assert "\n" not in err and "Traceback" not in err


def test_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "pplsamplers.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "demo" in result.stdout and "fit" in result.stdout
