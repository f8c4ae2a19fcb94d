from pplsamplers.infer.sgbd import SGBD

# Warmup adaptation of σ (adapt_step_size=True) and the CSGLD adapter are checked in
# tests/unit/test_sgbd.py on a hand-written potential, which compiles faster (time budget).
ENTRIES = {
    "SGBD": lambda model: SGBD(model, step_size=0.05, subsample_size=20),
}
