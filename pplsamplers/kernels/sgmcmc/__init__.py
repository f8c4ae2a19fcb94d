"""Stochastic-gradient MCMC kernels with a step size: SGLD and pSGLD, SGBD, c-SGLD, SGRLD and
HAMCMC, and what they share (:mod:`~pplsamplers.kernels.sgmcmc.step_size`)."""
