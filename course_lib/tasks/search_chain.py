"""search_chain's task generator: invented teacher lineages, and questions that climb k generations up one.

`python -m course_lib.tasks --only search_chain` writes data/search_chain/{corpus,train,test}.jsonl. The
corpus holds one sentence per person, naming where they were born and whom they studied under::

    Alda Morven was born in Quenholt and studied under Sela Korvane.
    Sela Korvane was born in Ostvik and had no teacher.                (the root of a lineage)

A lineage is a line of `GENERATIONS` teachers from its root, with side lines of students branching off
it (`BRANCH_RATE`, `BRANCH_LENGTH`), so a person has at most two students. A question of k hops
(`HOPS`) starts at a person k or more generations below the root and asks for the teacher k
generations up; the answer needs k searches, each for the name the last one returned, since a
person's sentence names their teacher and never their students (the line can only be climbed).

Names are an invented first name and an invented last name, made of shared pieces so that many look alike
(Alda Morven, Alra Morvel, Alda Korven). Retrieval still works by construction: no sentence pairs one
person's first name with another's last name into a third person's name, so the only sentences holding
both words of a name are that person's own and their students' (two at most), and a search for a full
name shows its person's sentence in the top 3 (the tests check it for every chain). And a person shares
neither name with anyone up their line, so that search never shows the sentence of anyone above them:
k hops take exactly k searches.

The split is by lineage: test questions climb only the `N_TEST_LINEAGES` held-out lineages, so no
person of a test chain is in any train chain (the corpus is shared, as a search engine is). The
environment (search engine, verifier, expert, state key) is `course_lib.envs.search_chain`.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import bm25s

from course_lib.envs.search_qa import CORPUS_FILE
from course_lib.tasks.files import write_jsonl

HOPS = (2, 4, 6, 8, 10, 12)  # generations a question climbs
N_LINEAGES, N_TEST_LINEAGES = 100, 20
GENERATIONS = (13, 16)  # people on a lineage's main line, root included (at least max(HOPS) + 1)
BRANCH_RATE = 0.35  # chance that a person of the main line has a second student, who starts a side line
BRANCH_LENGTH = (1, 5)  # people on a side line
QUESTIONS = {"train": 200, "test": 40}  # per number of hops
N_FIRST_NAMES, N_LAST_NAMES, N_CITIES = 48, 700, 30

# Pieces of names, invented for this corpus; names that share a piece look alike.
_FIRST_STARTS = ["Al", "Bri", "Cae", "Da", "El", "Fio", "Ga", "Hal", "Ili", "Jo", "Ka", "Le", "Mi", "Na",
                 "Or", "Pe", "Ro", "Sa", "Te", "Ul", "Ve", "Wy", "Ya", "Ze"]
_FIRST_ENDS = ["da", "ra", "na", "ric", "wen", "lin", "mar", "vin", "sa", "tor"]
_LAST_STEMS = ["Mor", "Kor", "Vel", "Bel", "Tor", "Dor", "Mar", "Var", "Sel", "Ren", "Ash", "Bram", "Cor",
               "Fen", "Gar", "Hol", "Kes", "Lan", "Nor", "Orm", "Pel", "Quil", "Rav", "Stor", "Thal", "Wen",
               "Yor", "Zan"]
_LAST_MIDDLES = ["", "a", "e", "i", "o"]
_LAST_ENDS = ["ven", "vel", "wick", "ton", "ric", "mont", "dale", "ford", "grave", "ley", "mere", "rick",
              "by", "ther", "well", "worth", "den", "nard"]
_CITY_STEMS = ["Quen", "Sal", "Brum", "Ost", "Lir", "Tam", "Vesk", "Ard", "Cael", "Dun", "Emb", "Frost",
               "Gly", "Hask", "Ivel", "Jarn", "Kolm", "Lud", "Mest", "Nyr"]
_CITY_ENDS = ["port", "holt", "vik", "haven", "stad", "burg", "wyn", "gard"]


def _words(rng: random.Random, n: int, pieces: list[list[str]], taken: set[str]) -> list[str]:
    """`n` distinct words, each one piece from every list of `pieces`, none of them (lowercased) in
    `taken`; the new ones are added to it, so first names, last names and cities never share a word."""
    options = ["".join(parts) for parts in itertools.product(*pieces)]
    options = [w for w in options if w.lower() not in taken]
    words = rng.sample(options, n)
    taken.update(w.lower() for w in words)
    return words


def document(name: str, city: str, teacher: str | None) -> str:
    """A person's sentence: where they were born and whom they studied under (never whom they taught)."""
    if teacher is None:
        return f"{name} was born in {city} and had no teacher."
    return f"{name} was born in {city} and studied under {teacher}."


def question(name: str, hops: int) -> str:
    """The question of a chain that starts at `name` and climbs `hops` generations of teachers."""
    return f"Follow {name}'s line of teachers back {hops} generations: who is at the end?"


def make_lineages(rng: random.Random) -> list[list[dict[str, Any]]]:
    """The lineages' people without names: each a dict with its generation and the index of its teacher in
    the lineage's list (None for the root), teachers listed before their students."""
    lineages = []
    for _ in range(N_LINEAGES):
        people: list[dict[str, Any]] = [{"generation": 0, "teacher": None}]
        for g in range(1, rng.randint(*GENERATIONS)):  # the main line: person g - 1 teaches person g
            people.append({"generation": g, "teacher": g - 1})
        for spine in range(len(people) - 1):  # the last of the main line has no student
            if rng.random() < BRANCH_RATE:
                teacher = spine
                for _ in range(rng.randint(*BRANCH_LENGTH)):
                    people.append({"generation": people[teacher]["generation"] + 1, "teacher": teacher})
                    teacher = len(people) - 1
        lineages.append(people)
    return lineages


def name_people(rng: random.Random, lineages: list[list[dict[str, Any]]]) -> None:
    """Give every person a unique (first, last) name and a city, in place.

    A person never shares a first or a last name with their teacher, and the two names crossed over in a
    sentence (the person's first name with the teacher's last, and the other way round) are nobody's
    name: so a sentence holds both words of a name only when it is that person's own or one of their
    students'. Nor does a person share a first or a last name with anyone further up their line: so a
    search for a person's name never shows the sentence of anyone above them, and climbing k generations
    takes k searches.
    """
    # the sentences' own words, and the words the index drops
    taken = {"born", "studied", "under", "had", "teacher"} | set(bm25s.stopwords.STOPWORDS_EN)
    firsts = _words(rng, N_FIRST_NAMES, [_FIRST_STARTS, _FIRST_ENDS], taken)
    lasts = _words(rng, N_LAST_NAMES, [_LAST_STEMS, _LAST_MIDDLES, _LAST_ENDS], taken)
    cities = _words(rng, N_CITIES, [_CITY_STEMS, _CITY_ENDS], taken)
    names: set[tuple[str, str]] = set()
    crossed: set[tuple[str, str]] = set()  # word pairs that some sentence holds and no one may be named
    for people in lineages:
        for person in people:
            above = _teachers(people, person)  # names of the teacher, the teacher's teacher, ...
            while True:
                name = (rng.choice(firsts), rng.choice(lasts))
                if name in names or name in crossed:
                    continue
                if not above:
                    break
                teacher = above[0]
                cross = {(name[0], teacher[1]), (teacher[0], name[1])}
                if all(name[0] != a[0] and name[1] != a[1] for a in above) and not cross & names:
                    crossed |= cross
                    break
            names.add(name)
            person["name"], person["city"] = name, rng.choice(cities)


def _teachers(people: list[dict[str, Any]], person: dict[str, Any]) -> list[tuple[str, str]]:
    """The names of everyone up `person`'s line, their teacher first, the lineage's root last."""
    names = []
    while person["teacher"] is not None:
        person = people[person["teacher"]]
        names.append(person["name"])
    return names


def make_corpus(seed: int = 0) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The corpus (docs with id, title, text; in a shuffled order, so ids say nothing of the lineages) and
    the lineages, each person with their name, city, generation, teacher index and doc id."""
    rng = random.Random(seed)
    lineages = make_lineages(rng)
    name_people(rng, lineages)
    everyone = [person for people in lineages for person in people]
    for i, j in enumerate(rng.sample(range(len(everyone)), len(everyone))):
        everyone[j]["id"] = f"person-{i:04d}"
    docs = []
    for people in lineages:
        for person in people:
            teacher = people[person["teacher"]] if person["teacher"] is not None else None
            text = document(" ".join(person["name"]), person["city"],
                            " ".join(teacher["name"]) if teacher else None)
            docs.append({"id": person["id"], "title": " ".join(person["name"]), "text": text})
    return sorted(docs, key=lambda d: d["id"]), lineages


def chain_task(people: list[dict[str, Any]], start: int, hops: int) -> dict[str, Any]:
    """The question (without id) that climbs `hops` generations from person `start` of a lineage."""
    climbed = [people[start]]
    for _ in range(hops):
        climbed.append(people[climbed[-1]["teacher"]])
    chain = [" ".join(p["name"]) for p in climbed]
    return {"question": question(chain[0], hops), "answer": chain[-1], "hops": hops, "chain": chain,
            "evidence": [p["id"] for p in climbed[:-1]], "horizon": hops + 2}


def make_splits(seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """(corpus documents, {"train": questions, "test": questions}).

    Per number of hops k, QUESTIONS[split] questions from distinct start people, drawn among the people
    of the split's lineages who are k or more generations below their root; the hops mixed in file order,
    so load_tasks(limit=n) gets a bit of every k.
    """
    docs, lineages = make_corpus(seed)
    rng = random.Random(seed + 1)
    test_lineages = set(rng.sample(range(N_LINEAGES), N_TEST_LINEAGES))
    splits: dict[str, list[dict[str, Any]]] = {}
    for split, n in QUESTIONS.items():
        held_out = split == "test"
        mine = [people for i, people in enumerate(lineages) if (i in test_lineages) == held_out]
        tasks = []
        for hops in HOPS:
            starts = [(people, i) for people in mine for i, p in enumerate(people) if p["generation"] >= hops]
            tasks += [chain_task(people, i, hops) for people, i in rng.sample(starts, n)]
        rng.shuffle(tasks)
        splits[split] = [{"id": f"search_chain-{split}-{i:04d}", **task} for i, task in enumerate(tasks)]
    return docs, splits


def make_tasks(n: int, seed: int = 0, split: str = "train",
               seen: set[str] | None = None) -> list[dict[str, Any]]:
    """The first `n` questions of `split` whose text is not in `seen` (the new ones are added to it)."""
    seen = set() if seen is None else seen
    tasks = [t for t in make_splits(seed)[1][split] if t["question"] not in seen][:n]
    seen.update(t["question"] for t in tasks)
    return tasks


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write corpus.jsonl, train.jsonl and test.jsonl into `out_dir` (see `make_splits`)."""
    docs, splits = make_splits(seed)
    write_jsonl(Path(out_dir) / CORPUS_FILE, docs)
    for split, tasks in splits.items():
        write_jsonl(Path(out_dir) / f"{split}.jsonl", tasks)
