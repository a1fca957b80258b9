"""Search-QA's task generator: a corpus of fictional people, cities and organisations, and questions.

`python -m course_lib.tasks --only search_qa` writes data/search_qa/{corpus,train,test}.jsonl. Names
are made of random syllables, so no model can know the answers. The environment (the search engine
and the verifier) is `course_lib.envs.search_qa`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import bm25s

from course_lib.envs.search_qa import CORPUS_FILE
from course_lib.tasks.files import write_jsonl

_SYLLABLES = ["al", "bar", "bel", "cor", "dan", "del", "dor", "el", "fen", "gar", "hal", "is", "jor", "kel",
              "kor", "lin", "lor", "mar", "mor", "nes", "nor", "or", "pel", "quin", "ras", "ren", "ros",
              "sil", "tam", "tor", "ul", "val", "ven", "vor", "wyn", "zel", "ka", "lo", "mi", "na", "ri",
              "sa", "te", "va", "do", "ne", "ro", "thi", "bri", "cas"]
_CITY_ENDINGS = ["port", "holt", "vik", "mere", "dale", "ford", "wick", "stead"]
_REGION_ENDINGS = ["ia", "land", "mark", "or"]
_ORG_KINDS = ["Guild", "Society", "Company", "Institute", "Academy", "Museum", "Bank", "Theatre", "Library",
              "Observatory"]

N_REGIONS, N_CITIES, N_PEOPLE, N_ORGS = 8, 40, 500, 250
TEST_FRACTION = 0.2  # share of question subjects (people, cities, organisations) held out for the test split

# kind -> (question template, hops). The subject fills {person}, {org} or {city}.
_QUESTIONS = {
    "person_city": ("In which city was {person} born?", 1),
    "person_year": ("In which year was {person} born?", 1),
    "person_region": ("In which region was {person} born?", 2),
    "org_founder": ("Who founded the {org}?", 1),
    "org_year": ("In which year was the {org} founded?", 1),
    "org_city": ("In which city was the {org} founded?", 1),
    "org_region": ("In which region was the {org} founded?", 2),
    "founder_year": ("In which year was the founder of the {org} born?", 2),
    "founder_city": ("In which city was the founder of the {org} born?", 2),
    "city_region": ("In which region is {city}?", 1),
}


class _Words:
    """Fresh made-up words, each used once across the whole corpus.

    Unique words keep retrieval unambiguous: a name token matches only the entity it names and the
    sentences that mention that entity. Words that are English stopwords (which the index drops) or
    words of the sentence templates are never produced.
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        template_words = {"born", "city", "region", "founded", "founder", "year", "which", "who"}
        self.used: set[str] = (set(bm25s.stopwords.STOPWORDS_EN) | template_words
                               | {k.lower() for k in _ORG_KINDS})

    def new(self, syllables: tuple[int, int], ending: list[str] | None = None) -> str:
        while True:
            word = "".join(self.rng.choice(_SYLLABLES) for _ in range(self.rng.randint(*syllables)))
            if ending:
                word += self.rng.choice(ending)
            if len(word) >= 4 and word not in self.used:
                self.used.add(word)
                return word.capitalize()


def make_corpus(seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The corpus (docs with id, kind, title, text) and the entity tables the questions are built from."""
    rng = random.Random(seed)
    words = _Words(rng)
    regions = [words.new((2, 2), _REGION_ENDINGS) for _ in range(N_REGIONS)]
    cities = [{"id": f"city-{i:03d}", "name": words.new((1, 2), _CITY_ENDINGS),
               "region": regions[i % N_REGIONS]}
              for i in range(N_CITIES)]
    people = []
    for i in range(N_PEOPLE):
        name = f"{words.new((1, 2))} {words.new((2, 3))}"
        people.append({"id": f"person-{i:03d}", "name": name, "city": rng.choice(cities)["name"],
                       "year": rng.randint(1780, 1950)})
    # Each organisation has its own founder, so "the founder of X" names exactly one person.
    founders = rng.sample(people, N_ORGS)
    orgs = []
    for i, founder in enumerate(founders):
        orgs.append({"id": f"org-{i:03d}", "name": f"{words.new((2, 2))} {rng.choice(_ORG_KINDS)}",
                     "founder": founder["name"], "founder_id": founder["id"],
                     "year": founder["year"] + rng.randint(22, 60), "city": rng.choice(cities)["name"]})

    docs = [{"id": c["id"], "kind": "city", "title": c["name"],
             "text": f"{c['name']} is a city in the region of {c['region']}."} for c in cities]
    docs += [{"id": p["id"], "kind": "person", "title": p["name"],
              "text": f"{p['name']} was born in {p['city']} in {p['year']}."} for p in people]
    docs += [{"id": o["id"], "kind": "organisation", "title": o["name"],
              "text": f"The {o['name']} was founded by {o['founder']} in {o['year']} in {o['city']}."}
             for o in orgs]
    return docs, {"cities": cities, "people": people, "orgs": orgs}


def make_questions(tables: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Every question the tables support, as (subject id, task without id) pairs."""
    city = {c["name"]: c for c in tables["cities"]}
    person = {p["id"]: p for p in tables["people"]}
    questions = []

    def add(kind: str, subject: str, answer: Any, chain: list[str],
            evidence: list[str], **names: str) -> None:
        template, hops = _QUESTIONS[kind]
        questions.append((subject, {"question": template.format(**names), "answer": str(answer), "hops": hops,
                                    "chain": chain, "evidence": evidence, "kind": kind}))

    for p in tables["people"]:
        c = city[p["city"]]
        add("person_city", p["id"], p["city"], [p["name"]], [p["id"]], person=p["name"])
        add("person_year", p["id"], p["year"], [p["name"]], [p["id"]], person=p["name"])
        add("person_region", p["id"], c["region"], [p["name"], c["name"]],
            [p["id"], c["id"]], person=p["name"])
    for o in tables["orgs"]:
        c, f = city[o["city"]], person[o["founder_id"]]
        add("org_founder", o["id"], o["founder"], [o["name"]], [o["id"]], org=o["name"])
        add("org_year", o["id"], o["year"], [o["name"]], [o["id"]], org=o["name"])
        add("org_city", o["id"], o["city"], [o["name"]], [o["id"]], org=o["name"])
        add("org_region", o["id"], c["region"], [o["name"], c["name"]], [o["id"], c["id"]], org=o["name"])
        add("founder_year", o["id"], f["year"], [o["name"], f["name"]], [o["id"], f["id"]], org=o["name"])
        add("founder_city", o["id"], f["city"], [o["name"], f["name"]], [o["id"], f["id"]], org=o["name"])
    for c in tables["cities"]:
        add("city_region", c["id"], c["region"], [c["name"]], [c["id"]], city=c["name"])
    return questions


def make_splits(seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """(corpus documents, {"train": questions, "test": questions}).

    The split is by subject: every question about a held-out person, city or organisation goes to
    the test split, so the splits share no question (the corpus is shared, as a search engine is).
    Facts are shared: a two-hop test question about a held-out organisation ends on its founder's
    birthplace or birth year, which train questions about that person also ask. Of the 579 test questions,
    213 of 239 two-hop and 71 of 340 one-hop ones end on a (document, answer) pair that some train
    question also ends on. Measured on the demo's RL model (run of 2026-11-29, greedy, all 239 two-hop test
    questions): 187 of those 213 and 20 of the other 26 answered correctly, and every correct answer came
    after two searches; no answer was recalled without looking it up.
    """
    docs, tables = make_corpus(seed)
    rng = random.Random(seed + 1)
    subjects = [e["id"] for table in tables.values() for e in table]
    test_subjects = {s for s in subjects if rng.random() < TEST_FRACTION}
    questions = make_questions(tables)
    rng.shuffle(questions)  # mixed kinds in file order, so load_tasks(limit=n) gets a bit of everything
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for subject, task in questions:
        split = "test" if subject in test_subjects else "train"
        splits[split].append({"id": f"search_qa-{split}-{len(splits[split]):04d}", **task})
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
