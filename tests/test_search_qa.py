"""Search-QA: the data, the search engine, the verifier and the expert."""

from __future__ import annotations

import json
import os

import pytest

from course_lib.envs import load_tasks, make_env
from course_lib.envs.search_qa import load_index, normalize_answer
from course_lib.protocol import format_answer, format_tool_call


@pytest.fixture(scope="module")
def train() -> list[dict]:
    return load_tasks("search_qa", "train")


@pytest.fixture(scope="module")
def test() -> list[dict]:
    return load_tasks("search_qa", "test")


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict]:
    return {d["id"]: d for d in load_index().docs}


def run_expert(env, task: dict) -> tuple[float, int]:
    env.reset(task)
    while True:
        result = env.step(env.expert_action())
        if result.done:
            return result.reward, env.turn


def test_task_sets_have_the_promised_sizes_and_fields(train, test, corpus):
    assert len(train) >= 1000 and len(test) >= 200
    for task in train + test:
        assert {"id", "question", "answer", "hops", "chain", "evidence"} <= set(task)
        assert task["hops"] in (1, 2) and len(task["chain"]) == len(task["evidence"]) == task["hops"]
        # the answer is written in the last evidence sentence, and every chain entity in its own sentence
        assert task["answer"] in corpus[task["evidence"][-1]]["text"]
        for query, doc_id in zip(task["chain"], task["evidence"]):
            assert query in corpus[doc_id]["text"]
    assert {t["hops"] for t in test} == {1, 2}
    assert len({t["id"] for t in train + test}) == len(train) + len(test)


def test_splits_share_no_question(train, test):
    assert not {t["question"] for t in train} & {t["question"] for t in test}


def test_a_person_sentence_never_names_an_organisation(corpus):
    # otherwise "the founder of X" would be answerable from the first search alone
    kinds = ("Guild", "Society", "Company", "Institute", "Academy")
    assert not any(k in d["text"] for d in corpus.values() if d["kind"] == "person" for k in kinds)


@pytest.mark.parametrize("split", ["train", "test"])
def test_top3_contains_the_evidence_of_every_expert_query(split):
    index = load_index()
    tasks = load_tasks("search_qa", split)
    pairs = [(q, e) for t in tasks for q, e in zip(t["chain"], t["evidence"])]
    missed = [q for q, e in pairs if e not in [d["id"] for d in index.search(q, k=3)]]
    # The README states 100% for both splits: every miss is named.
    assert not missed, (f"{len(missed)}/{len(pairs)} expert queries miss their evidence in the top 3: "
                        f"{missed[:5]}")


def test_expert_solves_the_test_tasks(test):
    env = make_env("search_qa")
    outcomes = [run_expert(env, task) for task in test]
    failed = [task["id"] for task, (r, _) in zip(test, outcomes) if r != 1.0]
    assert not failed, f"the expert failed {len(failed)} of {len(test)} test tasks: {failed[:10]}"
    # one search per hop, then the answer
    assert all(turns == task["hops"] + 1 for task, (r, turns) in zip(test, outcomes) if r == 1.0)


def test_expert_gives_up_instead_of_answering_without_evidence(test):
    env = make_env("search_qa")
    task = dict(test[0], evidence=["no-such-doc"] * test[0]["hops"])
    env.reset(task)
    assert '"search"' in env.expert_action()
    env.step(env.expert_action())
    assert env.expert_action() == format_answer("unknown")


def test_search_results_are_short_numbered_sentences(test):
    env = make_env("search_qa")
    task = next(t for t in test if t["hops"] == 2)
    assert env.reset(task) == task["question"]
    result = env.step(format_tool_call("search", {"query": task["chain"][0]}))
    lines = result.observation.splitlines()
    assert 1 <= len(lines) <= 3 and all(line.startswith(f"{i}. ") for i, line in enumerate(lines, 1))
    assert all(line.count(".") == 2 for line in lines)  # "1." and one sentence
    assert env.state_key() == result.observation


def test_verifier_correct_wrong_and_formatting(test):
    env = make_env("search_qa")
    task = next(t for t in test if t["kind"] == "org_founder")
    for answer, reward in [(task["answer"], 1.0), (f"  {task['answer'].upper()}. ", 1.0),
                           (f"The {task['answer']}!", 1.0), ("Nobody Knows", 0.0),
                           (task["answer"] + " Jr", 0.0)]:
        env.reset(task)
        result = env.step(format_answer(answer))
        assert result.done and result.reward == reward, answer


def test_malformed_action_is_an_observation_and_the_episode_goes_on(test):
    env = make_env("search_qa")
    task = test[0]
    env.reset(task)
    for bad in ["I think it is Quenport.",
                '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',
                '<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>',
                format_tool_call("search", {"query": "   "})]:
        result = env.step(bad)
        assert result.observation.startswith("Error:") and not result.done and result.reward == 0.0, bad
    result = env.step(format_answer(task["answer"]))  # the turn limit (5) is not reached yet
    assert result.done and result.reward == 1.0


def test_unknown_words_give_no_results_not_an_error(test):
    env = make_env("search_qa")
    env.reset(test[0])
    result = env.step(format_tool_call("search", {"query": "zzzq the"}))
    assert result.observation.startswith("No results") and not result.done


def test_turn_limit_ends_the_episode_with_zero(test):
    env = make_env("search_qa", max_turns=2)
    env.reset(test[0])
    assert not env.step(format_tool_call("search", {"query": "x"})).done
    result = env.step(format_tool_call("search", {"query": "x"}))
    assert result.done and result.reward == 0.0 and result.info["turn_limit"]


def test_a_long_query_is_not_echoed_whole(test):
    env = make_env("search_qa")
    env.reset(test[0])
    result = env.step(format_tool_call("search", {"query": "zzzq" * 50_000}))  # 200,000 characters
    assert result.observation.startswith("No results for 'zzzq") and "…" in result.observation
    assert len(result.observation) < 200


def test_the_index_is_built_once_per_process():
    assert make_env("search_qa").index is make_env("search_qa").index


def test_a_regenerated_corpus_is_indexed_anew(tmp_path):
    path = tmp_path / "corpus.jsonl"

    def write(text: str, mtime_ns: int) -> None:
        path.write_text(json.dumps({"id": "d0", "text": text}) + "\n", encoding="utf-8")
        os.utime(path, ns=(mtime_ns, mtime_ns))

    write("Orvane is a city.", 1_000_000_000_000_000_000)
    first = load_index(path)
    assert load_index(path) is first  # unchanged file: the cached index
    write("Salvik is a city.", 1_000_000_001_000_000_000)  # same size, newer
    assert [d["text"] for d in load_index(path).search("Salvik")] == ["Salvik is a city."]
    write("Brumholt is a city.", 1_000_000_001_000_000_000)  # same mtime, another size
    assert [d["text"] for d in load_index(path).search("Brumholt")] == ["Brumholt is a city."]


@pytest.mark.parametrize("raw, normalised", [
    ("Quenport", "quenport"),
    ("  Quenport. ", "quenport"),
    ("The Orrin Guild", "orrin guild"),
    ("the  orrin\tguild!", "orrin guild"),
    ("An Ilsa-Varrow", "ilsavarrow"),
    ("1874.", "1874"),
    ("Theatre", "theatre"),  # an article only as a whole word
    ("", ""),
])
def test_normalize_answer(raw, normalised):
    assert normalize_answer(raw) == normalised


def test_equal_scores_rank_in_corpus_order():
    """Sentences of one template and length score the same; they come back in corpus order, on every machine
    (bm25s's own top-k left such ties in an order that differed between two machines' CPUs)."""
    from course_lib.envs.search_qa import SearchIndex

    docs = [{"id": str(i), "text": f"{name} was born in Jorvik in 18{i}4."}
            for i, name in enumerate(["Ada Brun", "Cel Dorr", "Eli Fenn", "Gus Hale", "Ira Jost"])]
    index = SearchIndex(docs[::-1] + [{"id": "x", "text": "Jorvik is a city."}])
    assert [d["id"] for d in index.search("born Jorvik")] == ["4", "3", "2"]
    assert [d["id"] for d in index.search("born Jorvik", k=5)] == ["4", "3", "2", "1", "0"]
