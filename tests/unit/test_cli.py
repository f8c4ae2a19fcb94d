"""The ``pplsamplers`` command: demo and fit write a summary, a PNG and a netCDF file."""

import subprocess
import sys
from pathlib import Path

import arviz as az
import pytest

from pplsamplers.cli import main

ROOT = Path(__file__).resolve().parents[2]


def small_demo_options(out_dir) -> list[str]:
    """``--small``: N = 2000, d = 3, 2 chains × 100 draws."""
    return ["--small", "--out", str(out_dir), "--no-progress"]


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
    assert "log_likelihood" not in idata.children  # only with --log-likelihood
    assert "demo.nc (" in out and "kB)" in out  # the file size is printed


def test_demo_with_sgld_control_variate(tmp_path, capsys):
    code = main(["demo", "--sampler", "sgld", *small_demo_options(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ess_bulk" in out and "r_hat" in out and "ESS/epoch" in out
    assert "control variate: on:" in out  # control_variate="auto" by default
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
            "--no-control-variate",  # reaches the kernel (it was dropped: "auto" ran instead)
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "theta[0]" in out and "control variate: off (control_variate=False)" in out
    assert (tmp_path / "linear_gaussian.nc").exists()
    assert (tmp_path / "linear_gaussian_trace.png").exists()


def test_log_likelihood_is_written_only_on_request(tmp_path, capsys):
    """Issue 17 part 3: the full-N pointwise log-likelihood made a 320 MB file; now opt-in."""
    argv = ["fit", str(ROOT / "models" / "logistic_regression.py"), "--sampler", "sgld",
            "--num-samples", "20", "--num-warmup", "20", "--num-chains", "1",
            "--subsample-size", "20", "--data", "N=300", "d=2", "--no-progress"]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "without")]) == 0
    assert main([*argv, "--out", str(tmp_path / "with"), "--log-likelihood"]) == 0
    out = capsys.readouterr().out
    assert "logistic_regression.nc (" in out
    without = az.from_netcdf(tmp_path / "without" / "logistic_regression.nc")
    assert "log_likelihood" not in without.children
    with_ll = az.from_netcdf(tmp_path / "with" / "logistic_regression.nc")
    assert with_ll.log_likelihood["y"].shape == (1, 20, 300)  # every datum, not a minibatch
    big = (tmp_path / "with" / "logistic_regression.nc").stat().st_size
    assert big > (tmp_path / "without" / "logistic_regression.nc").stat().st_size


def test_model_file_may_import_a_module_next_to_it(tmp_path, capsys):
    """Issue 18 item 6: the loader put the file's parent's parent on sys.path."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_helpers.py").write_text("SCALE = 2.0\n")
    (folder / "m.py").write_text(
        "import numpyro, numpyro.distributions as dist, jax.numpy as jnp\n"
        "from my_helpers import SCALE\n"
        "def model(y=None):\n"
        "    mu = numpyro.sample('mu', dist.Normal(0.0, SCALE))\n"
        "    with numpyro.plate('data', 20):\n"
        "        numpyro.sample('y', dist.Normal(mu, 1.0), obs=y)\n"
        "def load_data():\n"
        "    return (), {'y': jnp.linspace(-1.0, 1.0, 20)}\n"
    )
    argv = ["fit", str(folder / "m.py"), "--sampler", "nuts", "--num-samples", "10",
            "--num-warmup", "10", "--num-chains", "1", "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert "mu" in capsys.readouterr().out
    assert str(folder) not in sys.path  # the loader cleans up after itself


def test_debug_is_accepted_after_the_command(capsys):
    """Issue 18 item 6: ``pplsamplers fit m.py --debug`` was rejected by argparse."""
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main(["fit", "no/such/file.py", "--debug"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main(["--debug", "fit", "no/such/file.py"])
    assert main(["fit", "no/such/file.py"]) == 2  # without it: one line, no traceback


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


def test_fit_runs_a_model_with_a_site_marked_for_enumeration(tmp_path, capsys):
    """``models/mixture.py`` marks the component assignment with ``config_enumerate``: the
    command samples the marginalised model and reports the continuous latents."""
    argv = ["fit", str(ROOT / "models" / "mixture.py"), "--sampler", "sgld",
            "--num-samples", "30", "--num-warmup", "30", "--num-chains", "1",
            "--data", "N=500", "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "mu[2]" in out and "w[2]" in out and "self-check:" in out
    idata = az.from_netcdf(tmp_path / "mixture.nc")
    assert set(idata.posterior.data_vars) >= {"mu", "sigma", "w"}
    assert "z" not in idata.posterior  # the enumerated site is marginalised, not sampled
