from pplsamplers.infer.sgbd import CSGLD, SGBD

# Warmup adaptation of σ (adapt_step_size=True) is checked in tests/unit/test_sgbd.py on a
# hand-written potential, which compiles faster (time budget).
ENTRIES = {
    "SGBD": lambda model: SGBD(model, step_size=0.05, subsample_size=20),
    # same ε as the SGLD entry; there τ̂ ≈ 15 (N = 200, n = 20), so ε τ̂² < 2 and c-SGLD
    # still injects noise (Alg. 7 is not reduced to SGD)
    "CSGLD": lambda model: CSGLD(model, step_size=1e-3, subsample_size=20),
}
