"""Code-fix's function families: small modules with bugs that can be planted in them.

A family is a function `(rng) -> Repo`: the correct module source, the bugs that can be planted
in it (each a pair of texts: the correct snippet and its buggy replacement) and the test cases.
A test case is ("eq", call) -- the expected value is computed by running the correct code, so it
can never be wrong -- or ("raises", call, message) for a ValueError whose message must match.
Families: moving average, clamp, running sum, word count, median, pagination, palindrome,
fizzbuzz-like labels, dedupe, chunking, percentage, counting in a range, argmax, truncation.
`course_lib.tasks.code_fix` turns an instance into a task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from string import Template
from typing import Any


@dataclass
class Repo:
    """One family instance: a correct module, the bugs that can be planted in it, and its test cases."""

    family: str
    module: str  # file name without ".py", inside the package
    source: str  # the correct module
    imports: list[str]  # the names the tests import from the module
    bugs: list[tuple[str, str, str]]  # (bug kind, correct snippet, buggy snippet)
    visible: list[tuple[str, ...]]
    hidden: list[tuple[str, ...]]


PACKAGES = ["toolbox", "utilkit", "corelib", "helpers", "pyutils", "basics", "smallkit", "workbench",
             "common", "handy", "bits", "everyday"]


def _fill(template: str, **names: Any) -> str:
    return Template(template).substitute({k: str(v) for k, v in names.items()})


def _ints(rng: random.Random, n: int, lo: int = -20, hi: int = 50) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _moving_average(rng: random.Random) -> Repo:
    fn = rng.choice(["moving_average", "rolling_mean", "window_means", "sliding_average", "smooth"])
    w = rng.choice(["window", "size", "width", "span"])
    source = _fill('''"""Smoothing of number series."""


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
        return f"{fn}({_ints(rng, n)}, {k})"

    visible = [("eq", call(rng.randint(5, 7), rng.randint(2, 3))), ("eq", call(rng.randint(4, 6), 2)),
               ("eq", f"{fn}({_ints(rng, 2)}, 3)"), ("raises", f"{fn}([1, 2, 3], 0)", "positive")]
    hidden = [("eq", call(rng.randint(6, 9), rng.randint(2, 4))), ("eq", call(4, 4)), ("eq", call(5, 1)),
              ("eq", call(rng.randint(7, 10), 3)), ("eq", f"{fn}([], 2)"),
              ("raises", f"{fn}([4, 5], 0)", "positive"), ("raises", f"{fn}([4, 5], -1)", "positive")]
    return Repo("moving_average", rng.choice(["series", "smoothing", "signals"]), source, [fn], bugs,
                 visible, hidden)


def _clamp(rng: random.Random) -> Repo:
    fn = rng.choice(["clamp", "limit", "bound", "clip_value", "constrain"])
    lo = rng.choice([0, 1, -1, 10, -10])
    hi = lo + rng.choice([9, 20, 50, 100, 255])
    hi_bad = rng.choice([hi - 1, hi + 1, hi * 2 + 5])
    source = _fill('''"""Keeping numbers inside a range."""


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


def _running_sum(rng: random.Random) -> Repo:
    fn = rng.choice(["running_total", "cumulative_sum", "prefix_sums", "running_sum", "accumulate"])
    source = _fill('''"""Running totals."""


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
    visible = [("eq", f"{fn}({_ints(rng, rng.randint(4, 6), 1, 20)})"),
               ("eq", f"{fn}({_ints(rng, 3, 1, 9)}, start={rng.randint(5, 50)})"),
               ("eq", f"{fn}([])")]
    hidden = [("eq", f"{fn}({_ints(rng, rng.randint(5, 8))})"), ("eq", f"{fn}([{rng.randint(1, 9)}])"),
              ("eq", f"{fn}({_ints(rng, 4)}, start={rng.randint(-30, -1)})"), ("eq", f"{fn}([], start=3)"),
              ("eq", f"{fn}({_ints(rng, 6, 1, 5)})")]
    return Repo("running_sum", rng.choice(["totals", "sums", "accounting"]), source,
                [fn], bugs, visible, hidden)


_WORDS = ["apple", "river", "stone", "light", "green", "house", "cloud", "train", "paper", "music",
          "table", "bread", "water", "night", "smile", "north", "chair", "plant", "storm", "glass"]


def _sentence(rng: random.Random, n: int) -> str:
    words = []
    for _ in range(n):
        w = rng.choice(_WORDS[:8])  # few distinct words, so that counts exceed 1
        w = w.capitalize() if rng.random() < 0.3 else w
        words.append(w + (rng.choice([",", ".", "!", ";"]) if rng.random() < 0.25 else ""))
    if rng.random() < 0.6:
        words.insert(rng.randint(1, len(words) - 1), rng.choice(["-", "--", "...", "!"]))
    return " ".join(words)


def _word_count(rng: random.Random) -> Repo:
    fn = rng.choice(["word_counts", "count_words", "word_frequencies", "tally_words"])
    source = _fill('''"""Counting words."""

import string


def $fn(text):
    """Count how often each word occurs in `text`; returns a dict word -> count.

    Words are compared in lower case, and punctuation around a word is ignored ("End." counts as
    "end"). Tokens made only of punctuation, such as "-", are not words.
    """
    counts = {}
    for raw in text.lower().split():
        word = raw.strip(string.punctuation)
        if not word:
            continue
        counts[word] = counts.get(word, 0) + 1
    return counts
''', fn=fn)
    bugs = [
        ("missing_edge_case",
         "        word = raw.strip(string.punctuation)\n        if not word:\n            continue\n",
         "        word = raw.strip(string.punctuation)\n"),
        ("wrong_default", "counts.get(word, 0) + 1", "counts.get(word, 1) + 1"),
        ("wrong_variable", "        counts[word] = counts.get(word, 0) + 1",
         "        counts[raw] = counts.get(raw, 0) + 1"),
    ]
    visible = [("eq", f"{fn}({_sentence(rng, rng.randint(6, 9))!r})"), ("eq", f"{fn}({'a - b, A.'!r})"),
               ("eq", f"{fn}('')")]
    hidden = [("eq", f"{fn}({_sentence(rng, rng.randint(8, 14))!r})") for _ in range(3)]
    hidden += [("eq", f"{fn}({'Stop. stop! -- STOP'!r})"), ("eq", f"{fn}({'one'!r})")]
    return Repo("word_count", rng.choice(["words", "text", "wordstats"]), source, [fn], bugs, visible, hidden)


def _median(rng: random.Random) -> Repo:
    fn = rng.choice(["median", "middle_value", "median_of", "find_median"])
    source = _fill('''"""Order statistics."""


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
            xs = _ints(rng, n)
            if xs != sorted(xs) and len(set(xs)) == n:
                return xs

    visible = [("eq", f"{fn}({unsorted(5)})"), ("eq", f"{fn}({unsorted(4)})"),
               ("raises", f"{fn}([])", "empty")]
    hidden = [("eq", f"{fn}({unsorted(7)})"), ("eq", f"{fn}({unsorted(6)})"),
              ("eq", f"{fn}([{rng.randint(1, 9)}])"),
              ("eq", f"{fn}({unsorted(2)})"), ("eq", f"{fn}({unsorted(3)})"),
              ("raises", f"{fn}([])", "empty")]
    return Repo("median", rng.choice(["stats", "statistics", "order"]), source, [fn], bugs, visible, hidden)


def _pagination(rng: random.Random) -> Repo:
    fn = rng.choice(["paginate", "get_page", "page_items", "slice_page"])
    count = rng.choice(["page_count", "count_pages", "num_pages", "total_pages"])
    n = rng.choice([3, 4, 5, 10, 20, 25])
    n_bad = rng.choice([m for m in (n - 1, n + 1, n * 2) if m != n])
    source = _fill('''"""Splitting a list into numbered pages."""


def $fn(items, page, per_page=$n):
    """Return the items on page number `page`, with `per_page` items per page; pages start at 1."""
    if page < 1:
        raise ValueError("pages are numbered from 1")
    start = (page - 1) * per_page
    return items[start:start + per_page]


def $count(n_items, per_page=$n):
    """Return how many pages `n_items` items fill, `per_page` per page (the last one may be partial)."""
    return (n_items + per_page - 1) // per_page
''', fn=fn, count=count, n=n)
    bugs = [
        ("off_by_one", "    start = (page - 1) * per_page", "    start = page * per_page"),
        ("wrong_default", f"def {fn}(items, page, per_page={n}):",
         f"def {fn}(items, page, per_page={n_bad}):"),
        ("off_by_one", "    return (n_items + per_page - 1) // per_page", "    return n_items // per_page"),
        ("wrong_operator", "    if page < 1:", "    if page < 0:"),
    ]
    total = rng.randint(3 * n + 1, 4 * n - 1)  # a partial last page
    visible = [("eq", f"{fn}(list(range({total})), 2)"), ("eq", f"{fn}(list('abcdefghij'), 1, 3)"),
               ("eq", f"{count}({total})"), ("raises", f"{fn}([1, 2], 0)", "numbered from 1")]
    hidden = [("eq", f"{fn}(list(range({total})), 1)"), ("eq", f"{fn}(list(range({total})), 4)"),
              ("eq", f"{fn}(list(range({total})), 9)"), ("eq", f"{fn}(list('abcdefg'), 3, 2)"),
              ("eq", f"{count}({n * 2})"), ("eq", f"{count}(0)"), ("eq", f"{count}({rng.randint(1, 40)}, 7)"),
              ("raises", f"{fn}([1, 2], 0)", "numbered from 1")]
    return Repo("pagination", rng.choice(["pages", "pagination", "paging"]), source, [fn, count], bugs,
                 visible, hidden)


def _palindrome_text(rng: random.Random, palindrome: bool) -> str:
    letters = "abcdefghilmnorstu"
    while True:
        half = "".join(rng.choice(letters) for _ in range(rng.randint(3, 6)))
        core = half + (rng.choice(letters) if rng.random() < 0.5 else "") + half[::-1]
        if not palindrome:
            core = "".join(rng.sample(core, len(core)))
            if core == core[::-1]:
                continue
        chars = [c.upper() if rng.random() < 0.3 else c for c in core]
        for _ in range(rng.randint(1, 3)):  # spaces and punctuation to ignore
            chars.insert(rng.randint(1, len(chars) - 1), rng.choice([" ", ", ", "! ", "-"]))
        return "".join(chars)


def _palindrome(rng: random.Random) -> Repo:
    fn = rng.choice(["is_palindrome", "reads_same_backwards", "palindrome_check", "is_mirror_text"])
    source = _fill('''"""Palindromes."""


def $fn(text):
    """Return True if `text` reads the same backwards, ignoring case, spaces and punctuation."""
    cleaned = [ch.lower() for ch in text if ch.isalnum()]
    left, right = 0, len(cleaned) - 1
    while left < right:
        if cleaned[left] != cleaned[right]:
            return False
        left += 1
        right -= 1
    return True
''', fn=fn)
    bugs = [
        ("off_by_one", "    left, right = 0, len(cleaned) - 1", "    left, right = 0, len(cleaned)"),
        ("wrong_operator", "        if cleaned[left] != cleaned[right]:",
         "        if cleaned[left] == cleaned[right]:"),
        ("missing_edge_case", "    cleaned = [ch.lower() for ch in text if ch.isalnum()]",
         "    cleaned = [ch for ch in text if ch.isalnum()]"),
        ("wrong_variable", "        if cleaned[left] != cleaned[right]:",
         "        if cleaned[left] != cleaned[left]:"),
    ]
    visible = [("eq", f"{fn}({_palindrome_text(rng, True)!r})"),
               ("eq", f"{fn}({_palindrome_text(rng, False)!r})"), ("eq", f"{fn}({'Never odd or even'!r})")]
    hidden = [("eq", f"{fn}({_palindrome_text(rng, True)!r})"),
              ("eq", f"{fn}({_palindrome_text(rng, True)!r})"),
              ("eq", f"{fn}({_palindrome_text(rng, False)!r})"),
              ("eq", f"{fn}({_palindrome_text(rng, False)!r})"),
              ("eq", f"{fn}({'Step on no pets'!r})"), ("eq", f"{fn}('')"), ("eq", f"{fn}({'ab'!r})")]
    return Repo("palindrome", rng.choice(["strings", "text", "wordplay"]), source,
                [fn], bugs, visible, hidden)


def _labels(rng: random.Random) -> Repo:
    fn = rng.choice(["label", "say", "call_out", "shout"])
    seq = rng.choice(["labels_up_to", "play", "sequence", "count_off"])
    a, b = rng.choice([(2, 3), (3, 5), (2, 5), (3, 7), (4, 5), (5, 7), (2, 7), (3, 4)])
    wa, wb = rng.sample(["Fizz", "Buzz", "Bang", "Pop", "Zap", "Ping", "Pong", "Whizz"], 2)
    source = _fill('''"""A counting game: multiples of $a and $b get words instead of numbers."""


def $fn(n):
    """Return "$wa$wb" if n is a multiple of both $a and $b, "$wa" if only of $a, "$wb" if only
    of $b, else the number itself as a string."""
    if n % $a == 0 and n % $b == 0:
        return "$wa$wb"
    if n % $a == 0:
        return "$wa"
    if n % $b == 0:
        return "$wb"
    return str(n)


def $seq(count):
    """Return the labels of 1, 2, ..., count."""
    return [$fn(n) for n in range(1, count + 1)]
''', fn=fn, seq=seq, a=a, b=b, wa=wa, wb=wb)
    bugs = [
        ("wrong_operator", f"    if n % {a} == 0 and n % {b} == 0:", f"    if n % {a} == 0 or n % {b} == 0:"),
        ("off_by_one", "range(1, count + 1)", "range(1, count)"),
        ("wrong_variable", f"    if n % {b} == 0:\n        return \"{wb}\"",
         f"    if n % {b} == 0:\n        return \"{wa}\""),
    ]
    lcm = a * b  # the pairs are coprime
    visible = [("eq", f"{fn}({a * b * rng.randint(1, 3)})"),
               ("eq", f"{fn}({b * rng.choice([1, 2]) * (a + 1)})"),
               ("eq", f"{seq}({rng.randint(lcm, lcm + 3)})")]
    hidden = [("eq", f"{fn}({a})"), ("eq", f"{fn}({b})"),
              ("eq", f"{fn}({lcm * rng.randint(2, 5)})"), ("eq", f"{fn}(1)"),
              ("eq", f"{seq}({rng.randint(lcm + 1, 2 * lcm + 2)})"), ("eq", f"{seq}(1)"), ("eq", f"{seq}(0)")]
    return Repo("labels", rng.choice(["game", "counting", "rules"]), source, [fn, seq], bugs, visible, hidden)


def _dedupe(rng: random.Random) -> Repo:
    fn = rng.choice(["dedupe", "unique", "remove_duplicates", "distinct", "first_occurrences"])
    source = _fill('''"""Removing repeated items."""


def $fn(items, key=None):
    """Return `items` without repeats, keeping the first occurrence of each and the original order.

    With `key`, two items count as repeats when `key(item)` is equal for both.
    """
    seen = set()
    result = []
    for item in items:
        marker = item if key is None else key(item)
        if marker in seen:
            continue
        seen.add(marker)
        result.append(item)
    return result
''', fn=fn)
    bugs = [
        ("wrong_variable", "        seen.add(marker)", "        seen.add(item)"),
        ("wrong_variable", "        result.append(item)", "        result.append(marker)"),
        ("wrong_operator", "        if marker in seen:", "        if marker not in seen:"),
        ("wrong_default", f"def {fn}(items, key=None):", f"def {fn}(items, key=str):"),
    ]
    word = rng.choice(_WORDS)
    cased = [word, word.upper(), word.capitalize(), word]
    rng.shuffle(cased)
    visible = [("eq", f"{fn}({_ints(rng, 8, 0, 5)})"),
               ("eq", f"{fn}({cased + [rng.choice(_WORDS)]}, key=str.lower)"),
               ("eq", f"{fn}([1, '1', {rng.randint(2, 9)}, 1])")]
    hidden = [("eq", f"{fn}({_ints(rng, 10, -3, 3)})"), ("eq", f"{fn}([])"),
              ("eq", f"{fn}({_ints(rng, 7, -5, 5)}, key=abs)"),
              ("eq", f"{fn}({rng.sample(_WORDS, 5) + ['x', 'yy']}, key=len)"),
              ("eq", f"{fn}([2, 2.0, '2', (2,)])")]
    return Repo("dedupe", rng.choice(["collections", "lists", "sequences"]), source,
                [fn], bugs, visible, hidden)


def _chunking(rng: random.Random) -> Repo:
    fn = rng.choice(["chunk", "batches", "split_every", "chunked", "group_in"])
    source = _fill('''"""Cutting a list into pieces."""


def $fn(items, size):
    """Split `items` into consecutive lists of `size` items; the last one may be shorter."""
    if size <= 0:
        raise ValueError("size must be positive")
    return [items[i:i + size] for i in range(0, len(items), size)]
''', fn=fn)
    bugs = [
        ("off_by_one", "items[i:i + size]", "items[i:i + size - 1]"),
        ("missing_edge_case", "range(0, len(items), size)", "range(0, len(items) - size + 1, size)"),
        ("wrong_operator", "    if size <= 0:", "    if size < 0:"),
    ]
    k = rng.randint(2, 4)
    visible = [("eq", f"{fn}(list(range({k * rng.randint(2, 3) + rng.randint(1, k - 1)})), {k})"),
               ("eq", f"{fn}({list(rng.choice(_WORDS))}, 2)"), ("raises", f"{fn}([1, 2], 0)", "positive")]
    hidden = [("eq", f"{fn}(list(range({k * 3})), {k})"), ("eq", f"{fn}([], 3)"), ("eq", f"{fn}([1, 2], 5)"),
              ("eq", f"{fn}(list(range({rng.randint(7, 12)})), 1)"),
              ("eq", f"{fn}({_ints(rng, rng.randint(7, 11))}, {k + 1})"),
              ("raises", f"{fn}([1], 0)", "positive")]
    return Repo("chunking", rng.choice(["batching", "lists", "chunks"]), source, [fn], bugs, visible, hidden)


def _percentage(rng: random.Random) -> Repo:
    fn = rng.choice(["percentage", "percent_of", "share_percent", "as_percent"])
    digits = rng.choice([1, 2])
    source = _fill('''"""Percentages."""


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


def _count_in_range(rng: random.Random) -> Repo:
    fn = rng.choice(["count_between", "count_in_range", "how_many_within", "tally_range"])
    source = _fill('''"""Counting values in a range."""


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
        xs = _ints(rng, rng.randint(6, 10), 0, 30)
        lo, hi = sorted(rng.sample(xs, 2))
        return f"{fn}({xs}, {lo}, {hi})"

    visible = [("eq", case()), ("eq", f"{fn}([1, 2, 3, 4, 5], 2, 4)")]
    hidden = [("eq", case()), ("eq", case()), ("eq", f"{fn}([], 0, 10)"), ("eq", f"{fn}([5, 5, 5], 5, 5)"),
              ("eq", f"{fn}([{rng.randint(20, 40)}], 0, 10)")]
    return Repo("count_in_range", rng.choice(["counting", "filters", "ranges"]), source,
                [fn], bugs, visible, hidden)


def _argmax(rng: random.Random) -> Repo:
    fn = rng.choice(["argmax", "index_of_max", "best_index", "position_of_largest"])
    source = _fill('''"""Finding the best element."""


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
        xs = _ints(rng, n, 0, 50)
        xs[position] = 60
        return xs

    n = rng.randint(5, 8)
    tie = _ints(rng, 6, 0, 40)
    i, j = sorted(rng.sample(range(6), 2))
    tie[i] = tie[j] = 45
    visible = [("eq", f"{fn}({with_max_at(n - 1, n)})"), ("eq", f"{fn}({tie})"), ("eq", f"{fn}([])")]
    hidden = [("eq", f"{fn}({with_max_at(rng.randint(1, 3), 6)})"), ("eq", f"{fn}({with_max_at(4, 5)})"),
              ("eq", f"{fn}([7, 7, 7])"), ("eq", f"{fn}([{rng.randint(-9, 9)}])"), ("eq", f"{fn}([])"),
              ("eq", f"{fn}([-5, -2, -9])")]
    return Repo("argmax", rng.choice(["search", "selection", "ranking"]), source, [fn], bugs, visible, hidden)


def _truncate(rng: random.Random) -> Repo:
    fn = rng.choice(["truncate", "shorten", "ellipsize", "clip_text"])
    n = rng.choice([10, 12, 15, 20])
    source = _fill('''"""Shortening text for display."""


def $fn(text, limit=$n, suffix="..."):
    """Return `text` unchanged if it has at most `limit` characters; otherwise cut it and append
    `suffix` so that the result, suffix included, is exactly `limit` characters long."""
    if len(text) <= limit:
        return text
    return text[:limit - len(suffix)] + suffix
''', fn=fn, n=n)
    bugs = [
        ("wrong_operator", "    if len(text) <= limit:", "    if len(text) < limit:"),
        ("off_by_one", "text[:limit - len(suffix)]", "text[:limit - len(suffix) + 1]"),
        ("wrong_default", f"limit={n},", f"limit={n + 5},"),
    ]

    def text(length: int) -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(length))

    visible = [("eq", f"{fn}({text(n + rng.randint(8, 20))!r})"), ("eq", f"{fn}({text(n)!r})"),
               ("eq", f"{fn}({text(9)!r}, 6)")]
    hidden = [("eq", f"{fn}({text(n + 1)!r})"), ("eq", f"{fn}({text(n - 1)!r})"),
              ("eq", f"{fn}({text(30)!r}, 8, '~')"),
              ("eq", f"{fn}({text(7)!r}, 7)"), ("eq", f"{fn}('')"), ("eq", f"{fn}({text(n + 6)!r})")]
    return Repo("truncate", rng.choice(["display", "text", "formatting"]), source,
                [fn], bugs, visible, hidden)


FAMILIES = [_moving_average, _clamp, _running_sum, _word_count, _median, _pagination, _palindrome, _labels,
            _dedupe, _chunking, _percentage, _count_in_range, _argmax, _truncate]
