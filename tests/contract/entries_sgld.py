from pplsamplers import PSGLD, SGLD

ENTRIES = {
    "SGLD": lambda model: SGLD(model, step_size=1e-3, subsample_size=20),
    "pSGLD": lambda model: PSGLD(model, step_size=1e-3, subsample_size=20),
}
