"""Draw how ``AutoSampler`` chooses a kernel: ``docs/_static/figures/selection_rules.png``.

The structural questions come first, in the order ``rank_candidates``
(``pplsamplers/select/competence.py``) asks them; above ``SMALL_N`` data the scored rules
follow, then the pilot (``strategy="pilot"``).  The thresholds, score levels, tie-break order
and pilot defaults are read from the package, so the figure follows the code.  Run it from the
repository root::

    .venv/bin/python docs/_static/figures/selection_rules.py
"""

from __future__ import annotations

import os
from itertools import pairwise

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from pplsamplers.select import competence as c  # noqa: E402
from pplsamplers.select.pilot import PilotOptions  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "selection_rules.png")
WIDTH, HEIGHT = 10.0, 14.0  # inches (the height is cut to the drawing); axes in inches
FONT = 10.0

NAMES = {
    "nuts": "NUTS", "boomerang": "Boomerang", "hamcmc": "HAMCMC", "psbps": "pSBPS",
    "sbps": "SBPS", "sgbd": "SGBD", "sigmabps": "σBPS", "bps": "BPS", "psgld": "pSGLD",
    "sgld": "SGLD",
}  # fmt: skip
COLOURS = {
    "question": ("#e8f0fb", "#4a72b0"),
    "nuts": ("#e4f4e4", "#3f8f3f"),
    "minibatch": ("#fdf0dc", "#c07a1a"),
    "error": ("#fbe3e3", "#b03a3a"),
    "pilot": ("#efe7f7", "#7a52a8"),
    "start": ("#f2f2f2", "#666666"),
}


def n(x: float) -> str:
    """A number as the docs write it: 5000, 100 000, 2.5."""
    if float(x).is_integer():
        return f"{int(x):,}".replace(",", " ") if x >= 10_000 else str(int(x))
    return f"{x:g}"


def box(ax, x, y, w, h, text, kind, size=FONT, weight="normal", align="center"):
    """A rounded box centred at (x, y), w × h inches, with its text."""
    face, edge = COLOURS[kind]
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=face, edgecolor=edge, linewidth=1.3,
        )
    )  # fmt: skip
    tx = x if align == "center" else x - w / 2 + 0.14
    ax.text(tx, y, text, ha=align, va="center", fontsize=size, weight=weight, linespacing=1.3)


def arrow(ax, start, end, label="", where=0.5, offset=(0.08, 0.0), ha="left"):
    """An arrow from start to end, labelled at the fraction ``where`` of its length."""
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=13, linewidth=1.2,
                        color="#444444", shrinkA=0, shrinkB=0)
    )  # fmt: skip
    if label:
        lx = start[0] + where * (end[0] - start[0]) + offset[0]
        ly = start[1] + where * (end[1] - start[1]) + offset[1]
        ax.text(lx, ly, label, ha=ha, va="center", fontsize=FONT - 0.5, style="italic",
                color="#333333")  # fmt: skip


def main() -> None:
    plt.rcParams["font.family"] = "DejaVu Sans"
    fig = plt.figure(figsize=(WIDTH, HEIGHT))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(0, HEIGHT)
    ax.axis("off")

    small, wide = n(c.SMALL_N), n(c.NUTS_AFFORDABLE_N)
    qx, qw, qh = 2.45, 4.3, 0.62  # the questions' column
    lx, lw = 7.45, 4.5  # the leaves' column
    top = HEIGHT - 0.45

    box(ax, WIDTH / 2, top, 7.2, 0.55,
        "Features of the model: one trace (structure); probes at the mode (shape)",
        "start", weight="bold")  # fmt: skip

    questions = [
        ("Discrete latent sites not marked\nfor enumeration?", None),
        ("Only full-data steps can run it? (no latent\ndimension; a likelihood that cannot be subsampled\n"
         "or is not smooth in a latent; an enumerated\nsite that couples every datum)",
         ("Full-data NUTS", "nuts")),
        ("Latent sites inside the data plate\n(one latent per datum)?", ("Full-data NUTS", "nuts")),
        ("Observed site whose support depends\non the latents (y ~ Uniform(0, θ))?",
         ("Full-data NUTS with support checks", "nuts")),
        (f"No data plate, or N ≤ {small}?",
         (f"NUTS {n(c.IDEAL)}; every minibatch kernel {n(c.COMPATIBLE)}", "nuts")),
    ]  # fmt: skip
    heights = [qh, 1.0, qh, qh, 0.45]
    ys = [top - 1.05]
    for above, below in pairwise(heights):  # a gap of 0.4 in for each "no" arrow
        ys.append(ys[-1] - above / 2 - 0.4 - below / 2)
    arrow(ax, (qx, top - 0.28), (qx, ys[0] + heights[0] / 2))
    for i, ((text, leaf), y, h) in enumerate(zip(questions, ys, heights, strict=True)):
        box(ax, qx, y, qw, h, text, "question", size=FONT - 0.5 if i == 1 else FONT)
        ax.text(qx - qw / 2 + 0.12, y, str(i + 1), ha="left", va="center", fontsize=FONT,
                weight="bold", color=COLOURS["question"][1])  # the docs' table row  # fmt: skip
        if i + 1 < len(questions):
            arrow(ax, (qx, y - h / 2), (qx, ys[i + 1] + heights[i + 1] / 2), "no", 0.45)
        if leaf is not None:
            arrow(ax, (qx + qw / 2, y), (lx - lw / 2, y), "yes", 0.5, (0, 0.13), "center")
            box(ax, lx, y, lw, 0.45, leaf[0], leaf[1])
    # the first question's two leaves, split by N
    y0, jx = ys[0], lx - lw / 2 - 0.25
    ax.plot([qx + qw / 2, jx], [y0, y0], color="#444444", lw=1.2)
    ax.text(qx + qw / 2 + 0.1, y0 + 0.13, "yes", ha="left", va="center",
            fontsize=FONT - 0.5, style="italic", color="#333333")  # fmt: skip
    ax.plot([jx, jx], [y0 + 0.24, y0 - 0.24], color="#444444", lw=1.2)
    for dy, text, kind in ((0.24, f"N ≤ {small}: NUTS inside DiscreteHMCGibbs", "nuts"),
                           (-0.24, f"N > {small}: ValueError (mark them for enumeration)",
                            "error")):  # fmt: skip
        arrow(ax, (jx, y0 + dy), (lx - lw / 2, y0 + dy))
        box(ax, lx, y0 + dy, lw, 0.4, text, kind)

    # the scored rules, above SMALL_N data
    rows = [
        ("6", f"far from Laplace: log-weight sd > {n(c.POOR_LAPLACE)}, or\n"
              f"misfit > {n(c.NON_GAUSSIAN_MISFIT)} with D > {c.HIGH_DIM}; no group effects; "
              f"N ≤ {wide}",
         f"NUTS {n(c.IDEAL)}  (otherwise NUTS {n(c.LAST_RESORT)})"),
        ("7", "group effects found by the shared warmup", f"Boomerang {n(c.IDEAL + 0.5)}"),
        ("8", "more than one separated mode", f"SBPS {n(c.PREFERRED + 0.5)}; "
              f"pSBPS, SGBD {n(c.PREFERRED)}"),
        ("9", f"near-Gaussian: one mode, misfit < {n(c.NEAR_GAUSSIAN_MISFIT)},\n"
              f"skewness < {n(c.SKEWED)}", f"Boomerang {n(c.IDEAL)}"),
        ("10", f"correlation condition number > {n(c.STRONG_CORRELATION)}",
               f"HAMCMC {n(c.PREFERRED + 0.5)} ({n(c.COMPATIBLE)} if misfit > "
               f"{n(c.NON_GAUSSIAN_MISFIT)});\npSBPS {n(c.PREFERRED)}"),
        ("11", f"curvature spread > {n(c.SCALE_SPREAD)}",
               f"pSBPS, SGBD, σBPS {n(c.PREFERRED)}"),
        ("12", f"skewness > {n(c.SKEWED)} or tail growth < {n(c.HEAVY_TAILS)}",
               f"SGBD (corrected) {n(c.PREFERRED + 0.5)}"),
        ("13", f"gradient kurtosis > {n(c.WILD_GRADIENTS)}",
               f"SGBD (corrected) {n(c.PREFERRED + 0.5)};\npSBPS {n(c.PREFERRED)}"),
        ("14", f"quadratic misfit > {n(c.NON_GAUSSIAN_MISFIT)}",
               f"SBPS {n(c.PREFERRED + 0.5)} ({n(c.PREFERRED)} if row 12 applies);\n"
               f"pSBPS {n(c.PREFERRED)}"),
        ("15", "the probes could not be read", f"SBPS {n(c.PREFERRED)}"),
    ]  # fmt: skip
    row_h = [0.5, 0.3, 0.3, 0.5, 0.5, 0.3, 0.3, 0.5, 0.5, 0.3]
    panel_top = ys[-1] - 0.62
    head = 0.62
    panel_h = head + sum(row_h) + 0.12
    panel_w = WIDTH - 0.85
    px0 = 0.25
    arrow(ax, (qx, ys[-1] - heights[-1] / 2), (qx, panel_top), "no", 0.45)
    ax.add_patch(
        FancyBboxPatch((px0, panel_top - panel_h), panel_w, panel_h,
                       boxstyle="round,pad=0.02,rounding_size=0.12",
                       facecolor=COLOURS["minibatch"][0], edgecolor=COLOURS["minibatch"][1],
                       linewidth=1.3)
    )  # fmt: skip
    ax.text(px0 + 0.15, panel_top - 0.2,
            f"N > {small}: scored rules.  Every compatible kernel starts at {n(c.COMPATIBLE)}; "
            "each keeps the highest score a rule gives it.",
            ha="left", va="center", fontsize=FONT, weight="bold")  # fmt: skip
    col_num, col_cond, col_pick = px0 + 0.15, px0 + 0.55, px0 + 5.55
    ax.text(col_num, panel_top - 0.48, "row", fontsize=FONT - 0.5, style="italic", va="center")
    ax.text(col_cond, panel_top - 0.48, "the probes show", fontsize=FONT - 0.5,
            style="italic", va="center")  # fmt: skip
    ax.text(col_pick, panel_top - 0.48, "scores", fontsize=FONT - 0.5, style="italic",
            va="center")  # fmt: skip
    y = panel_top - head
    for (num, cond, pick), h in zip(rows, row_h, strict=True):
        ax.plot([px0 + 0.1, px0 + panel_w - 0.1], [y, y], color="#d9b98a", lw=0.7)
        ax.text(col_num, y - h / 2, num, va="center", fontsize=FONT)
        ax.text(col_cond, y - h / 2, cond, va="center", fontsize=FONT, linespacing=1.25)
        ax.text(col_pick, y - h / 2, pick, va="center", fontsize=FONT, linespacing=1.25)
        y -= h

    # ranking and pilot
    order = ", ".join(NAMES[name] for name in c.PREFERENCE)
    rank_y = panel_top - panel_h - 0.72
    arrow(ax, (qx, panel_top - panel_h), (qx, rank_y + 0.42))
    box(ax, WIDTH / 2, rank_y, WIDTH - 0.5, 0.84,
        "Ranking: highest score first; ties in the registry's order\n"
        f"{order}.\n"
        f"None of rows 6–15 (every minibatch kernel at {n(c.COMPATIBLE)}): Boomerang "
        f"(row 16).", "start")  # fmt: skip
    # the N ≤ SMALL_N leaf is a ranking too: route it down the right-hand side
    rx = WIDTH - 0.3
    ax.plot([lx + lw / 2, rx, rx], [ys[-1], ys[-1], rank_y + 0.42 + 0.12], color="#444444",
            lw=1.2)  # fmt: skip
    arrow(ax, (rx, rank_y + 0.42 + 0.12), (rx, rank_y + 0.42))

    pilot = PilotOptions()
    q_y = rank_y - 0.95
    arrow(ax, (qx, rank_y - 0.42), (qx, q_y + 0.25))
    box(ax, qx, q_y, 2.6, 0.5, 'strategy="pilot"?', "question")
    arrow(ax, (qx, q_y - 0.25), (qx, q_y - 0.75), "no (default)", 0.45)
    box(ax, qx, q_y - 1.0, 2.6, 0.5, "the top-ranked kernel runs", "pilot", weight="bold")
    px = lx - 0.45
    pw = lw + 0.9
    arrow(ax, (qx + 1.3, q_y), (px - pw / 2, q_y), "yes", 0.5, (0, 0.13), "center")
    box(ax, px, q_y - 0.5, pw, 1.5,
        f"The top {pilot.top} candidates each run {pilot.num_chains} chains for "
        f"{n(pilot.budget_epochs)} epochs.\n"
        f"The KSD guard rejects a biased one (KSD > {n(pilot.guard_factor)}× the best,\n"
        "beyond noise), as does a failed self-check.\n"
        "The highest minimum bulk ESS per epoch runs.\n"
        "Where only NUTS can run the model, NUTS either way.",
        "pilot", size=FONT - 0.5)  # fmt: skip
    bottom = q_y - 1.25 - 0.2  # the lowest boxes' edge, and a margin
    ax.set_ylim(bottom, HEIGHT)
    fig.set_size_inches(WIDTH, HEIGHT - bottom)

    fig.savefig(OUT, dpi=120)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
