"""course_lib.plots: titles, labelled axes, and one colour per method in every notebook."""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib

from course_lib import plots

matplotlib.use("Agg")


def test_plots_have_titles_labels_and_fixed_colours():
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    curves = {"outcome": [(0, 0.2, 0.1, 0.3), (10, 0.5, 0.4, 0.6)],
              "gigpo": [(0, 0.2, 0.1, 0.3), (10, 0.6, 0.5, 0.7)]}
    ax = plots.plot_learning_curves(curves, "held-out success, lookup")
    assert ax.get_title() == "held-out success, lookup" and ax.get_ylabel() == "held-out success"
    assert ax.get_xlabel() == "training step" and ax.figure.dpi == plots.FIGURE_DPI
    assert [mcolors.to_hex(line.get_color()) for line in ax.get_lines()] == [plots.METHOD_COLORS["outcome"],
                                                                              plots.METHOD_COLORS["gigpo"]]
    assert len(ax.collections) == 2  # one shaded interval per method
    assert plots.method_color("gigpo (ω=0.5)") == plots.METHOD_COLORS["gigpo"]
    # one method, two curves
    variants = {"turn (aligned)": curves["outcome"], "turn (misaligned)": curves["gigpo"]}
    lines = plots.plot_learning_curves(variants, "two variants").get_lines()
    colours = [mcolors.to_hex(line.get_color()) for line in lines]
    assert colours[0] == plots.METHOD_COLORS["turn"] and colours[1] in plots._EXTRA_COLORS
    # not a known method: one of the extra colours, the same in every process
    extra = plots.method_color("my method")
    assert extra in plots._EXTRA_COLORS and extra not in plots.METHOD_COLORS.values()
    other = subprocess.run([sys.executable, "-c",
                            "from course_lib import plots; print(plots.method_color('my method'))"],
                           env=dict(os.environ, PYTHONHASHSEED="12345"), capture_output=True, text=True,
                           check=True)
    assert other.stdout.strip() == extra

    ax = plots.plot_histogram([1, 1, 2, 3, 3, 3], "step-group sizes", "step-group size", method="gigpo")
    assert [p.get_height() for p in ax.patches] == [2, 1, 3]
    assert ax.get_xlabel() == "step-group size" and ax.get_ylabel() == "count"

    ax = plots.bar_with_ci(["base", "sft"], [0.1, 0.9], [0.05, 0.8], [0.2, 0.95], "warm start", "success")
    assert [mcolors.to_hex(p.get_facecolor()) for p in ax.patches] == [plots.METHOD_COLORS["base"],
                                                                       plots.METHOD_COLORS["sft"]]
    assert ax.get_title() == "warm start" and ax.get_ylabel() == "success"
    plt.close("all")
