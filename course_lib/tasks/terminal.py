"""The terminal environment's task generator: ten families of everyday shell chores.

Moving files by pattern, extracting a CSV column, fixing permissions, counting matches, renaming,
replacing spaces, deduplicating, cleaning up, replacing text, concatenating in order. Each task
holds its files (and their modes), the instruction, a check (a short Python program, run against the
final directory; exit 0 = solved) and the expert's shell commands. `python -m course_lib.tasks
--only terminal` writes data/terminal/{train,test}.jsonl. The environment is `course_lib.envs.terminal`.

The two splits differ in content (instruction, files, modes), not in instructions: four families have
one or two instructions in all (fixing permissions, spaces to underscores, cleaning up, counting
matches), so 36 of the 50 test tasks repeat the instruction and the solution command of some train
task on other files. Success on the test split measures generalisation over files, not over instructions.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from course_lib.tasks.files import write_jsonl

N_TRAIN, N_TEST = 150, 50

# ----- task families ---------------------------------------------------------------------------
# Each family builds one task from a random generator: the files, the instruction, the check
# (a Python program run with the final directory as its working directory; exit 0 = solved) and
# the expert's shell commands.

_WORDS = ["alpha", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
          "kelp", "lumen", "maple", "nectar", "onyx", "pebble", "quartz", "raven", "saffron", "tundra",
          "umber", "violet", "willow", "yarrow", "zephyr", "acorn", "basalt", "cedar", "dune", "falcon"]
_FIRST = ["Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jonas", "Kaia",
          "Lior", "Mele", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tamar"]
_LAST = ["Abara", "Brandt", "Costa", "Dahl", "Eze", "Fontaine", "Greer", "Holm", "Ito", "Jansen", "Kovac",
         "Lund", "Moreau", "Novak", "Okafor", "Petrov", "Quist", "Rahman", "Silva", "Tanaka"]
_CITIES = ["Orvane", "Tessaly", "Brumholt", "Quenport", "Salvik", "Drennor"]
_DOMAINS = ["example.org", "mail.test", "corp.example"]
_MESSAGES = ["request served", "cache refreshed", "user logged in", "retrying after error",
             "disk usage at 71%",
             "connection reset by peer", "job finished", "config reloaded", "slow query detected",
             "timeout talking to upstream", "worker started", "queue drained"]

_PRELUDE = '''import os, stat
from pathlib import Path

def content(path):
    p = Path(path)
    return p.read_text() if p.is_file() and not p.is_symlink() else None

def lines(path):
    text = content(path)
    assert text is not None, f"{path} does not exist"
    return [line.strip() for line in text.splitlines() if line.strip()]

def present(path):  # a link counts, even one that points nowhere or at itself (Path.exists() says False)
    return os.path.lexists(path)

def unchanged(files):
    for path, text in files.items():
        assert content(path) == text, f"{path} is missing or was changed"
'''


def _check(**values: Any) -> str:
    """The check program: the prelude, the task's values as Python literals, then the family's body."""
    body = values.pop("body")
    constants = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return f"{_PRELUDE}\n{constants}\n{body}"


def _note(rng: random.Random, title: str) -> str:
    return f"{title}\n" + "".join(f"{rng.choice(_MESSAGES)} ({rng.randint(1, 999)})\n"
                                  for _ in range(rng.randint(1, 3)))


def _organise(rng: random.Random) -> dict[str, Any]:
    ext, folder = rng.choice([("log", "logs"), ("csv", "data"), ("txt", "notes"), ("json", "configs"),
                              ("md", "docs"), ("png", "images")])
    others = [e for e in ("log", "csv", "txt", "json", "md", "py", "sh") if e != ext]
    words = rng.sample(_WORDS, rng.randint(6, 9))
    n_moved = rng.randint(2, 4)
    moved = {f"{w}.{ext}": _note(rng, w) for w in words[:n_moved]}
    kept = {f"{w}.{rng.choice(others)}": _note(rng, w) for w in words[n_moved:]}
    if rng.random() < 0.5:  # a trap for `mv *{ext}*`: it does not end in .{ext}
        kept[f"old.{ext}.bak"] = _note(rng, "backup")
    files = dict(sorted({**moved, **kept}.items()))
    return {
        "instruction": f"Move every file whose name ends in .{ext} into a new directory named {folder}. "
                       "Leave all other files where they are.",
        "files": files,
        "check": _check(FOLDER=folder, MOVED=moved, KEPT=kept, body=(
            'assert Path(FOLDER).is_dir(), f"{FOLDER}/ does not exist"\n'
            "for name, text in MOVED.items():\n"
            '    assert not present(name), f"{name} is still in the working directory"\n'
            '    assert content(Path(FOLDER, name)) == text, f"{FOLDER}/{name} is missing or changed"\n'
            "unchanged(KEPT)\n")),
        "solution": [f"mkdir -p {folder} && mv *.{ext} {folder}/"],
    }


def _extract_column(rng: random.Random) -> dict[str, Any]:
    people = []
    for first, last in zip(rng.sample(_FIRST, rng.randint(6, 10)), rng.sample(_LAST, 10)):
        email = f"{first}.{last}@{rng.choice(_DOMAINS)}".lower()
        people.append({"name": f"{first} {last}", "email": email, "city": rng.choice(_CITIES),
                       "age": str(rng.randint(19, 78))})
    columns = rng.sample(["name", "email", "city", "age"], 4)
    csv = ",".join(columns) + "\n" + "".join(",".join(p[c] for c in columns) + "\n" for p in people)
    email_col = columns.index("email") + 1
    if rng.random() < 0.5:
        city = rng.choice([p["city"] for p in people])
        expected = sorted(p["email"] for p in people if p["city"] == city)
        who = f"the people who live in {city}"
        awk_filter = f'NR > 1 && ${columns.index("city") + 1} == "{city}"'
    else:
        expected = sorted(p["email"] for p in people)
        who, awk_filter = "all people", "NR > 1"
    return {
        "instruction": f"people.csv is a CSV file with a header row. Write the email addresses of {who} "
                       "to a new file emails.txt, one per line, sorted alphabetically.",
        "files": {"people.csv": csv},
        "check": _check(EXPECTED=expected, CSV=csv, body=(
            'assert lines("emails.txt") == EXPECTED, "emails.txt does not hold the right '
            'addresses in order"\nunchanged({"people.csv": CSV})\n')),
        "solution": [f"awk -F, '{awk_filter} {{print ${email_col}}}' people.csv "
                     "| LC_ALL=C sort > emails.txt"],
    }


def _permissions(rng: random.Random) -> dict[str, Any]:
    words = rng.sample(_WORDS, rng.randint(5, 8))
    n_scripts = rng.randint(2, 4)
    scripts = {f"{w}.sh": f"#!/bin/sh\necho {w}\n" for w in words[:n_scripts]}
    if rng.random() < 0.5:  # one script in a subdirectory, so `chmod *.sh` is not enough
        name = scripts.popitem()[0]
        scripts[f"tools/{name}"] = f"#!/bin/sh\necho {name}\n"
    data = {f"{w}.{rng.choice(['txt', 'csv', 'md'])}": _note(rng, w) for w in words[n_scripts:]}
    modes = {path: rng.choice(["0644", "0664", "0666", "0646"]) for path in [*scripts, *data]}
    modes[rng.choice(list(data))] = "0666"  # at least one file writable by everyone
    files = dict(sorted({**scripts, **data}.items()))
    return {
        "instruction": "Make every .sh script (also in subdirectories) executable by its owner, and remove "
                       "write permission for others from every file. Do not make any other file executable.",
        "files": files,
        "modes": dict(sorted(modes.items())),
        "check": _check(SCRIPTS=sorted(scripts), DATA=sorted(data), FILES=files, body=(
            "unchanged(FILES)\n"
            "for path in SCRIPTS:\n"
            '    assert os.stat(path).st_mode & stat.S_IXUSR, f"{path} is not executable by its owner"\n'
            "for path in FILES:\n"
            '    assert not os.stat(path).st_mode & stat.S_IWOTH, f"{path} is still writable by others"\n'
            "for path in DATA:\n"
            '    assert not os.stat(path).st_mode & 0o111, f"{path} should not be executable"\n')),
        "solution": ["find . -type f -name '*.sh' -exec chmod u+x {} + "
                     "&& find . -type f -exec chmod o-w {} +"],
    }


def _count_matches(rng: random.Random) -> dict[str, Any]:
    word = rng.choice(["ERROR", "WARN"])
    files: dict[str, str] = {}
    counts: dict[str, int] = {}
    for w in rng.sample(_WORDS, rng.randint(3, 5)):
        levels = [rng.choice(["INFO", "INFO", "DEBUG", "WARN", "ERROR"]) for _ in range(rng.randint(4, 12))]
        files[f"{w}.log"] = "".join(
            f"2024-05-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} {level} "
            f"{rng.choice(_MESSAGES)}\n" for level in levels)
        counts[f"{w}.log"] = sum(word in line for line in files[f"{w}.log"].splitlines())
    files["notes.txt"] = f"{word} lines in this file do not count\n{word}: not a log\n"
    files = dict(sorted(files.items()))
    expected = [[name, str(counts[name])] for name in sorted(counts)]
    return {
        "instruction": f"For each .log file in the working directory, count the lines that contain {word} "
                       "(case-sensitive). Write the counts to a new file summary.txt, one line per log file "
                       "in the form `<file name> <count>` (for example `app.log 3`), sorted by file name.",
        "files": files,
        "check": _check(EXPECTED=expected, body=(
            'assert [line.split() for line in lines("summary.txt")] == EXPECTED, '
            '"summary.txt has wrong counts"\n')),
        "solution": [f'for f in *.log; do echo "$f $(grep -c {word} "$f")"; done | '
                     'LC_ALL=C sort > summary.txt'],
    }


def _rename_extension(rng: random.Random) -> dict[str, Any]:
    old, new = rng.choice([("jpeg", "jpg"), ("htm", "html"), ("text", "txt"),
                           ("yml", "yaml"), ("markdown", "md")])
    words = rng.sample(_WORDS, rng.randint(5, 8))
    n_renamed = rng.randint(2, 4)
    renamed = {f"{w}.{old}": _note(rng, w) for w in words[:n_renamed]}
    kept = {f"{w}.{rng.choice(['csv', 'py', 'log'])}": _note(rng, w) for w in words[n_renamed:]}
    return {
        "instruction": f"Rename every file whose name ends in .{old} so that it ends in .{new} instead "
                       f"(`{words[0]}.{old}` becomes `{words[0]}.{new}`). Keep the contents; "
                       "leave other files alone.",
        "files": dict(sorted({**renamed, **kept}.items())),
        "check": _check(RENAMED={f"{name[: -len(old)]}{new}": text for name, text in renamed.items()},
                        OLD=sorted(renamed), KEPT=kept, body=(
            "unchanged(RENAMED)\n"
            "for name in OLD:\n"
            '    assert not present(name), f"{name} still exists"\n'
            "unchanged(KEPT)\n")),
        "solution": [f'for f in *.{old}; do mv -- "$f" "${{f%.{old}}}.{new}"; done'],
    }


def _spaces_to_underscores(rng: random.Random) -> dict[str, Any]:
    words = rng.sample(_WORDS, 11)
    spaced = {}
    for i in range(rng.randint(2, 3)):  # names from words[0:9], each word used once
        parts = words[3 * i: 3 * i + rng.randint(2, 3)]
        spaced[" ".join(parts) + rng.choice([".txt", ".pdf", ".csv"])] = _note(rng, parts[0])
    kept = {f"{w}.txt": _note(rng, w) for w in words[9:]}
    return {
        "instruction": "Some file names contain spaces. Rename those files, replacing every space with an "
                       "underscore (`my old file.txt` becomes `my_old_file.txt`). Keep the contents.",
        "files": dict(sorted({**spaced, **kept}.items())),
        "check": _check(RENAMED={name.replace(" ", "_"): text for name, text in spaced.items()},
                        OLD=sorted(spaced), KEPT=kept, body=(
            "unchanged(RENAMED)\n"
            "for name in OLD:\n"
            '    assert not present(name), f"{name!r} still exists"\n'
            "unchanged(KEPT)\n")),
        "solution": ["for f in *' '*; do mv -- \"$f\" \"${f// /_}\"; done"],
    }


def _dedupe(rng: random.Random) -> dict[str, Any]:
    name, make = rng.choice([
        ("urls.txt", lambda w: f"https://{w}.example.org/{rng.randint(1, 99)}"),
        ("contacts.txt", lambda w: f"{w}@mail.test"),
        ("hosts.txt", lambda w: f"{w}-{rng.randint(1, 9)}.internal"),
        ("tags.txt", lambda w: w),
    ])
    unique = [make(w) for w in rng.sample(_WORDS, rng.randint(5, 9))]
    lines = list(unique)
    for _ in range(rng.randint(3, 8)):  # duplicates, each after its first occurrence
        line = rng.choice(unique)
        lines.insert(rng.randint(lines.index(line) + 1, len(lines)), line)
    return {
        "instruction": f"{name} contains duplicate lines. Remove the duplicates from {name} itself, keeping "
                       "the first occurrence of each line and the original order.",
        "files": {name: "\n".join(lines) + "\n"},
        "check": _check(NAME=name, EXPECTED=unique, body=(
            'text = content(NAME)\n'
            'assert text is not None, f"{NAME} is missing"\n'
            'assert text.splitlines() == EXPECTED, f"{NAME} does not hold each line once, in '
            'the original order"\n')),
        "solution": [f"awk '!seen[$0]++' {name} > {name}.new && mv {name}.new {name}"],
    }


def _cleanup(rng: random.Random) -> dict[str, Any]:
    folders = ["", "src", "docs", "build", "src/utils"]
    words = rng.sample(_WORDS, 10)
    kept, junk = {}, {}
    n_junk = rng.randint(3, 5)
    for i, w in enumerate(words):
        folder = rng.choice(folders)
        path = f"{folder}/{w}" if folder else w
        if i < n_junk:
            junk[path + rng.choice([".tmp", ".txt~", ".py~", ".log.tmp"])] = _note(rng, w)
        else:
            kept[path + rng.choice([".txt", ".py", ".md", ".tmp.txt"])] = _note(rng, w)
    return {
        "instruction": "Delete every file whose name ends in .tmp or ~, in the working directory and all "
                       "its subdirectories. Keep all other files.",
        "files": dict(sorted({**kept, **junk}.items())),
        "check": _check(JUNK=sorted(junk), KEPT=kept, body=(
            "for path in JUNK:\n"
            '    assert not present(path), f"{path} still exists"\n'
            "unchanged(KEPT)\n")),
        "solution": ["find . -type f \\( -name '*.tmp' -o -name '*~' \\) -delete"],
    }


def _replace_text(rng: random.Random) -> dict[str, Any]:
    a, b = rng.sample(_WORDS, 2)
    old, new = f"{a}.db.internal", f"{b}.db.internal"
    configs = {}
    for w in rng.sample([x for x in _WORDS if x not in (a, b)], rng.randint(2, 4)):
        configs[f"{w}.conf"] = (f"[{w}]\nhost = {old}\nport = {rng.randint(1024, 9999)}\n"
                                + (f"backup_host = {old}\n" if rng.random() < 0.5 else "")
                                + f"timeout = {rng.randint(5, 60)}\n")
    others = {"README.md": f"The database moved from {old} to {new} in May.\n",
              "notes.txt": f"Do not edit: history mentions {old}.\n"}
    sed_old = old.replace(".", r"\.")
    return {
        "instruction": f"The server {old} has been renamed {new}. Replace every occurrence of {old} with "
                       f"{new} in all .conf files in the working directory. Leave the other files unchanged.",
        "files": dict(sorted({**configs, **others}.items())),
        "check": _check(EXPECTED={name: text.replace(old, new) for name, text in configs.items()},
                        KEPT=others, body="unchanged(EXPECTED)\nunchanged(KEPT)\n"),
        "solution": [f"sed -i 's/{sed_old}/{new}/g' *.conf"],
    }


def _concatenate(rng: random.Random) -> dict[str, Any]:
    prefix = rng.choice(["chapter_", "part", "section-"])
    n = rng.randint(10, 14)  # from 10 on, name order (1, 10, 11, 2, ...) is not chapter order
    chapters = {f"{prefix}{i}.txt": _note(rng, f"{prefix}{i}") for i in range(1, n + 1)}
    return {
        "instruction": f"Concatenate {prefix}1.txt to {prefix}{n}.txt into a new file book.txt, in numeric "
                       f"order ({prefix}1.txt, {prefix}2.txt, ..., {prefix}{n}.txt).",
        "files": dict(sorted(chapters.items())),
        "check": _check(EXPECTED="".join(chapters.values()), CHAPTERS=chapters, body=(
            'assert content("book.txt") == EXPECTED, "book.txt is missing or not the chapters in order"\n'
            "unchanged(CHAPTERS)\n")),
        "solution": [f"for i in $(seq 1 {n}); do cat {prefix}$i.txt; done > book.txt"],
    }


FAMILIES = {
    "organise": _organise,
    "extract_column": _extract_column,
    "permissions": _permissions,
    "count_matches": _count_matches,
    "rename_extension": _rename_extension,
    "spaces_to_underscores": _spaces_to_underscores,
    "dedupe": _dedupe,
    "cleanup": _cleanup,
    "replace_text": _replace_text,
    "concatenate": _concatenate,
}


def _draw(n: int, rng: random.Random, split: str, seen: set[str]) -> list[dict[str, Any]]:
    """`n` tasks, the families in turn; a task whose content is in `seen` is drawn again."""
    tasks = []
    while len(tasks) < n:
        family = list(FAMILIES)[len(tasks) % len(FAMILIES)]
        task = FAMILIES[family](rng)
        signature = json.dumps([task["instruction"], task["files"], task.get("modes")], sort_keys=True)
        if signature in seen:
            continue
        seen.add(signature)
        tasks.append({"id": f"terminal-{split}-{len(tasks):03d}", "family": family, "modes": {}, **task})
    return tasks


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """`n` tasks of `split`. Both splits come from one random stream, the test tasks after the
    `N_TRAIN` training ones (drawn, and added to `seen`, first): the same seed gives the shipped files."""
    rng = random.Random(seed)
    seen = set() if seen is None else seen
    if split == "test":
        _draw(N_TRAIN, rng, "train", seen)
    return _draw(n, rng, split, seen)


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write train.jsonl (150 tasks) and test.jsonl (50 tasks) to `out_dir`; same seed, same bytes.

    No (instruction, files, modes) is in both splits.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        write_jsonl(Path(out_dir) / f"{split}.jsonl", _draw(n, rng, split, seen))
