"""The kernel layer: pure kernels in BlackJAX's two levels on the
:class:`~pplsamplers.estimator.Estimator` protocol, grouped by family
(:mod:`~pplsamplers.kernels.pdmp`, :mod:`~pplsamplers.kernels.sgmcmc`), each declared to the
adapter by a :class:`~pplsamplers.kernels.spec.KernelSpec`.  Nothing here knows NumPyro."""
