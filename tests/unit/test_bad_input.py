"""Bad input gets a clear error naming the site or argument."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from models import linear_gaussian, logistic_regression
from pplsamplers import SGLD, AutoSampler, make_potential
from pplsamplers.model import flatten_init_params, inspect, validate_data

X, Y = logistic_regression.load_data(N=50, d=2, seed=0)[0]


def discrete_model(X, y=None):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + k), obs=y[idx])


def no_plate_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w).to_event(1), obs=y)


def two_plate_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("a", X.shape[0], subsample_size=5) as i:
        numpyro.sample("ya", dist.Bernoulli(logits=X[i] @ w), obs=y[i])
    with numpyro.plate("b", X.shape[0], subsample_size=5) as j:
        numpyro.sample("yb", dist.Bernoulli(logits=X[j] @ w), obs=y[j])


def local_latent_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        z = numpyro.sample("z", dist.Normal(0, 1))
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + z), obs=y[idx])


def bad_start_model(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=2 * y[idx])  # not in {0, 1}


def test_discrete_latent_site_is_named():
    with pytest.raises(ValueError, match="latent site 'k' is discrete.*AutoSampler"):
        make_potential(discrete_model, (X, Y))


def test_missing_plate_with_subsample_size_explains_the_fix():
    with pytest.raises(ValueError, match="no data plate.*numpyro.plate"):
        make_potential(no_plate_model, (X, Y), subsample_size=10)
    # without subsample_size the model is usable full-batch: the whole likelihood is one datum
    pot = make_potential(no_plate_model, (X, Y)).estimator
    assert (pot.N, pot.n) == (1, 1)


def test_two_subsample_plates_are_rejected():
    with pytest.raises(ValueError, match="2 subsample plates.*data_plate"):
        make_potential(two_plate_model, (X, Y))


def test_unknown_data_plate_name():
    with pytest.raises(ValueError, match="data_plate='nope' is not a plate"):
        make_potential(logistic_regression.model, (X, Y), data_plate="nope")


def test_local_latent_inside_data_plate():
    with pytest.raises(ValueError, match=r"latent site\(s\) 'z' lie inside the data plate"):
        make_potential(local_latent_model, (X, Y))


def test_auto_sampler_runs_full_data_nuts_for_per_datum_latents():
    """NUTS accepts per-datum latents; no minibatch kernel can subsample them.  AutoSampler
    used to raise the kernels' error; it now says why and runs NUTS on the full data."""
    from pplsamplers import AutoSampler

    sampler = AutoSampler(local_latent_model)
    decision = sampler.decide((X, Y), {})
    assert decision.kernel == "nuts" and decision.features.local_sites == ("z",)
    assert "per-datum latent site(s) z" in " ".join(decision.reasons)
    assert all(c.name == "nuts" or "cannot subsample" in c.reasons[-1] for c in decision.ranking)
    # no minibatch candidate to pilot: the pilot strategy takes the same decision
    assert AutoSampler(local_latent_model, strategy="pilot").decide((X, Y), {}).kernel == "nuts"
    mcmc = MCMC(sampler, num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.key(0), X, Y)
    assert mcmc.get_samples()["z"].shape == (50, X.shape[0])
    from pplsamplers import check_run

    # no data plate to evaluate the full-data check with: convergence and chain health only,
    # on the constrained draws (it used to return None, a run that was never checked)
    result = check_run(mcmc, warn_user=False)
    assert result.stein_whitening == "skipped: no full-data potential for this model"
    assert result.names[0] == "w[0]" and "z[0]" in result.names
    assert len(result.names) == len(result.rhat) and np.isfinite(result.rhat).all()
    assert np.isnan(result.stein.mean_err).all()


@pytest.mark.parametrize("size", [0, -3, 51, 2.5, True])
def test_invalid_subsample_size(size):
    with pytest.raises(ValueError, match="subsample_size"):
        make_potential(logistic_regression.model, (X, Y), subsample_size=size)


@pytest.mark.parametrize("size", [0, -1, 1.5])
def test_invalid_subsample_size_in_kernel(size):
    with pytest.raises(ValueError, match="subsample_size"):
        SGLD(logistic_regression.model, step_size=1e-3, subsample_size=size)


@pytest.mark.parametrize("step", [0.0, -1e-3, float("nan"), float("inf"), "big"])
def test_invalid_step_size(step):
    with pytest.raises(ValueError, match="step_size"):
        SGLD(logistic_regression.model, step_size=step)


@pytest.mark.parametrize(
    "sampler, option",
    [
        ("SBPS", "clamp_negative_slopes"),
        ("SBPS", "start_at_anchor"),
        ("BPS", "init_at_map"),
        ("SGLD", "preconditioned"),
        ("SGBD", "adapt_step_size"),
        ("SGRLD", "factorize_each_step"),
    ],
)
def test_a_switch_given_a_string_names_the_option(sampler, option):
    """'False' from a command line or a config file is a truthy string: refused, named."""
    import pplsamplers

    kernel = getattr(pplsamplers, sampler)
    kernel(linear_gaussian.model, **{option: False})  # a real bool is accepted
    with pytest.raises(ValueError, match=f"{option} must be True or False; got 'False'"):
        kernel(linear_gaussian.model, **{option: "False"})


def test_invalid_start_names_the_site():
    with pytest.raises(RuntimeError, match="observed site 'y'"):
        make_potential(bad_start_model, (X, Y))


def test_invalid_init_params_names_the_site():
    def model(y):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        with numpyro.plate("data", y.shape[0]) as idx:
            numpyro.sample("y", dist.Normal(0, s), obs=y[idx])

    mcmc = MCMC(SGLD(model, step_size=1e-3), num_warmup=2, num_samples=2, progress_bar=False)
    with pytest.raises(RuntimeError, match="invalid initial point"):
        mcmc.run(jax.random.key(0), jnp.ones(5), init_params={"s": jnp.asarray(jnp.inf)})


def test_non_finite_steps_are_reverted_and_counted():
    # a huge step makes SGLD on a Gaussian likelihood blow up geometrically until it
    # overflows; the chain must stay finite, flag the reverted steps and count them
    args, kwargs = linear_gaussian.load_data(N=50, D=2)
    mcmc = MCMC(
        SGLD(linear_gaussian.model, step_size=1e6, subsample_size=10),
        num_warmup=0,
        num_samples=200,
        progress_bar=False,
    )
    mcmc.run(jax.random.key(0), *args, **kwargs)
    samples = mcmc.get_samples()["theta"]
    assert np.all(np.isfinite(samples))
    reverted = mcmc.get_extra_fields()["diverging"]  # NumPyro's name: print_summary counts it
    assert int(reverted.sum()) > 0
    assert int(mcmc.last_state.num_diverging) == int(reverted.sum())


def test_rejected_steps_are_never_silent(capsys):
    """Issue 18 item 9: a chain whose steps are all rejected must not look fine with
    progress_bar=False: NumPyro's print_summary counts them as divergences, and the
    self-check warns with the count and a fix."""
    from pplsamplers import check_run
    from pplsamplers.diagnostics import SelfCheckWarning

    args, kwargs = linear_gaussian.load_data(N=50, D=2)
    mcmc = MCMC(
        SGLD(linear_gaussian.model, step_size=1e6, subsample_size=10, precondition=None),
        num_warmup=10,
        num_samples=100,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.key(1), *args, **kwargs)
    mcmc.print_summary()
    out = capsys.readouterr().out
    rejected = int(mcmc.get_extra_fields()["diverging"].sum())
    assert rejected > 0 and f"Number of divergences: {rejected}" in out
    with pytest.warns(SelfCheckWarning, match=r"self-check FAILED: .*steps rejected"):
        result = check_run(mcmc)
    assert not result.passed and result.counts["rejected"] == rejected


# ---------------------------------------------------------------- issue 18: data and init_params
def _regression(X, y=None, scale=1.0):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(scale))
    with numpyro.plate("data", X.shape[0]) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, sigma), obs=None if y is None else y[idx])


def _data(n=2000, d=3):
    X = jax.random.normal(jax.random.key(0), (n, d))
    return X, X @ jnp.arange(1.0, d + 1)


def test_numpy_data_work_as_they_do_in_nuts():
    # NUTS's jit turns NumPy arguments into JAX arrays; a minibatch indexes the data with
    # traced indices (X[idx]), which a NumPy array refuses, so pplsamplers converts them
    # where every kernel inspects the model
    X, y = (np.asarray(a) for a in _data(500, 2))
    kernel = SGLD(_regression, subsample_size=50)
    mcmc = MCMC(kernel, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), X, y)
    assert np.all(np.isfinite(mcmc.get_samples()["w"]))


def test_the_same_numpy_data_run_in_the_precision_of_each_run():
    # NumPy data become float32 or float64 arrays by the run's precision, so a float32 set-up
    # must not serve a float64 run (it did: the same NumPy arrays run in float32 and then with
    # x64 on gave float32 draws).  The set-up cache keyed by the data's identity and the
    # precision is gone (each kernel computes its own Setup): the set-up of the same NumPy
    # arrays is checked to take each run's precision (no mode search, to keep it cheap).
    from pplsamplers.warmup import SetupOptions, setup

    X, y = (np.asarray(a) for a in _data(500, 2))
    options = SetupOptions(_regression, subsample_size=50, control_variate=False, precondition=None)
    dtypes = {}
    for x64 in (False, True, False):
        with jax.enable_x64(x64):
            result = setup(options, (X, y), {})
            dtypes.setdefault(x64, set()).add(result.potential.init_position.dtype)
    assert dtypes == {False: {np.dtype(np.float32)}, True: {np.dtype(np.float64)}}


def test_the_set_up_cache_and_the_kernels_reuse_test_agree_on_the_same_data():
    # one rule for both (model.leaf_identity): data arrays by identity, Python scalars by
    # type and value, so num_groups=1000 typed twice is the same data set to each of them.
    # The set-up cache is gone: its successor is the kernel's reuse test Setup.matches.
    from pplsamplers.model import same_objects
    from pplsamplers.warmup import Setup

    X, y = (np.asarray(a) for a in _data(500, 2))
    pairs = [
        (((X, y), {"k": 1000}), ((X, y), {"k": int("1000")})),  # equal, distinct scalars: the same
        (((X, y), {}), ((X.copy(), y), {})),  # an equal copy of an array: not the same
        (((X, y), {"k": 1}), ((X, y), {"k": True})),  # 1 and True: not the same
    ]
    for first, second in pairs:
        computed = Setup(**dict.fromkeys(Setup._fields))._replace(arguments=first)
        cached = computed.matches(*second)
        assert cached == same_objects(first, second), (first[1], second[1])
    assert [same_objects(*pair) for pair in pairs] == [True, False, False]


def test_numpy_data_work_in_autosampler_where_nuts_itself_refuses_them():
    # X[idx] with a NumPy X and the plate's traced indices: NumPyro's NUTS raises
    # TracerArrayConversionError on this model; AutoSampler (here choosing NUTS: small N)
    # hands its kernel JAX arrays, and its model checks trace them as JAX arrays too
    X, y = (np.asarray(a) for a in _data(200, 2))
    sampler = AutoSampler(_regression)
    mcmc = MCMC(sampler, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), X, y)
    assert sampler.decision.kernel == "nuts"
    assert np.all(np.isfinite(mcmc.get_samples()["w"]))


def test_nan_in_a_late_row_of_an_argument_is_named():
    X, y = _data()
    with pytest.raises(ValueError, match=r"argument 'X' \(positional 0\).*row 1500") as err:
        make_potential(_regression, (X.at[1500, 2].set(jnp.nan), y), subsample_size=20)
    assert "init_params" not in str(err.value)
    # the same when the model subsamples itself (inspection sees only a few rows)
    view = inspect(linear_gaussian.model, (X, y), {"subsample_size": 20})
    with pytest.raises(ValueError, match=r"argument 'A' \(positional 0\).*row 1500"):
        validate_data(view._replace(model_args=(X.at[1500, 0].set(jnp.nan), y)))


def test_nan_in_observed_data_names_the_site_and_row():
    X, y = _data()
    with pytest.raises(ValueError, match="observed site 'y'.*datum 17 of plate 'data'"):
        make_potential(_regression, (X, y.at[17].set(jnp.inf)), subsample_size=20)
    y_np = np.array(y)
    y_np[17] = np.nan
    with pytest.raises(ValueError, match="observed site 'y'.*datum 17"):
        make_potential(_regression, (X,), {"y": y_np})


def test_nan_in_a_keyword_argument_is_named():
    X, y = _data(n=50)
    with pytest.raises(ValueError, match=r"keyword 'scale'"):
        make_potential(_regression, (X, y), {"scale": float("nan")})


def test_non_finite_data_at_the_start_is_not_blamed_on_init_params():
    X, y = _data(n=50)
    with pytest.raises(RuntimeError, match="invalid data.*observed site 'y'") as err:
        make_potential(_regression, (X, y.at[0].set(jnp.nan)), check_data=False)
    assert "init_params" not in str(err.value)


def test_init_params_dict_checks_names_and_shapes():
    X, y = _data(n=50)
    view = inspect(_regression, (X, y))
    with pytest.raises(ValueError, match=r"site 'sigma' is missing.*site 'w'.*\(3,\).*\(4,\)"):
        flatten_init_params(view, {"w": jnp.array([1.0, 2.0, 3.0, 4.0])})
    with pytest.raises(ValueError, match=r"unknown site 'bogus' \(the latent sites are"):
        flatten_init_params(view, {"w": jnp.zeros(3), "sigma": 0.0, "bogus": 1.0})
    with pytest.raises(ValueError, match="has 5 values; the model has 4"):
        flatten_init_params(view, jnp.zeros(5))
    pot = make_potential(view)
    flat = flatten_init_params(pot, {"w": jnp.array([1.0, 2.0, 3.0]), "sigma": 0.5})
    np.testing.assert_allclose(flat, flatten_init_params(view, {"w": [1.0, 2, 3], "sigma": 0.5}))
    np.testing.assert_allclose(pot.unravel(flat)["w"], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(pot.unravel(flat)["sigma"], 0.5)


def test_data_plate_used_without_its_indices():
    X, y = _data()

    def unindexed(X, y):  # the model's own subsample plate, but X @ w and y have N rows
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=20):
            numpyro.sample("y", dist.Normal(X @ w, 1), obs=y)

    def not_per_datum(X, y):  # a plain plate, but X's rows enter through a full-data mean
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        with numpyro.plate("data", X.shape[0]):
            numpyro.sample("y", dist.Normal(mu + jnp.mean(X[:, 0]) * y, 1), obs=y)

    msg = r"site 'y' in plate 'data' has 2000 values where the plate gave {} indices.*X\[idx\]"
    with pytest.raises(ValueError, match=msg.format(20)):
        make_potential(unindexed, (X, y))
    # slicing the arguments does not reproduce the model's terms: the likelihood cannot be
    # subsampled as written (NUTS runs it); the error says so, the alternatives and the fix
    why = r"plate 'data' cannot be subsampled.*AutoSampler.*NUTS.*as idx:` then rate\[idx\]"
    with pytest.raises(ValueError, match=why):
        make_potential(not_per_datum, (X, y), subsample_size=20)


def test_plain_plate_is_subsampled_through_its_arguments():
    """``obs=y`` in a plain plate (no indices), as NumPyro models are usually written and NUTS
    accepts, gives the indexed model's potential whatever size the plate declares."""
    X, y = _data()
    N = X.shape[0]

    def indexed(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
        with numpyro.plate("data", X.shape[0]) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, sigma), obs=y[idx])

    def read_off_the_data(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
        with numpyro.plate("data", len(y)):
            numpyro.sample("y", dist.Normal(X @ w, sigma), obs=y)

    def constant_size(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
        with numpyro.plate("data", N):
            numpyro.sample("y", dist.Normal(X @ w, sigma), obs=y)

    reference = make_potential(indexed, (X, y), subsample_size=20).estimator
    x = jnp.linspace(-0.5, 0.5, reference.dim)
    rows = reference.sample_indices(jax.random.key(3))
    for model in (read_off_the_data, constant_size):
        potential = make_potential(model, (X, y), subsample_size=20).estimator
        for got, want in zip(
            (*potential.full_value_and_grad(x), *potential.value_and_grad(x, rows)),
            (*reference.full_value_and_grad(x), *reference.value_and_grad(x, rows)),
            strict=True,
        ):
            np.testing.assert_allclose(got, want, rtol=1e-10, err_msg=model.__name__)


def test_per_datum_factor_and_nested_plates_are_subsampled_like_indexed_models():
    """Two more ways NumPyro users write a likelihood that NUTS accepts: a per-datum
    ``numpyro.factor`` in a plain plate (it used to crash with a bare broadcasting error), and
    a data plate with an inner plate over columns (it used to ask for ``data_plate``: the
    largest plate is taken, as subsampling any plate of a factorised likelihood is unbiased).
    Both give the indexed model's potential; two plates of one size still need the name."""
    X, y = _data()
    Y = jnp.stack([y, 2 * y + 1, -y], axis=1)

    def indexed_factor(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        with numpyro.plate("data", X.shape[0]) as idx:
            numpyro.factor("ll", dist.Normal(X[idx] @ w, 1.5).log_prob(y[idx]))

    def plain_factor(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        with numpyro.plate("data", X.shape[0]):
            numpyro.factor("ll", dist.Normal(X @ w, 1.5).log_prob(y))

    def nested(Y, inner_size=3):
        mu = numpyro.sample("mu", dist.Normal(0, 10).expand([Y.shape[1]]).to_event(1))
        with numpyro.plate("rows", Y.shape[0], dim=-2):
            with numpyro.plate("columns", inner_size, dim=-1):
                numpyro.sample("y", dist.Normal(mu, 2.0), obs=Y)

    def nested_indexed(Y):
        mu = numpyro.sample("mu", dist.Normal(0, 10).expand([Y.shape[1]]).to_event(1))
        with numpyro.plate("rows", Y.shape[0], dim=-2) as idx:
            with numpyro.plate("columns", Y.shape[1], dim=-1):
                numpyro.sample("y", dist.Normal(mu, 2.0), obs=Y[idx])

    for model, want, args in (
        (plain_factor, indexed_factor, (X, y)),
        (nested, nested_indexed, (Y,)),
    ):
        reference = make_potential(want, args, subsample_size=20).estimator
        potential = make_potential(model, args, subsample_size=20).estimator
        assert potential.N == reference.N == X.shape[0], model.__name__
        x = jnp.linspace(-0.5, 0.5, reference.dim)
        rows = reference.sample_indices(jax.random.key(3))
        for got, expected in zip(
            (*potential.full_value_and_grad(x), *potential.value_and_grad(x, rows)),
            (*reference.full_value_and_grad(x), *reference.value_and_grad(x, rows)),
            strict=True,
        ):
            np.testing.assert_allclose(got, expected, rtol=1e-10, err_msg=model.__name__)

    # a larger plate that holds latents (a mean per column) is not the data plate
    def per_column(Y):
        with numpyro.plate("columns", Y.shape[1], dim=-1):
            mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("rows", Y.shape[0], dim=-2), numpyro.plate("columns", Y.shape[1]):
            numpyro.sample("y", dist.Normal(mu, 2.0), obs=Y)

    assert inspect(per_column, (jnp.ones((30, 40)),)).data_plate == "rows"
    square = jnp.ones((X.shape[0], X.shape[0]))
    with pytest.raises(ValueError, match=r"same size cover.*\(columns, rows\).*data_plate="):
        make_potential(partial(nested, inner_size=X.shape[0]), (square,), subsample_size=20)


def test_deterministic_inside_the_data_plate_warns_once():
    X, y = _data(n=50)

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
        numpyro.deterministic("w_norm", jnp.sum(w**2))
        with numpyro.plate("data", X.shape[0]) as idx:
            mean = numpyro.deterministic("mean", X[idx] @ w)
            numpyro.sample("y", dist.Normal(mean, 1), obs=y[idx])

    with pytest.warns(UserWarning) as record:
        make_potential(model, (X, y), subsample_size=10)
    ours = [w for w in record if "deterministic" in str(w.message)]
    assert len(ours) == 1
    text = str(ours[0].message)
    assert "'mean'" in text and "w_norm" not in text and "Predictive" in text


# ------------------------------------------- issue 18 item 2: a support that depends on latents
def _uniform_edge(y):
    theta = numpyro.sample("theta", dist.HalfNormal(50.0))
    with numpyro.plate("data", y.shape[0]) as idx:
        numpyro.sample("y", dist.Uniform(0.0, theta), obs=y[idx])


EDGE_Y = jnp.asarray(np.random.default_rng(0).uniform(0.0, 20.0, 500))


def test_support_that_depends_on_a_latent_is_found_and_masked():
    """y ~ Uniform(0, θ): NumPyro's log_prob is -log θ for every y unless validate_args, so
    a minibatch potential looked finite (and smaller) below max y; ours is +inf there."""
    from pplsamplers.model import model_info

    assert model_info(_uniform_edge, (EDGE_Y,)).edge_sites == ("y",)
    assert model_info(_regression, _data(20)).edge_sites == ()
    start = numpyro.infer.init_to_value(values={"theta": 25.0})
    potential = make_potential(_uniform_edge, (EDGE_Y,), init_strategy=start)
    inside = potential.unconstrain({"theta": jnp.asarray(25.0)})
    outside = potential.unconstrain({"theta": jnp.asarray(19.0)})
    assert np.isfinite(potential.estimator.full_value_and_grad(inside)[0])
    assert potential.estimator.full_value_and_grad(outside)[0] == np.inf
    # only the rows above 19 are outside: a minibatch without them stays finite (why the
    # minibatch kernels refuse the model instead of sampling it)
    below = jnp.flatnonzero(EDGE_Y < 19.0)[:10]
    assert np.isfinite(potential.estimator.value(outside, below))


@pytest.mark.parametrize("sampler", ["SGLD", "SBPS", "Boomerang", "SGBD", "HAMCMC"])
def test_minibatch_kernels_refuse_a_support_edge_and_name_the_site(sampler):
    import pplsamplers

    kernel = getattr(pplsamplers, sampler)(_uniform_edge)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(ValueError, match=r"site\(s\) 'y' have a support that depends on the"):
        mcmc.run(jax.random.key(0), EDGE_Y)


def test_auto_sampler_runs_nuts_with_support_checks_on_a_support_edge():
    """Without the support check NumPyro's NUTS drifts to θ ≈ 1e-36 here (max y ≈ 20)."""
    from numpyro.infer import init_to_value

    from pplsamplers import AutoSampler

    sampler = AutoSampler(_uniform_edge, init_strategy=init_to_value(values={"theta": 25.0}))
    decision = sampler.decide((EDGE_Y,), {})
    assert decision.kernel == "nuts" and "depends on the latent values" in " ".join(
        decision.reasons
    )
    mcmc = MCMC(sampler, num_warmup=200, num_samples=300, progress_bar=False)
    mcmc.run(jax.random.key(0), EDGE_Y)
    theta = np.asarray(mcmc.get_samples()["theta"])
    top = float(EDGE_Y.max())
    # posterior ∝ θ^-N on θ > max y (the prior is flat there): mean max y (1 + 1/(N-2))
    assert theta.min() >= top and abs(theta.mean() - top * (1 + 1 / 498)) < 0.02
    from pplsamplers import check_run

    # no Stein check at a hard edge (the density does not vanish there), and NUTS's divergent
    # transitions are not counted: every trajectory that crosses the edge diverges, although
    # the draws are right (the mean above), so counting them failed a right run
    result = check_run(mcmc, warn_user=False)
    assert result.names == ("theta",) and result.stein_whitening.startswith("skipped")
    assert result.counts == {} and result.rhat[0] < 1.05
    assert int(np.sum(mcmc.get_extra_fields()["diverging"])) > 0
    assert "divergent" not in result.warning


def _plain_plate(X, y):  # the plate's size read off y, X's rows inside it
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", len(y)):
        numpyro.sample("y", dist.Normal(X @ w, 1), obs=y)


def _plate_over_x(X, y):  # the plate's size read off X, y observed whole
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, 1), obs=y)


def _indexed(X, y):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=10) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1), obs=y[idx])


def _group_level(X, y, u, group):  # u: one row per group (5), read as u[group[idx]]
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=10) as idx:
        mean = X[idx] @ w + u[group[idx]]
        numpyro.sample("y", dist.Normal(mean, 1), obs=y[idx])


@pytest.mark.parametrize(
    "model, n_x, n_y, named",
    [
        (_plain_plate, 40, 35, r"plate 'data' has size 35 \(argument 'y' .*35 rows; argument "
         r"'X' .*40 rows\): the per-datum data arguments have different lengths"),
        (_plain_plate, 35, 40, r"plate 'data' has size 40 .*'y' .*40 rows; .*'X' .*35 rows"),
        (_plate_over_x, 35, 40, r"observed site 'y' has 40 values along plate 'data', whose "
         r"size is 35 \(argument 'X' .*35 rows; argument 'y' .*40 rows\)"),
        # the plate's indices read y past its end: JAX clamps them and used to run silently
        (_indexed, 40, 35, r"argument 'y' \(positional 1\) has 35 rows, but the model reads "
         r"its row 35 .*plate 'data' \(N = 40; argument 'X' \(positional 0\) has 40\).*clamps"),
    ],
)  # fmt: skip
def test_data_arguments_of_different_lengths_are_named(model, n_x, n_y, named):
    X = jax.random.normal(jax.random.key(0), (n_x, 2))
    y = jnp.linspace(-1.0, 1.0, n_y)
    with pytest.raises(ValueError, match=named):
        make_potential(model, (X, y))
    with pytest.raises(ValueError, match=named):
        AutoSampler(model).decide((X, y))


def test_group_level_arguments_of_another_length_are_no_false_alarm():
    X, y = _data(n=40, d=2)
    u, group = jnp.linspace(-1.0, 1.0, 5), jnp.arange(40) % 5
    assert make_potential(_group_level, (X, y, u, group)).estimator.N == 40
    with pytest.raises(ValueError, match=r"argument 'u' \(positional 2\) has 5 rows, but the "):
        make_potential(_group_level, (X, y, u, group + 1))  # a group id past u's end


def _regression_without_y(X, y=None):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, 1), obs=y)


def _funnel(dim=9):  # no observed site, no data: a legitimate model, not missing data
    v = numpyro.sample("v", dist.Normal(0, 3))
    with numpyro.plate("i", dim):
        numpyro.sample("x", dist.Normal(0, jnp.exp(v / 2)))


@pytest.mark.parametrize("model", [_regression_without_y, logistic_regression.model])
def test_missing_observed_data_is_named(model):
    """A forgotten ``y`` turns the observed site into N latents: a minibatch kernel used to
    ask to marginalise a "discrete latent 'y'", and AutoSampler sampled them with NumPyro's
    discrete Gibbs, silently."""
    named = r"site 'y' is latent inside plate 'data' with one value per datum \(50\).*look "
    named += r"missing \(the model's argument\(s\) \['y'\] are None\)\. Pass them"
    with pytest.raises(ValueError, match=named):
        make_potential(model, (X,))
    with pytest.raises(ValueError, match=named):
        AutoSampler(model).decide((X,))
    assert inspect(_funnel).latent_names == ("v", "x")


def test_several_processes_need_the_constants_flag_at_set_up(monkeypatch):
    from pplsamplers.model import sharding

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(sharding, "constants_are_arguments", lambda: False)
    fix = r"2 JAX processes.*JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS=1 .*before `import jax`"
    with pytest.raises(RuntimeError, match=fix):
        make_potential(logistic_regression.model, (X, Y))
    with pytest.raises(RuntimeError, match=fix):
        MCMC(SGLD(logistic_regression.model), num_warmup=5, num_samples=5).run(
            jax.random.key(0), X, Y
        )
