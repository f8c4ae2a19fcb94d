"""AutoSampler through NumPyro's MCMC: decides in init, explains, delegates, reports to ArviZ."""

import warnings

import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian, logistic_regression
from pplsamplers import AutoSampler, to_arviz
from pplsamplers.select.auto import default_subsample_size


def test_small_n_chooses_nuts_and_explains(capsys):
    args, kwargs = linear_gaussian.load_data(N=300, D=2)
    mcmc = MCMC(
        AutoSampler(linear_gaussian.model), num_warmup=100, num_samples=100, progress_bar=False
    )
    # decided inside run, yet the chosen kernel's fields are recorded: NumPyro reads them
    # from a view that decides on the run's own arguments (no "call decide first" warning)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*decide", category=UserWarning)
        mcmc.run(jax.random.key(0), *args, **kwargs)
    assert "diverging" in mcmc.get_extra_fields()
    decision = mcmc.sampler.decision
    assert decision.kernel == "nuts" and decision.strategy == "rules"
    text = decision.explain()  # returned, not printed (issue 18 item 8)
    assert capsys.readouterr().out == ""
    assert "AutoSampler (rules) chose: nuts" in text and str(decision) == text
    decision.print_explanation()
    assert "AutoSampler (rules) chose: nuts" in capsys.readouterr().out
    assert "quadratic_misfit" in text and "N = 300" in text
    samples = mcmc.get_samples()["theta"]
    mean, cov = linear_gaussian.posterior(*args, **kwargs)
    np.testing.assert_allclose(samples.mean(0), mean, atol=5 * np.sqrt(np.diag(cov)).max() / 5)
    idata = to_arviz(mcmc)
    assert idata.attrs["pplsamplers_auto_kernel"] == "nuts"
    assert "N = 300" in idata.attrs["pplsamplers_auto_reasons"]
    # the run AutoSampler handed to NUTS is self-checked too (it used to go unchecked); 100
    # draws of one chain are too few for its R-hat and ESS, and its warning says whose run
    result = mcmc.sampler.self_check_result
    assert idata.attrs["self_check_passed"] == int(result.passed)
    assert result.passed or "AutoSampler's choice 'nuts'" in result.warning


def test_pilot_runs_candidates_and_respects_the_guard():
    (X, y), _ = logistic_regression.load_data(N=6000, d=3, seed=2)
    sampler = AutoSampler(
        logistic_regression.model,
        strategy="pilot",
        candidates=["sgld", "psgld"],
        pilot_options=dict(budget_epochs=5.0, ksd_points=50),
    )
    decision = sampler.decide((X, y), {})  # before MCMC.run: its diagnostics get recorded
    mcmc = MCMC(sampler, num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(1), X, y)
    assert sampler.decision is decision
    assert "data_evals" in mcmc.get_extra_fields() and "step_size" in mcmc.get_extra_fields()
    assert decision.strategy == "pilot" and set(decision.pilot) == {"sgld", "psgld"}
    assert not decision.pilot[decision.kernel]["rejected"]
    for result in decision.pilot.values():
        assert np.isfinite(result["ksd_squared"]) and result["ksd_se"] > 0
        assert result["ess_per_epoch"] > 0 and result["epochs"] > 0
    assert "subsample_size" not in decision.params  # the kernel chooses it (shared warmup)
    assert mcmc.get_samples()["w"].shape == (50, 3)
    assert "ESS/epoch" in decision.explain()


@pytest.mark.parametrize("as_numpy", [False, True])
def test_decision_and_chosen_kernel_share_one_warmup(monkeypatch, as_numpy):
    """Above SMALL_N the features read the shared warmup's mode stage, and the chosen kernel's
    own set-up is handed it: the mode, curvature and mode probe are computed once for the
    decision and the run.  With NumPy data too:
    AutoSampler converted them to new JAX arrays at each call, so the run's ``init`` computed
    the mode stage again, and its ``postprocess_fn`` a third time, inside NumPyro's sampling
    trace (where float32 data failed: the robustness ordinal model in float32)."""
    import importlib

    import pplsamplers.warmup as warmup

    # the mode stage is computed by ``mode_stage``: AutoSampler calls the package's, a
    # kernel's own ``setup`` the module's (no cache any more: a shared stage is passed on)
    setup_module = importlib.import_module("pplsamplers.warmup.setup")
    calls = []
    inner = setup_module.mode_stage
    counted = lambda *a, **k: calls.append(1) or inner(*a, **k)
    monkeypatch.setattr(warmup, "mode_stage", counted)
    monkeypatch.setattr(setup_module, "mode_stage", counted)
    (X, y), _ = logistic_regression.load_data(N=6000, d=3, seed=3)
    if as_numpy:
        X, y = np.asarray(X), np.asarray(y)
    sampler = AutoSampler(logistic_regression.model)
    decision = sampler.decide((X, y), {})
    assert decision.kernel != "nuts" and len(calls) == 1
    mcmc = MCMC(sampler, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), X, y)
    assert len(calls) == 1  # the run's prepare reused the decision's mode stage
    if as_numpy:
        return
    stage = inner(warmup.SetupOptions(logistic_regression.model), (X, y), {})
    np.testing.assert_array_equal(decision.features.map_position, stage.mode)
    assert decision.features.mode_count == stage.mode_count == 1


def test_default_subsample_size_and_bad_strategy():
    assert [default_subsample_size(n) for n in (50, 5_000, 50_000, 10**7)] == [50, 100, 500, 1000]
    with pytest.raises(ValueError, match="strategy"):
        AutoSampler(linear_gaussian.model, strategy="guess")


@pytest.mark.parametrize(
    "options, named",
    [
        (dict(ksd_points=3), "ksd_points"),
        (dict(budget_epochs=0.0), "budget_epochs"),
        (dict(guard_factor=0.5), "guard_factor"),
        (dict(top=0), "top"),
        (dict(budgets=5.0), "unknown names \\['budgets'\\]"),
    ],
)
def test_bad_pilot_options_fail_at_construction_and_name_the_option(options, named):
    # validated once, when the sampler is built, not minutes later inside the pilot
    with pytest.raises(ValueError, match=f"pilot_options.*{named}"):
        AutoSampler(linear_gaussian.model, strategy="pilot", pilot_options=options)


def test_pilot_candidate_that_fails_loses_and_is_explained(monkeypatch):
    import pplsamplers.select.pilot as pilot

    (X, y), _ = logistic_regression.load_data(N=6000, d=3, seed=2)
    real = pilot.make_kernel

    def flaky(name, model, **options):
        if name == "psgld":
            raise ValueError("reference covariance is not positive definite")
        return real(name, model, **options)

    monkeypatch.setattr(pilot, "make_kernel", flaky)
    sampler = AutoSampler(
        logistic_regression.model,
        strategy="pilot",
        candidates=["sgld", "psgld"],
        pilot_options=dict(budget_epochs=3.0, ksd_points=30),
    )
    decision = sampler.decide((X, y), {})
    assert decision.kernel == "sgld"
    failed = decision.pilot["psgld"]
    assert (
        failed["rejected"]
        and failed["ess_per_epoch"] == 0
        and "positive definite" in failed["error"]
    )
    assert "FAILED (ValueError" in decision.explain()


def test_decided_sampler_works_with_every_chain_method_and_is_deterministic():
    import warnings

    (X, y), _ = logistic_regression.load_data(N=6000, d=3, seed=2)
    sampler = AutoSampler(logistic_regression.model, candidates=["sgld", "sbps"])
    assert sampler.decide((X, y), {}).kernel in ("sgld", "sbps")
    draws = {}
    for method in ("sequential", "vectorized", "parallel"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*There are not enough devices.*")
            mcmc = MCMC(
                sampler,
                num_warmup=30,
                num_samples=40,
                num_chains=2,
                chain_method=method,
                progress_bar=False,
            )
            mcmc.run(jax.random.key(4), X, y)
        draws[method] = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
        assert draws[method].shape == (2, 40, 3) and np.all(np.isfinite(draws[method]))
        assert "data_evals" in mcmc.get_extra_fields()  # decided first: diagnostics recorded
    np.testing.assert_allclose(draws["vectorized"], draws["sequential"], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(draws["parallel"], draws["sequential"], rtol=1e-6, atol=1e-8)
    assert not np.allclose(draws["sequential"][0], draws["sequential"][1])  # chains differ
