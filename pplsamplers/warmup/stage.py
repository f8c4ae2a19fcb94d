"""The shared warmup's results: :class:`ModeStage` (mode, scale, anchor: what AutoSampler's
features read too) and :class:`Setup` (everything a kernel runs on), both immutable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from pplsamplers.estimator import Estimator, Potential, Whitening, whiten
from pplsamplers.model import ModelView, same_objects
from pplsamplers.types import Array
from pplsamplers.warmup.options import SetupOptions
from pplsamplers.warmup.structured import StructuredFit
from pplsamplers.warmup.variational import MISFIT_THRESHOLD


class ModeStage(NamedTuple):
    """Steps 1–3 of the set-up and step 4's Laplace check (before any fit), in the module
    docstring of :mod:`~pplsamplers.warmup.setup`: what AutoSampler's features read too."""

    potential: Potential
    """The model's full-batch potential in its flat unconstrained x."""
    subsample_size: int | None
    """The user's or the model's batch size; ``None``: automatic (step 5)."""
    view: ModelView | None
    """The model's view, or ``None`` for a given potential."""
    rows: str
    """How minibatches read the rows (contiguous blocks of shuffled rows, or random rows)."""
    notes: Mapping[str, str]
    mode: Array | None
    """The mode (polished in the Laplace metric when a preconditioner is estimated)."""
    whitening: Whitening
    """The Laplace approximation x = c + L z (the identity with ``precondition=None``)."""
    anchor: Array | None
    """The control variate's anchor in x, or ``None`` (off)."""
    mode_count: int | None
    """The mode probe's count of separated optima; ``None`` where it did not run."""
    laplace_misfit: float | None
    """sd of the log importance weights of Laplace draws; ``None`` where no preconditioner
    is estimated."""
    arguments: tuple
    """The ``(model_args, model_kwargs)`` it was computed for."""
    structure: StructuredFit | None = None
    """The structured approximation of a model with group effects, or ``None``."""


class Setup(NamedTuple):
    """The shared warmup's result for one data set (module docstring); immutable.

    Kernels run on :attr:`kernel_estimator`; the adapter maps their coordinates z to the
    model's x with :attr:`whitening` and to the sites with :attr:`potential`.

    Parameters
    ----------
    potential : Potential
        The model's full-batch potential in x, with its coordinates (self-check, output).
    estimator : Estimator
        The kernel's estimator in x: batch size and control variate, not yet whitened.
    whitening : Whitening
        x = c + L z, the Gaussian approximation the kernel samples in.
    whitened : bool
        Whether L is a posterior-scale estimate (``precondition`` not None).
    refine_metric : bool
        Whether each chain refines the whitening from its warmup draws.
    mode : jax.Array or None
        The Gaussian approximation's centre in x, or ``None`` where no mode was searched.
    anchor : jax.Array or None
        The control variate's anchor in x, or ``None`` (off, as for a full batch).
    mode_count : int or None
        The mode probe's count of separated optima; ``None`` where it did not run.
    laplace_misfit : float or None
        sd of the log importance weights of Laplace draws; ``None`` where no preconditioner
        is estimated.
    notes : Mapping of str to str
        What each stage chose and why, keyed by stage (``"mode"``, ``"precondition"``,
        ``"subsample_size"``, ``"control_variate"``, ...); :func:`~pplsamplers.to_arviz`
        stores them.
    view : ModelView or None
        The model's view, or ``None`` for a given potential.
    options : SetupOptions
        The :class:`~pplsamplers.warmup.SetupOptions` it was computed with.
    arguments : tuple
        The ``(model_args, model_kwargs)`` it was computed for (:meth:`matches`).
    structure : StructuredFit or None, default None
        The structured approximation of a model with group effects, or ``None``.
    start_misfit : float or None, default None
        The same check of :attr:`whitening`, the Gaussian the chains start in.

    Examples
    --------
    One set-up shared by two kernels (AutoSampler hands its own to the kernel it picks):

    >>> from pplsamplers import SGLD, Boomerang
    >>> from pplsamplers.datasets import tiny_linear
    >>> from pplsamplers.warmup import SetupOptions, setup
    >>> linear, (A, x) = tiny_linear()  # theta ~ N(0, I), x_i ~ N(a_i . theta, 3²), 2000 rows
    >>> shared = setup(SetupOptions(linear), (A, x), {})
    >>> shared.estimator.N, shared.matches((A, x), {}), shared.whitening.center.shape
    (2000, True, (2,))
    >>> kernels = [Boomerang(linear, setup=shared), SGLD(linear, setup=shared)]
    """

    potential: Potential
    """The model's full-batch potential in x, with its coordinates (self-check, output)."""
    estimator: Estimator
    """The kernel's estimator in x: batch size and control variate, not yet whitened."""
    whitening: Whitening
    """x = c + L z: the Gaussian approximation the kernel samples in (with
    ``precondition=None``, L = I and c the mode, or 0 where none was searched)."""
    whitened: bool
    """Whether L is a posterior-scale estimate (``precondition`` not None), so that the
    posterior has about unit scale in z."""
    refine_metric: bool
    """Whether each chain refines the whitening from its warmup draws."""
    mode: Array | None
    """The Gaussian approximation's centre in x (the polished mode or the variational mean);
    ``None`` where no mode was searched."""
    anchor: Array | None
    mode_count: int | None
    laplace_misfit: float | None
    notes: Mapping[str, str]
    view: ModelView | None
    options: SetupOptions
    arguments: tuple
    structure: StructuredFit | None = None
    """The structured approximation of a model with group effects, or ``None``."""
    start_misfit: float | None = None
    """sd of the log importance weights of draws of :attr:`whitening`, the Gaussian the chains
    start in (:attr:`laplace_misfit` where no variational fit replaced the Laplace one);
    ``None`` where none was checked."""

    @property
    def curvature(self) -> Array | None:
        """U's curvature along each whitened coordinate at the centre, where the set-up knows
        it without D Hessian-vector products (the structured fit), else ``None``."""
        return None if self.structure is None else self.structure.curvature

    @property
    def checked_gaussian(self) -> Whitening | None:
        """:attr:`whitening` where it describes where the posterior's mass is: a
        posterior-scale estimate whose importance check passed (:attr:`start_misfit` ≤
        ``MISFIT_THRESHOLD``) around the only mode the mode probe found; else ``None``.  The
        self-check's drift check judges the draws by it (:mod:`pplsamplers.diagnostics.drift`)."""
        misfit = self.start_misfit
        checked = misfit is not None and misfit <= MISFIT_THRESHOLD
        return self.whitening if self.whitened and self.mode_count == 1 and checked else None

    @property
    def kernel_estimator(self) -> Estimator:
        """What the kernel runs on: :attr:`estimator` in the coordinates z."""
        return whiten(self.estimator, self.whitening)

    def matches(self, model_args: tuple, model_kwargs: dict) -> bool:
        """Whether it was computed for these very arguments (the same array objects)."""
        return same_objects(self.arguments, (tuple(model_args), dict(model_kwargs)))


__all__ = ["ModeStage", "Setup"]
