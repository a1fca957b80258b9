"""The course's plots: learning curves with their intervals, histograms and bars with intervals, each with a
title, labelled axes and one colour per method that is the same in every notebook (`METHOD_COLORS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

METHOD_COLORS = {
    "base": "#7f7f7f",  # grey: the model before any training
    "sft": "#8c564b",  # brown: the supervised warm start
    "outcome": "#1f77b4",  # blue
    "gigpo": "#ff7f0e",  # orange
    "turn": "#2ca02c",  # green
    "critic": "#9467bd",  # purple
    "judge": "#d62728",  # red
    "trl": "#17becf",  # cyan
}
_EXTRA_COLORS = ("#e377c2", "#bcbd22", "#393b79", "#637939", "#843c39", "#7b4173")
FIGURE_DPI = 90


def method_color(name: str) -> str:
    """The colour of a method: METHOD_COLORS by name ("gigpo (ω=0.5)" counts as "gigpo"), else a fixed
    colour derived from the name, so it does not change between runs or notebooks."""
    key = name.lower().split(" ")[0].split("(")[0].strip("_-:")
    if key in METHOD_COLORS:
        return METHOD_COLORS[key]
    return _EXTRA_COLORS[sum(map(ord, name)) % len(_EXTRA_COLORS)]


def _axes(ax, figsize: tuple[float, float]):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize, dpi=FIGURE_DPI, layout="constrained")[1]


def plot_learning_curves(curves: dict[str, Sequence[tuple[float, float, float, float]]], title: str,
                         ylabel: str = "held-out success", xlabel: str = "training step", *, ax=None,
                         figsize: tuple[float, float] = (6.0, 3.6)):
    """One line per method with its interval shaded: curves = {method: [(step, mean, lo, hi), ...]}.

    Colours come from `method_color`, so "outcome" is blue in notebook 05 and in notebook 08; a second curve
    of the same colour (two variants of one method) takes the first unused extra colour.
    Returns the matplotlib Axes (end the line with `;` to hide its text repr).
    """
    ax = _axes(ax, figsize)
    used: set[str] = set()
    for name, points in curves.items():
        if not points:
            continue
        steps, means, los, his = zip(*sorted(points))
        color = method_color(name)
        # two variants of one method ("turn (aligned)", "turn (misaligned)"): tell them apart
        if color in used:
            color = next((c for c in _EXTRA_COLORS if c not in used), color)
        used.add(color)
        ax.plot(steps, means, marker="o", markersize=3, color=color, label=name)
        ax.fill_between(steps, los, his, color=color, alpha=0.18, linewidth=0)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if all(float(p[0]).is_integer() for points in curves.values() for p in points):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers: no 2.5 ticks
    if curves:
        ax.legend(frameon=False)
    return ax


def plot_histogram(values: Sequence[float], title: str, xlabel: str, ylabel: str = "count", *,
                   method: str | None = None, ax=None, figsize: tuple[float, float] = (5.0, 3.2)):
    """A histogram; integer values (e.g. GiGPO step-group sizes) get one bar per integer."""
    import numpy as np

    ax = _axes(ax, figsize)
    values = np.asarray(list(values), dtype=float)
    bins: Any = "auto"
    if len(values) and np.all(values == np.round(values)):
        bins = np.arange(values.min() - 0.5, values.max() + 1.5)
    ax.hist(values, bins=bins, color=method_color(method) if method else "#4c72b0", edgecolor="white")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3, axis="y")
    return ax


def bar_with_ci(labels: Sequence[str], means: Sequence[float], los: Sequence[float], his: Sequence[float],
                title: str, ylabel: str, *, xlabel: str | None = None, ax=None,
                figsize: tuple[float, float] = (5.0, 3.2)):
    """Bars with asymmetric interval whiskers [lo, hi]; bars named after a method take its colour."""
    ax = _axes(ax, figsize)
    errors = [[m - lo for m, lo in zip(means, los)], [hi - m for m, hi in zip(means, his)]]
    ax.bar(list(labels), list(means), yerr=errors, capsize=4, color=[method_color(str(x)) for x in labels])
    ax.set(title=title, ylabel=ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, axis="y")
    return ax
