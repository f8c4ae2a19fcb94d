"""The one NumPyro ``MCMCKernel`` adapter of every pplsamplers sampler.

:class:`SubsampledKernel` drives any sampler declared by a
:class:`~pplsamplers.kernels.spec.KernelSpec`.  It owns everything NumPyro-facing, once:

* the shared warmup (:func:`pplsamplers.warmup.setup`) runs once per data set, or is handed
  in ready (``setup=``, as AutoSampler does);
* the state (:mod:`pplsamplers.infer.state`) carries ``rng_key`` (``post_warmup_state`` and
  ``last_state`` work) and the kernel's diagnostics as fields (``extra_fields``, ArviZ's
  ``sample_stats``); the three chain methods; ``postprocess_fn`` to constrained values; the
  full-data ``model`` that ArviZ reads ``observed_data`` and ``log_likelihood`` from;
* a step whose result is not finite is rejected (:mod:`pplsamplers.infer.step`): the chain
  stays where it was, and ``diverging`` flags the draw, which ``print_summary`` counts;
* the sampler's own warmup moves its params during warmup only, which freezes them."""

from __future__ import annotations

import contextlib
import inspect as pyinspect
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from numpyro.infer import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from pplsamplers import validation, warmup
from pplsamplers.cache import enable_compilation_cache
from pplsamplers.diagnostics.checks import SelfCheck
from pplsamplers.diagnostics.names import coordinate_names
from pplsamplers.estimator import Estimator
from pplsamplers.infer.monitor import (
    Reporter,
    check_fields,
    driving_mcmc,
    empty_monitor,
    plan_run,
    score_estimator,
)
from pplsamplers.infer.options import describe_options, options_signature
from pplsamplers.infer.state import Prepared, info_of, sampler_state
from pplsamplers.infer.step import Stepper, sample_chains, stack_chains, zeros_like_shapes
from pplsamplers.kernels.spec import KernelSpec, WarmupContext
from pplsamplers.model import (
    check_position,
    flatten_init_params,
    full_data_model,
    is_concrete,
    make_postprocess,
    mesh_sharded,
    require_concrete,
)
from pplsamplers.model.sharding import chain_sharding
from pplsamplers.types import Array, PRNGKey
from pplsamplers.warmup import Setup, SetupOptions
from pplsamplers.warmup import metric as metrics


class SubsampledKernel(MCMCKernel):
    __doc__ = describe_options(
        """The NumPyro ``MCMCKernel`` of every pplsamplers sampler (module docstring).

        A sampler class names its kernel's module (its ``Options`` dataclass, ``declare`` and
        ``Info``) and the options it takes positionally, ``class SGLD(SubsampledKernel,
        kernel=sgld, positional=("step_size",))``; its signature and Parameters come from
        ``Options`` and the shared parameters below, so each default is stated once.

        Examples
        --------
        A sampler class, here SGLD under another name and with the step as its first
        positional option:

        >>> from pplsamplers import SubsampledKernel
        >>> from pplsamplers.datasets import tiny_linear
        >>> from pplsamplers.kernels.sgmcmc import sgld
        >>> class Langevin(SubsampledKernel, kernel=sgld, positional=("step_size",)):
        ...     '''SGLD (Welling & Teh 2011), eq. (4).'''
        >>> linear, _ = tiny_linear()
        >>> Langevin(linear, 0.01).options.step_size
        0.01""",
        None,
    )

    sample_field = "z"
    Options: ClassVar[type]
    State: ClassVar[type]
    declare: ClassVar[Callable[[Any], KernelSpec]]
    positional: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(
        cls, *, kernel: ModuleType, positional: tuple[str, ...] = (), **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        options, info = kernel.Options, kernel.Info
        cls.Options, cls.positional = options, tuple(positional)
        cls.declare = staticmethod(kernel.declare)
        cls.State = sampler_state(cls, info)
        shared = pyinspect.signature(SubsampledKernel.__init__)
        cls.__signature__ = options_signature(options, cls.positional, shared)
        cls.__doc__ = describe_options(cls.__doc__ or "", options)

    def __init__(
        self,
        model: Callable | None = None,
        *args: Any,
        subsample_size: int | None = None,
        data_plate: str | None = None,
        potential: Any = None,
        control_variate: bool | str | Array = "auto",
        precondition: str | Array | None = "auto",
        init_strategy: Callable = init_to_uniform,
        steps_per_sample: int | None = None,
        setup: Setup | None = None,
        self_check: bool = True,
        **options: Any,
    ) -> None:
        if len(args) > len(self.positional):
            raise TypeError(
                f"{type(self).__name__} takes model and {len(self.positional)} more positional "
                f"argument(s) ({', '.join(self.positional)}); give the others by name."
            )
        for name, value in zip(self.positional, args, strict=False):
            if name in options:
                raise TypeError(f"{type(self).__name__} got {name!r} twice.")
            options[name] = value
        try:
            self.options = self.Options(**options)
        except TypeError:
            known = sorted(f.name for f in self.Options.__dataclass_fields__.values())
            unknown = sorted(set(options) - set(known))
            raise TypeError(
                f"{type(self).__name__} has no option(s) {unknown}; its own options are {known} "
                "and every sampler takes subsample_size, data_plate, potential, "
                "control_variate, precondition, init_strategy, steps_per_sample and setup."
            ) from None
        spec = self.declare(self.options)
        if steps_per_sample is not None:
            validation.positive_int("steps_per_sample", steps_per_sample)
            spec = spec._replace(steps_per_sample=int(steps_per_sample), steps_per_sample_at=None)
        if setup is not None and not isinstance(setup, Setup):
            raise TypeError(f"setup must be a pplsamplers.warmup.Setup; got {type(setup)}.")
        self.spec = spec
        self.setup_options = SetupOptions(
            model=model,
            subsample_size=subsample_size,
            data_plate=data_plate,
            potential=potential,
            control_variate=control_variate,
            precondition=precondition,
            init_strategy=init_strategy,
            needs_mode=spec.needs_mode,
        )
        self.prepared: Prepared | None = None
        self.self_check = bool(self_check)
        self.self_check_result: SelfCheck | None = None
        self.check_alternatives: tuple[str, ...] = ("another sampler", "AutoSampler")
        self._given_setup = setup
        self._sample_fn: tuple | None = None

    # ------------------------------------------------------------ NumPyro API
    @property
    def model(self) -> Callable | None:
        """The model with its data plate un-subsampled (all N data), for ArviZ."""
        setup = None if self.prepared is None else self.prepared.setup
        if setup is None or setup.view is None:
            return self.setup_options.model
        return full_data_model(setup.view)

    @property
    def setup(self) -> Setup | None:
        """The shared warmup's result (``None`` before ``init``)."""
        return None if self.prepared is None else self.prepared.setup

    @property
    def estimator(self) -> Estimator | None:
        """What the kernel runs on (``None`` before ``init``)."""
        return None if self.prepared is None else self.prepared.estimator

    @property
    def default_fields(self) -> tuple[str, ...]:
        return ("z", "diverging", *self.spec.diagnostic_fields)

    def get_diagnostics_str(self, state: Any) -> str:
        text = self.spec.describe(info_of(state)) if self.spec.describe is not None else ""
        rejected = int(jnp.sum(state.num_diverging))  # summed over chains when vectorised
        return ", ".join(part for part in (text, f"{rejected} rejected" * bool(rejected)) if part)

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        if self.prepared is not None and not is_concrete(model_args, model_kwargs):
            return self.prepared.postprocess  # jit_model_args: the data of the set-up, traced
        return self._prepare(model_args, model_kwargs or {}).postprocess

    def sample(self, state: Any, model_args: tuple, model_kwargs: dict) -> Any:
        stepper, unravel = self._sample_fn
        if state.iteration.ndim == 0:  # one chain (sequential or parallel): a batch of one
            batch = jax.tree.map(lambda leaf: leaf[None], state)
            return jax.tree.map(lambda leaf: leaf[0], sample_chains(stepper, unravel, batch))
        return sample_chains(stepper, unravel, state)

    def init(
        self,
        rng_key: PRNGKey,
        num_warmup: int,
        init_params: Any,
        model_args: tuple,
        model_kwargs: dict,
    ) -> Any:
        enable_compilation_cache()
        traced = not is_concrete(rng_key)  # inside NumPyro's pmap of parallel chains
        if traced and mesh_sharded((model_args, model_kwargs)):
            raise ValueError(
                "chain_method='parallel' cannot take data sharded over a device mesh (NumPyro's "
                "pmap traces the chains in a mesh of its own, and JAX refuses the model's X[idx] "
                "on the data's mesh). Use chain_method='vectorized': the chains share the "
                "sharded data, and with pplsamplers.shard_data(args, chains=k) they are split "
                "over k devices of a ('chain', 'data') mesh too. Or 'parallel' with unsharded data."
            )
        previous = self.prepared
        prepared = self._prepare(model_args, model_kwargs or {}, traced=traced)
        mcmc = driving_mcmc()
        if previous is not None and prepared is not previous:  # new data: NumPyro's step
            getattr(mcmc, "_cache", {}).clear()  # compiled with jit_model_args holds the old
        check_fields(mcmc, self.State)
        stepper = self._stepper(prepared, int(num_warmup), mcmc)
        # NumPyro reads ``_sample_fn`` to tell whether init ran: (stepper, unravel)
        self._sample_fn = (stepper, prepared.setup.potential.unravel)
        init_kernel = jax.jit(lambda key, x, p: self.spec.init(key, x, prepared.estimator, p))
        if is_prng_key(rng_key):
            return self.init_chain(rng_key, init_params, prepared, init_kernel)
        chains: list[Any] = []
        for i, key in enumerate(rng_key):
            start = None if init_params is None else jax.tree.map(lambda p, i=i: p[i], init_params)
            info = info_of(chains[0]) if chains else None  # the first chain's zero Info serves
            chains.append(self.init_chain(key, start, prepared, init_kernel, info))
        state = stack_chains(*chains)
        on_devices = chain_sharding((model_args, model_kwargs), len(chains))  # chains on the mesh
        return state if on_devices is None else jax.device_put(state, on_devices)

    # ----------------------------------------------------------- the driver
    def _unravel(self, x: Array) -> dict:
        return self.prepared.setup.potential.unravel(x)

    def _prepare(self, model_args: tuple, model_kwargs: dict, traced: bool = True) -> Prepared:
        """The set-up for these arguments and the kernel's params, computed once per data set.

        ``traced``: inside a trace (NumPyro's ``pmap`` of parallel chains) the set-up runs
        under ``jax.ensure_compile_time_eval`` to stay concrete; outside one that context is
        off, since under it the set-up's compiled programs would run op by op."""
        model_args, model_kwargs = tuple(model_args), dict(model_kwargs)
        if self.prepared is not None and self.prepared.setup.matches(model_args, model_kwargs):
            return self.prepared
        require_concrete(model_args, model_kwargs, type(self).__name__)  # not inside jax.jit
        given = self._given_setup
        with jax.ensure_compile_time_eval() if traced else contextlib.nullcontext():
            if given is not None and given.matches(model_args, model_kwargs):
                ready = given
            else:
                ready = warmup.setup(self.setup_options, model_args, model_kwargs)
            self.prepared = self._derive(ready)
        return self.prepared

    def _derive(self, setup: Setup) -> Prepared:
        """The kernel's estimator, context and starting params from ``setup``."""
        if self.spec.needs_mode and setup.mode is None:
            raise ValueError(
                f"{type(self).__name__} needs the posterior mode, which the given setup lacks; "
                "build it with SetupOptions(..., needs_mode=True)."
            )
        estimator, whitening = setup.kernel_estimator, setup.whitening
        dtype = setup.potential.init_position.dtype
        to_z = lambda x: None if x is None else whitening.to_z(jnp.asarray(x, dtype))
        context = WarmupContext(
            init_position=jnp.zeros(estimator.dim, dtype),
            mode=to_z(setup.mode),
            anchor=to_z(setup.anchor),
            whitening=whitening,
            whitened=setup.whitened,
            curvature=setup.curvature,
        )
        params = self.spec.default_params(jax.random.PRNGKey(warmup.SEED + 3), estimator, context)
        postprocess = (lambda z: z) if setup.view is None else make_postprocess(setup.view)
        return Prepared(setup, estimator, context, params, postprocess)

    def _stepper(self, prepared: Prepared, num_warmup: int, mcmc: Any = None) -> Stepper:
        setup, spec = prepared.setup, self.spec
        refine = setup.refine_metric
        plan = plan_run(mcmc, setup.estimator) if self.self_check else None
        check = {}
        if plan is not None:
            names = tuple(coordinate_names(setup.potential))
            check = dict(
                plan=plan,
                scores=score_estimator(setup.estimator, plan),
                report=Reporter(plan, names, self),
            )
        return Stepper(
            spec=spec,
            kernel=spec.build_kernel(),
            estimator=prepared.estimator,
            batched=setup.estimator,
            refine=refine,
            guard=spec.stabilize is not None and setup.whitened,
            num_warmup=num_warmup,
            window_ends=metrics.window_ends(num_warmup) if refine else (),
            first_window_draw=metrics.window_start(num_warmup),
            steps=spec.steps_at(prepared.estimator.dim),
            **check,
        )

    def init_chain(
        self,
        rng_key: PRNGKey,
        init_params: Any,
        prepared: Prepared,
        init_kernel: Callable,
        info: Any = None,
    ) -> Any:
        """The state of one chain.  ``init_kernel(key, position, params)`` is the kernel's
        ``init`` compiled once for all chains; ``info``: another chain's zero ``Info``, else
        the step is traced abstractly for its shapes."""
        start_key, kernel_key, chain_key = jax.random.split(rng_key, 3)
        setup, spec, params = prepared.setup, self.spec, prepared.params
        position = self.starting_point(start_key, init_params, prepared)
        kernel_state = init_kernel(kernel_key, position, params)
        if info is None:
            kernel = spec.build_kernel()
            shapes = jax.eval_shape(
                lambda k, s, p: kernel(k, s, prepared.estimator, p),
                kernel_key,
                kernel_state,
                params,
            )
            info = zeros_like_shapes(shapes[1])
        metric = setup.whitening
        stepper = self._sample_fn[0] if self._sample_fn is not None else None
        plan = None if stepper is None else stepper.plan
        monitor = None
        if plan is not None:
            monitor = empty_monitor(
                plan, prepared.estimator.dim, setup.potential.init_position.dtype
            )
        return self.State(
            z=self._unravel(metric.to_x(spec.position(kernel_state))),
            kernel_state=kernel_state,
            params=params,
            adapt_state=spec.warmup_init(kernel_state, params),
            iteration=jnp.asarray(0),
            diverging=jnp.asarray(False),
            num_diverging=jnp.asarray(0),
            rng_key=chain_key,
            metric=metric,
            metric_stats=metrics.init_stats(metric) if setup.refine_metric else None,
            monitor=monitor,
            **info._asdict(),
        )

    def starting_point(self, rng_key: PRNGKey, init_params: Any, prepared: Prepared) -> Array:
        """A chain's start in the kernel's coordinates z: ``init_params`` if given, else the
        sampler's own start if it declares one, else a draw of the Gaussian approximation
        z ~ N(0, I) (its centre where the potential is not whitened), or of the model's init
        strategy where no mode was searched."""
        setup, spec = prepared.setup, self.spec
        potential, whitening = setup.potential, setup.whitening
        check = lambda x: check_position(potential, x, setup.view) if is_concrete(x) else None
        if init_params is not None:
            x = flatten_init_params(setup.view or potential, init_params)
            check(x)
            return whitening.to_z(x)
        zero = prepared.context.init_position
        own = None
        if spec.start is not None:
            own = spec.start(rng_key, prepared.estimator, prepared.params, prepared.context)
        if own is not None:
            z = jnp.asarray(own)
        elif setup.mode is not None:
            if not setup.whitened:
                return zero  # no scale to draw with: start at the mode
            z = jax.random.normal(rng_key, zero.shape, zero.dtype)
            try:
                check(whitening.to_x(z))
            except RuntimeError:  # a Gaussian draw outside a parameter-dependent support
                return zero
            return z
        elif potential.draw_init is not None:
            z = whitening.to_z(potential.draw_init(rng_key))
        else:
            z = whitening.to_z(potential.init_position)
        check(whitening.to_x(z))
        return z


__all__ = ["SubsampledKernel"]
