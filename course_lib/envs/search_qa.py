"""Search-QA: answer questions about fictional entities with a local search engine.

The corpus describes people, cities and organisations whose names are made of random syllables, so
no model can know the answers: it has to search. One short sentence per entity::

    Ilsa Varrow was born in Quenport in 1874.                          (person)
    Quenport is a city in the region of Valmeria.                      (city)
    The Orrin Guild was founded by Ilsa Varrow in 1902 in Quenport.    (organisation)

Questions are one-hop ("In which city was Ilsa Varrow born?": search the person, read the city) or
two-hop ("In which year was the founder of the Orrin Guild born?": search the guild, read the
founder's name, search the founder, read the year). A person's sentence never names what they
founded, so a two-hop question cannot be answered from one search.

The tool `search(query)` returns the top-3 sentences ranked by BM25 (the `bm25s` package), one
numbered line each. The reward is 1 when the normalised final answer equals the normalised reference
(lowercase, no punctuation, no articles, single spaces), else 0. The state key is the default one,
the raw current observation (the question, then each search result), which GiGPO's similarity mode
groups across rollouts.

Task fields: id, question, answer, hops (1 or 2), chain (the expert's search queries, entity names)
and evidence (the corpus ids of the sentences those queries must find, in the same order).
"""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path
from typing import Any

import bm25s

from course_lib.data import write_jsonl
from course_lib.envs import data_dir
from course_lib.envs.base import Environment, ToolError
from course_lib.protocol import Tool, format_answer, format_tool_call, quoted

CORPUS_FILE = "corpus.jsonl"
TOP_K = 3

# ----- generating the corpus and the questions -------------------------------------------------

_SYLLABLES = ["al", "bar", "bel", "cor", "dan", "del", "dor", "el", "fen", "gar", "hal", "is", "jor", "kel",
              "kor", "lin", "lor", "mar", "mor", "nes", "nor", "or", "pel", "quin", "ras", "ren", "ros", "sil",
              "tam", "tor", "ul", "val", "ven", "vor", "wyn", "zel", "ka", "lo", "mi", "na", "ri", "sa", "te",
              "va", "do", "ne", "ro", "thi", "bri", "cas"]
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
        self.used: set[str] = set(bm25s.stopwords.STOPWORDS_EN) | template_words | {k.lower() for k in _ORG_KINDS}

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
    cities = [{"id": f"city-{i:03d}", "name": words.new((1, 2), _CITY_ENDINGS), "region": regions[i % N_REGIONS]}
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
              "text": f"The {o['name']} was founded by {o['founder']} in {o['year']} in {o['city']}."} for o in orgs]
    return docs, {"cities": cities, "people": people, "orgs": orgs}


def make_questions(tables: dict[str, list[dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Every question the tables support, as (subject id, task without id) pairs."""
    city = {c["name"]: c for c in tables["cities"]}
    person = {p["id"]: p for p in tables["people"]}
    questions = []

    def add(kind: str, subject: str, answer: Any, chain: list[str], evidence: list[str], **names: str) -> None:
        template, hops = _QUESTIONS[kind]
        questions.append((subject, {"question": template.format(**names), "answer": str(answer), "hops": hops,
                                    "chain": chain, "evidence": evidence, "kind": kind}))

    for p in tables["people"]:
        c = city[p["city"]]
        add("person_city", p["id"], p["city"], [p["name"]], [p["id"]], person=p["name"])
        add("person_year", p["id"], p["year"], [p["name"]], [p["id"]], person=p["name"])
        add("person_region", p["id"], c["region"], [p["name"], c["name"]], [p["id"], c["id"]], person=p["name"])
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


def generate(out_dir: Path, seed: int = 0) -> None:
    """Write corpus.jsonl, train.jsonl and test.jsonl into `out_dir`.

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
    write_jsonl(out_dir / CORPUS_FILE, docs)
    for split, tasks in splits.items():
        write_jsonl(out_dir / f"{split}.jsonl", tasks)


# ----- the search engine -------------------------------------------------------------------------


class SearchIndex:
    """BM25 over the corpus sentences (bm25s, English stopwords, no stemming)."""

    def __init__(self, docs: list[dict[str, Any]]):
        self.docs = docs
        self.tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
        self.retriever = bm25s.BM25()
        corpus_tokens = self.tokenizer.tokenize([d["text"] for d in docs], show_progress=False)
        self.retriever.index(corpus_tokens, show_progress=False)

    def search(self, query: str, k: int = TOP_K) -> list[dict[str, Any]]:
        """The best `k` docs for `query`, best first; docs sharing no word with the query are left out."""
        # update_vocab=False: words the corpus never uses map to the empty token and match nothing.
        query_tokens = self.tokenizer.tokenize([query], update_vocab=False, show_progress=False)
        if not any(query_tokens[0]):
            return []
        ids, scores = self.retriever.retrieve(query_tokens, k=min(k, len(self.docs)), show_progress=False)
        return [self.docs[i] for i, score in zip(ids[0], scores[0]) if score > 0]


# Many environments are built per training step (one per rollout): index each corpus once per process.
# Keyed by path, (mtime, size) of the file it was built from: a corpus regenerated in the same process
# (a notebook re-running the generator) is indexed anew instead of answering from the old one.
_INDEXES: dict[Path, tuple[tuple[int, int], SearchIndex]] = {}


def default_corpus_path() -> Path:
    return data_dir() / "search_qa" / CORPUS_FILE


def load_index(corpus_path: Path | None = None) -> SearchIndex:
    """The search index of a corpus file, built on first use and cached for the process until the file changes."""
    path = Path(corpus_path or default_corpus_path()).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; generate it with `python -m course_lib.data --only search_qa`")
    stat = path.stat()
    version = (stat.st_mtime_ns, stat.st_size)
    if path not in _INDEXES or _INDEXES[path][0] != version:
        with path.open(encoding="utf-8") as f:
            _INDEXES[path] = (version, SearchIndex([json.loads(line) for line in f if line.strip()]))
    return _INDEXES[path][1]


def render_results(query: str, docs: list[dict[str, Any]]) -> str:
    if not docs:
        return f"No results for {quoted(query)}. Search for the name of a person, a city or an organisation."
    return "\n".join(f"{i}. {d['text']}" for i, d in enumerate(docs, 1))


# ----- the verifier ------------------------------------------------------------------------------

_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD's rule)."""
    text = text.lower().translate(_PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


# ----- the environment ---------------------------------------------------------------------------


class SearchQAEnv(Environment):
    name = "search_qa"
    instructions = ("Answer the question about fictional people, cities and organisations. "
                    "You do not know them: search first, then answer with the name or year only.")
    tools = [Tool("search", "Search the encyclopedia; returns the 3 best matching sentences.",
                  {"query": ("string", "a name, e.g. of a person, a city or an organisation")})]

    def __init__(self, max_turns: int = 5, corpus_path: Path | None = None):
        # 5 turns: a two-hop question needs 3 (two searches and the answer), plus room for one retry.
        super().__init__(max_turns=max_turns)
        self.index = load_index(corpus_path)
        self.seen: set[str] = set()  # ids of the docs shown to the model this episode
        self.queries: list[str] = []

    def setup(self, task: dict[str, Any]) -> str:
        self.seen, self.queries = set(), []
        return task["question"]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        query = arguments["query"].strip()
        if not query:
            raise ToolError("the query is empty; search for a name, e.g. of a person, a city or an organisation")
        docs = self.index.search(query)
        self.queries.append(query)
        self.seen.update(d["id"] for d in docs)
        return render_results(query, docs)

    def score(self) -> float:
        if self.final_answer is None:
            return 0.0
        return float(normalize_answer(self.final_answer) == normalize_answer(self.task["answer"]))

    def expert_action(self) -> str:
        """Search each entity of the chain in turn, then answer.

        The expert only uses what the model could have read: it searches hop k+1's entity only once
        hop k's evidence was shown, and answers only once the last evidence was shown. If a search
        misses its evidence it gives up ("unknown") rather than answer from knowledge it should not
        have, so its demonstrations never teach guessing.
        """
        for query, doc_id in zip(self.task["chain"], self.task["evidence"]):
            if doc_id in self.seen:
                continue
            if query in self.queries:  # searched already and the evidence did not come up
                return format_answer("unknown")
            return format_tool_call("search", {"query": query})
        return format_answer(self.task["answer"])
