"""``AutoSampler``: choose a kernel from the model's features, explain it, then delegate."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from numpyro.infer.mcmc import MCMCKernel

from pplsamplers import warmup
from pplsamplers.cache import enable_compilation_cache
from pplsamplers.infer.monitor import driving_mcmc
from pplsamplers.model import (
    FullDataOnlyError,
    LocalLatentError,
    ModelView,
    as_jax_arguments,
    discrete_latent_sites,
    inspect,
    make_potential,
    no_dimension_error,
    require_concrete,
    same_objects,
)
from pplsamplers.registry import SAMPLERS, make_kernel
from pplsamplers.select.competence import SMALL_N, rank_candidates
from pplsamplers.select.decision import SUBSAMPLING_ONLY, Decision, check_overrides
from pplsamplers.select.features import full_data_features, local_latent_features, model_features
from pplsamplers.select.pilot import PilotOptions, run_pilot
from pplsamplers.select.start import recentred_for_nuts, with_nuts_start
from pplsamplers.types import PRNGKey
from pplsamplers.warmup import SHARED_OPTIONS, ModeStage, SetupOptions

DEFAULT_SUBSAMPLE_FRACTION = 0.01
DEFAULT_SUBSAMPLE_RANGE = (100, 1000)


def available_candidates() -> tuple[str, ...]:
    """The competence candidates that have a registered kernel."""
    return tuple(name for name, spec in SAMPLERS.items() if spec.selectable)


def default_subsample_size(num_data: int) -> int:
    """1% of N, clipped to [100, 1000] and to N: the minibatch size AutoSampler uses when the
    model and the user give none."""
    low, high = DEFAULT_SUBSAMPLE_RANGE
    return int(min(num_data, max(low, min(high, round(DEFAULT_SUBSAMPLE_FRACTION * num_data)))))


class AutoSampler(MCMCKernel):
    """A NumPyro ``MCMCKernel`` that picks the sampler for a model, says why, and delegates.

    Parameters
    ----------
    model : callable
        A NumPyro model.
    strategy : {"rules", "pilot"}, default "rules"
        ``"rules"`` (default, cheap) or ``"pilot"`` (measures the top candidates).
    candidates : list of str, tuple of str or None, default None
        Restrict the choice to these registry names (e.g. ``["sbps", "sgld"]``).
    pilot_options : PilotOptions, dict or None, default None
        :class:`~pplsamplers.select.pilot.PilotOptions`, or a dict of its fields (``top``,
        ``budget_epochs``, ``num_chains``, ``ksd_points``, ``guard_factor``, ``seed``);
        validated here, at construction.
    verbose : bool, default False
        Print the decision's explanation when it is made.
    **overrides : Any
        Passed to the chosen kernel, e.g. ``subsample_size=256``.  Without one, the model
        plate's own size is used, or the kernel chooses it (the features' probes use 1% of N
        clipped to [100, 1000]).

    Notes
    -----
    :meth:`decide` (called by ``init`` if you have not called it) computes
    :class:`~pplsamplers.select.ModelFeatures` (structure plus cheap probes at the MAP),
    ranks the candidates with the competence rules (each runs with its defaults on the shared
    warmup) and, with ``strategy="pilot"``, runs a tournament of the best few on an equal data
    budget scored by ESS per epoch under a kernel-Stein-discrepancy bias guard.  The result is
    :attr:`decision`; every later call goes to the chosen kernel.

    Above ``SMALL_N`` data the features are computed on the shared warmup's mode stage (mode,
    curvature, mode probe, Laplace check), and the chosen kernel is handed the set-up built
    from it (:class:`~pplsamplers.warmup.Setup`), so the decision adds only the feature
    probes to the run.

    NumPyro fixes the fields it records when ``MCMC.run`` starts, before ``init``: AutoSampler
    decides when the run reads them, so that the chosen kernel's diagnostics
    (``data_evals``, bounces, step sizes ...) reach ``get_extra_fields()`` and ArviZ's
    ``sample_stats``; ``decide(model_args, model_kwargs)`` may also be called before.

    Examples
    --------
    >>> import jax
    >>> from numpyro.infer import MCMC
    >>> from pplsamplers.datasets.tiny import normal_mean  # mu ~ N(0, 10²), y_i ~ N(mu, 1)
    >>> y = jax.random.normal(jax.random.key(0), (300,))
    >>> sampler = AutoSampler(normal_mean)
    >>> sampler.decide((y,)).kernel     # N = 300 is small: exact NUTS
    'nuts'
    >>> mcmc = MCMC(sampler, num_warmup=200, num_samples=1000, progress_bar=False)
    >>> mcmc.run(jax.random.key(0), y)
    >>> mcmc.get_samples()["mu"].shape
    (1000,)

    The chosen minibatch kernel runs the shared warmup of every pplsamplers sampler (mode,
    preconditioner, control variate, batch size; chains start in the Laplace approximation);
    NUTS starts and adapts as NumPyro's NUTS does.
    """

    def __init__(
        self,
        model: Callable,
        strategy: str = "rules",
        candidates: list[str] | tuple[str, ...] | None = None,
        *,
        pilot_options: PilotOptions | dict | None = None,
        verbose: bool = False,
        **overrides: Any,
    ) -> None:
        if strategy not in ("rules", "pilot"):
            raise ValueError(f"strategy must be 'rules' or 'pilot'; got {strategy!r}.")
        check_overrides(overrides)
        self._model = model
        self.strategy = strategy
        self.candidates = None if candidates is None else tuple(c.lower() for c in candidates)
        self.pilot_options = PilotOptions.create(pilot_options)
        self.verbose = verbose
        self.overrides = overrides
        self.decision = None
        self._data: tuple | None = None
        self._stage: ModeStage | None = None
        self._check_potential: Any = None  # full_data_potential's, built once per decision
        self._delegate: MCMCKernel | None = None
        self._converted: tuple | None = None  # (the caller's arguments, their JAX arrays)

    # --------------------------------------------------------------- deciding
    def decide(self, model_args: tuple, model_kwargs: dict | None = None) -> Decision:
        """Choose the kernel for this data set (once: the decision is kept while the arguments
        are the same objects) and build it.

        Parameters
        ----------
        model_args, model_kwargs
            The model's arguments, as ``MCMC.run`` will pass them.

        Returns
        -------
        Decision
            The chosen kernel and its parameters, the reasons, the ranking and the features;
            ``print_explanation()`` prints them.
        """
        model_args, model_kwargs = self._as_jax(model_args, model_kwargs)
        if self.decision is not None and same_objects(self._data, (model_args, model_kwargs)):
            return self.decision
        require_concrete(model_args, model_kwargs, "AutoSampler")  # not inside jax.jit
        enable_compilation_cache()
        subsample = self.overrides.get("subsample_size")
        data_plate = self.overrides.get("data_plate")
        probe_size = subsample  # the features' noise probes need a minibatch size
        model: Any = self._model
        features = None
        if not discrete_latent_sites(model, model_args, model_kwargs):
            try:
                model = inspect(model, model_args, model_kwargs, data_plate)  # traced once
            except LocalLatentError as error:  # per-datum latents: full-data NUTS only
                features = local_latent_features(error)
            except FullDataOnlyError as error:  # e.g. a likelihood that cannot be subsampled
                features = full_data_features(error)
            else:
                if (refusal := no_dimension_error(model.info)) is not None:
                    features = full_data_features(refusal)  # nothing for a kernel to move
                if probe_size is None and model.data_plate and model.model_subsample_size is None:
                    probe_size = default_subsample_size(model.data_size)
        stage = None
        if features is None:
            try:
                stage = self._mode_stage(model, model_args, model_kwargs)
            except FullDataOnlyError as error:  # e.g. a likelihood that jumps in a latent
                features = full_data_features(error)
        if features is None:
            features = model_features(
                model,
                model_args,
                model_kwargs,
                subsample_size=probe_size,
                data_plate=data_plate,
                stage=stage,
            )
        ranking = tuple(rank_candidates(features, self.candidates or available_candidates()))
        if not ranking:
            why = features.full_data_reason or ", ".join(features.local_sites)
            only = f" ({why}; only NUTS can run it)" if why else ""
            raise ValueError(f"no candidate sampler is compatible with this model{only}.")
        # the chosen kernel picks its own batch size (shared warmup) unless the user gave one
        shared = {"subsample_size": subsample} if subsample is not None else {}
        full_data_only = features.local_sites or features.full_data_reason
        if self.strategy == "pilot" and not full_data_only:  # else only NUTS can run
            decision = run_pilot(
                self._model,
                model_args,
                model_kwargs,
                features,
                ranking,
                shared=shared,
                overrides=self.overrides,
                options=self.pilot_options,
            )
        else:
            best = ranking[0]
            decision = Decision(
                kernel=best.name,
                params={**(shared if SAMPLERS[best.name].minibatch else {}), **best.params},
                reasons=best.reasons,
                scores={c.name: c.score for c in ranking},
                features=features,
                ranking=ranking,
                strategy="rules",
            )
        self.decision = decision
        self._data, self._check_potential, self._stage = (model_args, model_kwargs), None, stage
        self._delegate = self._make_delegate(decision, model)
        if self.verbose:
            decision.print_explanation()
        return decision

    def _as_jax(self, model_args: tuple, model_kwargs: dict | None) -> tuple[tuple, dict]:
        """The arguments with NumPy data as JAX arrays (:func:`as_jax_arguments`: a chosen
        NUTS indexes them with traced plate indices), converted once per data set: the
        decision is kept while the data are the same objects."""
        given = (tuple(model_args), dict(model_kwargs or {}))
        if not same_objects(self._converted and self._converted[0], given):
            self._converted = (given, as_jax_arguments(*given))
        return self._converted[1]

    def _setup_options(self) -> SetupOptions:
        """The shared warmup's options from the user's overrides (the mode is searched)."""
        shared = {k: v for k, v in self.overrides.items() if k in SHARED_OPTIONS and v is not None}
        return SetupOptions(self._model, needs_mode=True, **shared)

    def _mode_stage(self, view: Any, model_args: tuple, model_kwargs: dict) -> ModeStage | None:
        """The shared warmup's mode stage, where a minibatch kernel may be chosen: the
        features read its mode, curvature and mode probe, and the chosen kernel's set-up is
        completed from it (:meth:`_make_delegate`)."""
        minibatch = any(SAMPLERS[name].minibatch for name in self.candidates or SAMPLERS)
        info = getattr(view, "info", None)
        if info is None or not minibatch or info.data_plate is None or info.edge_sites:
            return None
        if info.data_size <= SMALL_N:  # NUTS is chosen from the structure alone
            return None
        return warmup.mode_stage(self._setup_options(), model_args, model_kwargs)

    def _make_delegate(self, decision: Any, view: Any = None) -> MCMCKernel:
        overrides = dict(self.overrides)
        if SAMPLERS[decision.kernel].minibatch:
            options = {**decision.params, **overrides}
            stage, shared = self._stage, self._setup_options()
            if stage is not None and all(
                _same(options.get(name, getattr(shared, name)), getattr(shared, name))
                for name in SHARED_OPTIONS
            ):  # the chosen kernel's shared options are the stage's: complete its set-up
                options["setup"] = warmup.setup(shared, *self._data, stage=stage)
        else:  # full-data NUTS: minibatch options dropped, the chains start at the best mode
            ignored = sorted(k for k in SUBSAMPLING_ONLY if overrides.pop(k, None) is not None)
            if ignored:
                warnings.warn(f"AutoSampler's NUTS ignores {ignored}.", stacklevel=4)
            view = recentred_for_nuts(view, self._setup_options())  # a funnel: re-centred
            options = with_nuts_start({**decision.params, **overrides}, view)
        nuts = not SAMPLERS[decision.kernel].minibatch and isinstance(view, ModelView)
        kernel = make_kernel(decision.kernel, view.model if nuts else self._model, **options)
        alternatives = (f"another sampler than AutoSampler's choice '{decision.kernel}'",)
        if decision.strategy == "rules":
            alternatives += ("AutoSampler(strategy='pilot')",)
        kernel.check_alternatives = alternatives  # the self-check's suggested fixes
        return kernel

    # ------------------------------------------------------------ NumPyro API
    def init(
        self,
        rng_key: PRNGKey,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> Any:
        previous = self._delegate
        self.decide(model_args, model_kwargs)
        if previous is not None and self._delegate is not previous:  # new data: NumPyro's step
            getattr(driving_mcmc(), "_cache", {}).clear()  # compiled (jit_model_args) holds the old
        model_args, model_kwargs = self._as_jax(model_args, model_kwargs)
        return self._delegate.init(rng_key, num_warmup, init_params, model_args, model_kwargs)

    def full_data_potential(self) -> Any:
        """The model's full-data potential for the self-check of a run that AutoSampler
        handed to NumPyro's NUTS (a pplsamplers kernel carries its own), or ``None`` where
        the check does not apply: per-datum latents (no data plate to evaluate), a hard edge
        at the data (the Stein identity needs a density that vanishes at its boundary), or a
        model the potential cannot be built for.  Built once per decision (``check_run`` and
        ``to_arviz`` both ask)."""
        features = getattr(self.decision, "features", None)
        if self._data is None or features is None or features.edge_sites or features.local_sites:
            return None
        if features.full_data_reason:  # no potential to build (make_potential refuses it)
            return None
        if self._check_potential is None:
            options = {
                k: self.overrides[k]
                for k in ("init_strategy", "data_plate")
                if self.overrides.get(k)
            }
            try:
                self._check_potential = make_potential(
                    self._model, *self._data, check_data=False, **options
                )
            except (ValueError, RuntimeError):
                return None
        return self._check_potential

    def _require(self) -> MCMCKernel:
        if self._delegate is None:
            raise RuntimeError("AutoSampler has not decided yet: run MCMC (or call init) first.")
        return self._delegate

    @property
    def _sample_fn(self) -> Any:  # NumPyro checks this to skip re-initialisation
        return getattr(self._delegate, "_sample_fn", None) if self._delegate else None

    def sample(self, state: Any, model_args: tuple, model_kwargs: dict) -> Any:
        model_args, model_kwargs = self._as_jax(model_args, model_kwargs)
        return self._require().sample(state, model_args, model_kwargs)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        model_args, model_kwargs = self._as_jax(model_args, model_kwargs)
        return self._require().postprocess_fn(model_args, model_kwargs)

    @property
    def model(self) -> Callable:
        """The model the chosen kernel samples (the user's model before ``init``)."""
        return self._delegate.model if self._delegate is not None else self._model

    @property
    def sample_field(self) -> str:
        return self._delegate.sample_field if self._delegate is not None else "z"

    @property
    def default_fields(self) -> Sequence[str]:
        """The chosen kernel's fields, read when NumPyro starts a run (``("z",)`` before
        :meth:`decide`): NumPyro reads this when ``MCMC`` is built, so it is a live view."""
        return _DelegateFields(self)

    @property
    def delegate(self) -> MCMCKernel | None:
        """The chosen kernel (after ``init``)."""
        return self._delegate

    @property
    def setup(self) -> Any:
        """The chosen kernel's set-up (``None`` for NUTS or before ``init``)."""
        return getattr(self._delegate, "setup", None)

    def get_diagnostics_str(self, state: Any) -> str:
        inner = self._require().get_diagnostics_str(state)
        return f"{self.decision.kernel}: {inner}" if inner else self.decision.kernel


def _same(a: Any, b: Any) -> bool:
    """The same option value: the same object, or equal Python scalars or strings."""
    return a is b or same_objects(a, b)


class _DelegateFields(Sequence):
    """A view of the delegate's ``default_fields``.  NumPyro reads the fields to collect when
    ``MCMC.run`` starts, before it calls ``init``: read by a run, the view decides on that run's
    data first, so that the chosen kernel's diagnostics are collected."""

    def __init__(self, sampler: AutoSampler) -> None:
        self._sampler = sampler

    def _fields(self) -> tuple[str, ...]:
        sampler = self._sampler
        if sampler._delegate is None:
            mcmc = driving_mcmc()
            arguments = getattr(mcmc, "_args", None)
            if arguments is not None:
                sampler.decide(arguments, getattr(mcmc, "_kwargs", None) or {})
        delegate = sampler._delegate
        return tuple(delegate.default_fields) if delegate is not None else ("z",)

    def __getitem__(self, index: Any) -> Any:
        return self._fields()[index]

    def __len__(self) -> int:
        return len(self._fields())

    def __repr__(self) -> str:
        return repr(self._fields())


__all__ = ["AutoSampler", "available_candidates", "default_subsample_size"]
