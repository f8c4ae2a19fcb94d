from pplsamplers.infer.hamcmc import HAMCMC

# Logistic regression, N = 200, d = 3: the curvature of U is at most about N/4·|x|² ≈ 150,
# so ε γ = 1e-3 (the SGLD entry's step) keeps the γI part of H stable.
ENTRIES = {
    "HAMCMC": lambda model: HAMCMC(
        model, step_size=0.1, initial_scale=0.01, memory_size=3, subsample_size=20
    ),
}
