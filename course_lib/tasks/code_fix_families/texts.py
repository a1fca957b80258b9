"""Code-fix families about text and lists: word count, pagination, palindrome, fizzbuzz-like labels,
dedupe, chunking, truncation (see `course_lib.tasks.code_fix_families.repo` for what a family is)."""

from __future__ import annotations

import random

from course_lib.tasks.code_fix_families.repo import Repo, fill, ints

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


def word_count(rng: random.Random) -> Repo:
    fn = rng.choice(["word_counts", "count_words", "word_frequencies", "tally_words"])
    source = fill('''"""Counting words."""

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


def pagination(rng: random.Random) -> Repo:
    fn = rng.choice(["paginate", "get_page", "page_items", "slice_page"])
    count = rng.choice(["page_count", "count_pages", "num_pages", "total_pages"])
    n = rng.choice([3, 4, 5, 10, 20, 25])
    n_bad = rng.choice([m for m in (n - 1, n + 1, n * 2) if m != n])
    source = fill('''"""Splitting a list into numbered pages."""


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


def palindrome(rng: random.Random) -> Repo:
    fn = rng.choice(["is_palindrome", "reads_same_backwards", "palindrome_check", "is_mirror_text"])
    source = fill('''"""Palindromes."""


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


def labels(rng: random.Random) -> Repo:
    fn = rng.choice(["label", "say", "call_out", "shout"])
    seq = rng.choice(["labels_up_to", "play", "sequence", "count_off"])
    a, b = rng.choice([(2, 3), (3, 5), (2, 5), (3, 7), (4, 5), (5, 7), (2, 7), (3, 4)])
    wa, wb = rng.sample(["Fizz", "Buzz", "Bang", "Pop", "Zap", "Ping", "Pong", "Whizz"], 2)
    source = fill('''"""A counting game: multiples of $a and $b get words instead of numbers."""


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


def dedupe(rng: random.Random) -> Repo:
    fn = rng.choice(["dedupe", "unique", "remove_duplicates", "distinct", "first_occurrences"])
    source = fill('''"""Removing repeated items."""


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
    visible = [("eq", f"{fn}({ints(rng, 8, 0, 5)})"),
               ("eq", f"{fn}({cased + [rng.choice(_WORDS)]}, key=str.lower)"),
               ("eq", f"{fn}([1, '1', {rng.randint(2, 9)}, 1])")]
    hidden = [("eq", f"{fn}({ints(rng, 10, -3, 3)})"), ("eq", f"{fn}([])"),
              ("eq", f"{fn}({ints(rng, 7, -5, 5)}, key=abs)"),
              ("eq", f"{fn}({rng.sample(_WORDS, 5) + ['x', 'yy']}, key=len)"),
              ("eq", f"{fn}([2, 2.0, '2', (2,)])")]
    return Repo("dedupe", rng.choice(["collections", "lists", "sequences"]), source,
                [fn], bugs, visible, hidden)


def chunking(rng: random.Random) -> Repo:
    fn = rng.choice(["chunk", "batches", "split_every", "chunked", "group_in"])
    source = fill('''"""Cutting a list into pieces."""


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
              ("eq", f"{fn}({ints(rng, rng.randint(7, 11))}, {k + 1})"),
              ("raises", f"{fn}([1], 0)", "positive")]
    return Repo("chunking", rng.choice(["batching", "lists", "chunks"]), source, [fn], bugs, visible, hidden)


def truncate(rng: random.Random) -> Repo:
    fn = rng.choice(["truncate", "shorten", "ellipsize", "clip_text"])
    n = rng.choice([10, 12, 15, 20])
    source = fill('''"""Shortening text for display."""


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
