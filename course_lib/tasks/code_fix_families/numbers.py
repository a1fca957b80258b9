"""Code-fix families about numbers: moving average, clamp, running sum, median, percentage,
counting in a range, argmax (see `course_lib.tasks.code_fix_families.repo` for what a family is)."""

from __future__ import annotations

import random

from course_lib.tasks.code_fix_families.repo import Repo, fill, ints


def moving_average(rng: random.Random) -> Repo:
    fn = rng.choice(["moving_average", "rolling_mean", "window_means", "sliding_average", "smooth"])
    w = rng.choice(["window", "size", "width", "span"])
    source = fill('''"""Smoothing of number series."""


def $fn(values, $w):
    """Return the mean of every run of `$w` consecutive values, in order.

    `$fn([1, 2, 3, 4], 2)` is `[1.5, 2.5, 3.5]`; a `$w` longer than `values` gives `[]`.
    """
    if $w <= 0:
        raise ValueError("$w must be positive")
    means = []
    for start in range(len(values) - $w + 1):
        chunk = values[start:start + $w]
        means.append(sum(chunk) / $w)
    return means
''', fn=fn, w=w)
    bugs = [
        ("off_by_one", f"    for start in range(len(values) - {w} + 1):",
         f"    for start in range(len(values) - {w}):"),
        ("wrong_variable", f"        means.append(sum(chunk) / {w})",
         "        means.append(sum(chunk) / len(values))"),
        ("wrong_operator", f"    if {w} <= 0:", f"    if {w} < 0:"),
    ]

    def call(n: int, k: int) -> str:
        return f"{fn}({ints(rng, n)}, {k})"

    visible = [("eq", call(rng.randint(5, 7), rng.randint(2, 3))), ("eq", call(rng.randint(4, 6), 2)),
               ("eq", f"{fn}({ints(rng, 2)}, 3)"), ("raises", f"{fn}([1, 2, 3], 0)", "positive")]
    hidden = [("eq", call(rng.randint(6, 9), rng.randint(2, 4))), ("eq", call(4, 4)), ("eq", call(5, 1)),
              ("eq", call(rng.randint(7, 10), 3)), ("eq", f"{fn}([], 2)"),
              ("raises", f"{fn}([4, 5], 0)", "positive"), ("raises", f"{fn}([4, 5], -1)", "positive")]
    return Repo("moving_average", rng.choice(["series", "smoothing", "signals"]), source, [fn], bugs,
                 visible, hidden)


def clamp(rng: random.Random) -> Repo:
    fn = rng.choice(["clamp", "limit", "bound", "clip_value", "constrain"])
    lo = rng.choice([0, 1, -1, 10, -10])
    hi = lo + rng.choice([9, 20, 50, 100, 255])
    hi_bad = rng.choice([hi - 1, hi + 1, hi * 2 + 5])
    source = fill('''"""Keeping numbers inside a range."""


def $fn(value, low=$lo, high=$hi):
    """Return `value` limited to the closed range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return high
    return value
''', fn=fn, lo=lo, hi=hi)
    bugs = [
        ("wrong_operator", "    if value < low:", "    if value > low:"),
        ("wrong_default", f"def {fn}(value, low={lo}, high={hi}):",
         f"def {fn}(value, low={lo}, high={hi_bad}):"),
        ("wrong_variable", "    if value > high:\n        return high",
         "    if value > high:\n        return low"),
        ("missing_edge_case",
         "    if low > high:\n        raise ValueError(\"low must not exceed high\")\n    if value < low:",
         "    if value < low:"),
    ]
    a = rng.randint(0, 40)
    b = a + rng.randint(5, 40)
    visible = [("eq", f"{fn}({a - rng.randint(1, 9)}, {a}, {b})"),
               ("eq", f"{fn}({b + rng.randint(1, 9)}, {a}, {b})"),
               ("eq", f"{fn}({rng.randint(a, b)}, {a}, {b})"), ("eq", f"{fn}({hi + rng.randint(2, 30)})"),
               ("raises", f"{fn}(5, {b}, {a})", "exceed")]
    hidden = [("eq", f"{fn}({lo - rng.randint(1, 9)})"), ("eq", f"{fn}({hi})"), ("eq", f"{fn}({hi + 1})"),
              ("eq", f"{fn}({lo + 1})"), ("eq", f"{fn}({a}, {a}, {b})"), ("eq", f"{fn}({b}, {a}, {b})"),
              ("eq", f"{fn}({a + 1}.5, {a}, {b})"), ("raises", f"{fn}(0, 1, 0)", "exceed")]
    return Repo("clamp", rng.choice(["ranges", "numbers", "bounds"]), source, [fn], bugs, visible, hidden)


def running_sum(rng: random.Random) -> Repo:
    fn = rng.choice(["running_total", "cumulative_sum", "prefix_sums", "running_sum", "accumulate"])
    source = fill('''"""Running totals."""


def $fn(values, start=0):
    """Return the running totals of `values`, counting from `start`.

    `$fn([1, 2, 3])` is `[1, 3, 6]` and `$fn([1, 2], start=10)` is `[11, 13]`.
    """
    totals = []
    total = start
    for value in values:
        total += value
        totals.append(total)
    return totals
''', fn=fn)
    bugs = [
        ("off_by_one", "        total += value\n        totals.append(total)",
         "        totals.append(total)\n        total += value"),
        ("wrong_variable", "        totals.append(total)", "        totals.append(value)"),
        ("wrong_default", f"def {fn}(values, start=0):", f"def {fn}(values, start=1):"),
        ("wrong_variable", "    total = start", "    total = 0"),
    ]
    visible = [("eq", f"{fn}({ints(rng, rng.randint(4, 6), 1, 20)})"),
               ("eq", f"{fn}({ints(rng, 3, 1, 9)}, start={rng.randint(5, 50)})"),
               ("eq", f"{fn}([])")]
    hidden = [("eq", f"{fn}({ints(rng, rng.randint(5, 8))})"), ("eq", f"{fn}([{rng.randint(1, 9)}])"),
              ("eq", f"{fn}({ints(rng, 4)}, start={rng.randint(-30, -1)})"), ("eq", f"{fn}([], start=3)"),
              ("eq", f"{fn}({ints(rng, 6, 1, 5)})")]
    return Repo("running_sum", rng.choice(["totals", "sums", "accounting"]), source,
                [fn], bugs, visible, hidden)


def median(rng: random.Random) -> Repo:
    fn = rng.choice(["median", "middle_value", "median_of", "find_median"])
    source = fill('''"""Order statistics."""


def $fn(values):
    """Return the median of `values`: the middle value once sorted, or the mean of the two middle
    values when there is an even number of them. An empty list raises ValueError."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
''', fn=fn)
    bugs = [
        ("wrong_variable", "        return ordered[mid]", "        return values[mid]"),
        ("off_by_one", "    return (ordered[mid - 1] + ordered[mid]) / 2",
         "    return (ordered[mid] + ordered[mid + 1]) / 2"),
        ("wrong_operator", "    if len(ordered) % 2 == 1:", "    if len(ordered) % 2 == 0:"),
        ("missing_edge_case",
         "    if not values:\n        raise ValueError(\"median of an empty list\")\n"
         "    ordered = sorted(values)",
         "    ordered = sorted(values)"),
    ]

    def unsorted(n: int) -> list[int]:
        while True:  # an already sorted input would hide the wrong-variable bug
            xs = ints(rng, n)
            if xs != sorted(xs) and len(set(xs)) == n:
                return xs

    visible = [("eq", f"{fn}({unsorted(5)})"), ("eq", f"{fn}({unsorted(4)})"),
               ("raises", f"{fn}([])", "empty")]
    hidden = [("eq", f"{fn}({unsorted(7)})"), ("eq", f"{fn}({unsorted(6)})"),
              ("eq", f"{fn}([{rng.randint(1, 9)}])"),
              ("eq", f"{fn}({unsorted(2)})"), ("eq", f"{fn}({unsorted(3)})"),
              ("raises", f"{fn}([])", "empty")]
    return Repo("median", rng.choice(["stats", "statistics", "order"]), source, [fn], bugs, visible, hidden)


def percentage(rng: random.Random) -> Repo:
    fn = rng.choice(["percentage", "percent_of", "share_percent", "as_percent"])
    digits = rng.choice([1, 2])
    source = fill('''"""Percentages."""


def $fn(part, whole, digits=$digits):
    """Return `part` as a percentage of `whole`, rounded to `digits` decimals; 0.0 when `whole` is 0."""
    if whole == 0:
        return 0.0
    return round(100 * part / whole, digits)
''', fn=fn, digits=digits)
    bugs = [
        ("missing_edge_case",
         "    if whole == 0:\n        return 0.0\n    return round(", "    return round("),
        ("wrong_default", f"digits={digits}):", f"digits={digits + 2}):"),
        ("wrong_variable", "round(100 * part / whole, digits)", "round(100 * whole / part, digits)"),
    ]
    visible = [("eq", f"{fn}(1, 3)"), ("eq", f"{fn}({rng.randint(1, 9)}, {rng.randint(11, 99)}, 3)"),
               ("eq", f"{fn}({rng.randint(1, 9)}, 0)")]
    hidden = [("eq", f"{fn}(2, 3)"), ("eq", f"{fn}({rng.randint(10, 60)}, {rng.randint(61, 97)})"),
              ("eq", f"{fn}(0, 0)"), ("eq", f"{fn}(5, 10)"), ("eq", f"{fn}(1, 7, 4)"),
              ("eq", f"{fn}(-3, 0, 1)")]
    return Repo("percentage", rng.choice(["ratios", "reporting", "numbers"]), source,
                [fn], bugs, visible, hidden)


def count_in_range(rng: random.Random) -> Repo:
    fn = rng.choice(["count_between", "count_in_range", "how_many_within", "tally_range"])
    source = fill('''"""Counting values in a range."""


def $fn(values, low, high):
    """Count the values v with low <= v <= high (both ends included)."""
    count = 0
    for v in values:
        if low <= v <= high:
            count += 1
    return count
''', fn=fn)
    bugs = [
        ("wrong_operator", "        if low <= v <= high:", "        if low < v <= high:"),
        ("off_by_one", "        if low <= v <= high:", "        if low <= v < high:"),
        ("wrong_variable", "            count += 1", "            count += v"),
    ]

    def case() -> str:
        xs = ints(rng, rng.randint(6, 10), 0, 30)
        lo, hi = sorted(rng.sample(xs, 2))
        return f"{fn}({xs}, {lo}, {hi})"

    visible = [("eq", case()), ("eq", f"{fn}([1, 2, 3, 4, 5], 2, 4)")]
    hidden = [("eq", case()), ("eq", case()), ("eq", f"{fn}([], 0, 10)"), ("eq", f"{fn}([5, 5, 5], 5, 5)"),
              ("eq", f"{fn}([{rng.randint(20, 40)}], 0, 10)")]
    return Repo("count_in_range", rng.choice(["counting", "filters", "ranges"]), source,
                [fn], bugs, visible, hidden)


def argmax(rng: random.Random) -> Repo:
    fn = rng.choice(["argmax", "index_of_max", "best_index", "position_of_largest"])
    source = fill('''"""Finding the best element."""


def $fn(values):
    """Return the index of the largest value (the first one if it occurs several times), or None
    for an empty list."""
    if not values:
        return None
    best = 0
    for i in range(1, len(values)):
        if values[i] > values[best]:
            best = i
    return best
''', fn=fn)
    bugs = [
        ("wrong_operator", "        if values[i] > values[best]:", "        if values[i] < values[best]:"),
        ("wrong_operator", "        if values[i] > values[best]:", "        if values[i] >= values[best]:"),
        ("missing_edge_case", "    if not values:\n        return None\n    best = 0", "    best = 0"),
        ("off_by_one", "    for i in range(1, len(values)):", "    for i in range(1, len(values) - 1):"),
    ]

    def with_max_at(position: int, n: int) -> list[int]:
        xs = ints(rng, n, 0, 50)
        xs[position] = 60
        return xs

    n = rng.randint(5, 8)
    tie = ints(rng, 6, 0, 40)
    i, j = sorted(rng.sample(range(6), 2))
    tie[i] = tie[j] = 45
    visible = [("eq", f"{fn}({with_max_at(n - 1, n)})"), ("eq", f"{fn}({tie})"), ("eq", f"{fn}([])")]
    hidden = [("eq", f"{fn}({with_max_at(rng.randint(1, 3), 6)})"), ("eq", f"{fn}({with_max_at(4, 5)})"),
              ("eq", f"{fn}([7, 7, 7])"), ("eq", f"{fn}([{rng.randint(-9, 9)}])"), ("eq", f"{fn}([])"),
              ("eq", f"{fn}([-5, -2, -9])")]
    return Repo("argmax", rng.choice(["search", "selection", "ranking"]), source, [fn], bugs, visible, hidden)
