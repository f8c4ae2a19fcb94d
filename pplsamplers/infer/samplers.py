"""The samplers as NumPyro ``MCMCKernel`` classes: thin shells on
:class:`~pplsamplers.infer.SubsampledKernel`, one per kernel family.  Each class's signature
and Parameters come from its options dataclass; its variants (pSGLD, pSBPS, σBPS) are
registry entries with options (:data:`pplsamplers.SAMPLERS`)."""

from __future__ import annotations

from pplsamplers.infer.adapter import SubsampledKernel
from pplsamplers.kernels.pdmp import boomerang, bps, sbps
from pplsamplers.kernels.pdmp.reference import GaussianReference
from pplsamplers.kernels.sgmcmc import csgld, hamcmc, sgbd, sgld, sgrld


class SGLD(SubsampledKernel, kernel=sgld, positional=("step_size",)):
    """Stochastic gradient Langevin dynamics as a NumPyro ``MCMCKernel``.

    x ← x − ε ∇Ũ(x) + √(2ε) ξ with a fresh minibatch each step (Welling & Teh 2011, eq. 4);
    with ``preconditioned=True`` pSGLD (Li et al. 2016, Alg. 1), whose RMSprop diagonal
    metric is adapted in warmup and then frozen.  Biased at any ε > 0; the bias shrinks with ε.

    Examples
    --------
    Ten of the 100 data per step, the step size set in warmup:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGLD(model, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """


class SGBD(SubsampledKernel, kernel=sgbd, positional=("step_size",)):
    """Stochastic gradient Barker dynamics as a NumPyro ``MCMCKernel``.

    Each step moves every unconstrained coordinate by ±z_j, z_j ~ N(σ_j, (0.1σ_j)²), the sign
    drawn from a minibatch estimate of the Barker probability sigmoid(z_j ∂_j log π) (Alg.
    2–4).  The increment size never depends on the gradient, which makes SGBD robust to the
    step size, to skewed targets and to exploding gradients.

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGBD(model, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """


class CSGLD(SubsampledKernel, kernel=csgld, positional=("step_size",)):
    """Corrected SGLD (Mauri & Zanella's Alg. 7) as a NumPyro ``MCMCKernel``.

    x ← x + ε ĝ + √(max(2ε − ε²τ̂², 0)) ξ: SGLD that injects only the noise the minibatch
    gradient does not already bring (τ̂ per coordinate, as in SGBD).

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(CSGLD(model, subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """


class SGRLD(SubsampledKernel, kernel=sgrld, positional=("step_size",)):
    """SGRLD with a constant dense metric G (Şimşekli et al. 2016's baseline) for NumPyro.

    θ ← θ − ε G⁻¹∇Ũ(θ) + √(2ε) L⁻ᵀ ξ with G = L Lᵀ given by the user (the Fisher information
    of a model where it is constant, such as a linear Gaussian model).

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> run(SGRLD(model, metric=[[100.0]], subsample_size=10)).get_samples()["mu"].shape
    (100,)
    """


class HAMCMC(SubsampledKernel, kernel=hamcmc, positional=("step_size",)):
    """Hessian-approximated MCMC (Şimşekli et al. 2016) as a NumPyro ``MCMCKernel``.

    Stochastic quasi-Newton Langevin: θ_t = θ_{t−M} − ε_t H_t ∇Ũ(θ_{t−M}) + √(2ε_t) S_t z
    (eq. 10), with H_t the L-BFGS inverse Hessian of the M−1 most recent pairs, none of which
    involves θ_{t−M} (so no correction term is needed), and S_t z from the square-root
    recursion of eq. (11).  O(MD) memory, O(M²D) time; a step costs two minibatch gradients.

    Examples
    --------
    A step costs two minibatch gradients, each of 2 × 10 per-datum terms with the control
    variate, and a draw is twenty steps, ten for each of the two sub-chains:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(HAMCMC(model, step_size=0.1, initial_scale=0.01, subsample_size=10))
    >>> mcmc.get_samples()["mu"].shape, int(mcmc.get_extra_fields()["data_evals"][-1])
    ((100,), 800)
    """


class BPS(SubsampledKernel, kernel=bps):
    """The Bouncy Particle Sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.1 with Alg. 2: linear flow, rate [v·∇Ũ]_+ (eq. 2), reflection (eq. 3),
    Gaussian velocities refreshed at rate λ_ref; with ``preconditioned=True`` σBPS (§2.2).
    Exact up to bound violations with the full batch, approximate with minibatches.  Each
    draw is the position at the next grid time; ``sample_stats`` hold the event counters and
    the exact time-averages of the path over each interval.

    Examples
    --------
    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(BPS(model, subsample_size=20), num_warmup=50)
    >>> mcmc.get_samples()["mu"].shape, mcmc.get_extra_fields()["time_average"].shape
    ((100,), (100, 1))
    """


class Boomerang(SubsampledKernel, kernel=boomerang):
    """The Boomerang sampler with adaptive interpolation thinning, as a NumPyro kernel.

    Goan et al. §2.3 and Bierkens et al. (2020): an elliptical flow around x*, velocities
    N(0, Σ*) refreshed at rate λ_ref, rate [v·∇E]_+ and reflection in the Σ* metric with
    ∇E = ∇Ũ − Σ*⁻¹(x − x*).  After ``init`` the reference N(x*, Σ*), in the kernel's
    coordinates, is ``kernel.reference``.

    Examples
    --------
    With a control variate, whose anchor is the reference's mean x*:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> kernel = Boomerang(model, subsample_size=20, control_variate=True)
    >>> run(kernel, num_warmup=50).get_samples()["mu"].shape
    (100,)
    """

    @property
    def reference(self) -> GaussianReference | None:
        """N(x*, Σ*) in the kernel's coordinates (``None`` before ``init``)."""
        return None if self.prepared is None else self.prepared.params.reference


class SBPS(SubsampledKernel, kernel=sbps, positional=("k",)):
    """The Stochastic Bouncy Particle Sampler (Pakman et al. 2017) as a NumPyro ``MCMCKernel``;
    with ``preconditioned=True`` pSBPS (§5).

    A piecewise-linear continuous-time sampler: each draw is the particle's position at the
    next grid time, and ``sample_stats`` carry the exact time-averages of x and x² over each
    interval (eq. 19) with the event counters, among them ``bound_violations``, the bias
    diagnostic.  Vectorized and sequential chains give the same draws for the same key.

    Examples
    --------
    Δ and λ_r are adapted during warmup, then frozen:

    >>> from pplsamplers.datasets import tiny_regression
    >>> model, run = tiny_regression()
    >>> mcmc = run(SBPS(model, subsample_size=10), num_warmup=50, num_samples=50)
    >>> mcmc.get_samples()["mu"].shape
    (50,)
    """


__all__ = ["BPS", "CSGLD", "HAMCMC", "SBPS", "SGBD", "SGLD", "SGRLD", "Boomerang"]
