"""search_chain: the lineage corpus and its questions, the environment (real BM25 index), the expert, the
state key, the two turn-reward rules and the shoot-out settings. No model is loaded."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from course_lib.credit import step_group_sizes
from course_lib.envs import ENVIRONMENTS, data_dir, load_tasks, make_env
from course_lib.envs.search_chain import SearchChainEnv
from course_lib.protocol import format_answer, format_tool_call
from course_lib.rewards import BONUS, PROCESS_PENALTY, chain_progress_turn_rewards, novelty_turn_rewards
from course_lib.tasks import compare_trees, filter_tasks
from course_lib.tasks import search_chain as generator
from course_lib.trajectory import Step, Trajectory
from course_lib.warm_starts import CHAIN_HOPS, warm_start_options

SENTENCE = re.compile(r"(?P<name>\w+ \w+) was born in (?P<city>\w+) and "
                      r"(?:studied under (?P<teacher>\w+ \w+)|had no teacher)\.")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[dict]]:
    return {split: load_tasks("search_chain", split) for split in ("train", "test")}


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict]:
    return {d["id"]: d for d in make_env("search_chain").index.docs}


def search(name: str) -> str:
    return format_tool_call("search", {"query": name})


def play(task: dict, actions: list[str], **options) -> tuple[SearchChainEnv, Trajectory]:
    """Play `actions` in a fresh environment, recorded as a hand-built Trajectory (no tokens: the turn-reward
    rules read only each step's action, observation and info)."""
    env = make_env("search_chain", **options)
    env.reset(task)
    trajectory = Trajectory(task_id=task["id"], group_id="g", traj_id="t", messages=[], prompt_ids=[])
    for action in actions:
        anchor = env.state_key()
        result = env.step(action)
        trajectory.steps.append(Step(action_ids=[], action_text=action, logprobs=[], anchor=anchor,
                                     observation_text=result.observation, reward=result.reward,
                                     done=result.done, info=result.info))
        if result.done:
            trajectory.reward = result.reward
            break
    return env, trajectory


def expert_actions(task: dict) -> list[str]:
    return [search(name) for name in task["chain"][:-1]] + [format_answer(task["answer"])]


def stranger(task: dict, tasks: list[dict]) -> str:
    """The start person of another question whose name shares no word with any name of `task`'s chain: a
    search for them shows none of the chain's sentences."""
    words = {w for name in task["chain"] for w in name.split()}
    return next(t["chain"][0] for t in tasks if not words & set(t["chain"][0].split()))


# ----- the generator ---------------------------------------------------------------------------------------


def test_the_generator_is_seeded_and_wrote_the_committed_files(tmp_path):
    assert generator.make_splits(0) == generator.make_splits(0)
    assert generator.make_splits(1)[1]["train"] != generator.make_splits(0)[1]["train"]
    generator.generate(tmp_path / "search_chain", seed=0)
    assert compare_trees(tmp_path / "search_chain", data_dir() / "search_chain") == []
    size = sum(p.stat().st_size for p in (data_dir() / "search_chain").iterdir())
    assert size < 2_000_000  # small enough to commit


def test_tasks_have_their_fields_and_counts(splits, corpus):
    for split, tasks in splits.items():
        for hops in generator.HOPS:
            assert len(filter_tasks(tasks, {"hops": hops})) == generator.QUESTIONS[split]
        for task in tasks:
            assert set(task) == {"id", "question", "answer", "hops", "chain", "evidence", "horizon"}
            assert task["id"].startswith(f"search_chain-{split}-")
            k = task["hops"]
            assert len(task["chain"]) == k + 1 and len(task["evidence"]) == k and task["horizon"] == k + 2
            assert task["answer"] == task["chain"][-1] and len(set(task["chain"])) == k + 1
            assert task["question"] == generator.question(task["chain"][0], k)
            # evidence[i] is chain[i]'s sentence, and it names chain[i + 1] as the teacher
            for i, doc_id in enumerate(task["evidence"]):
                parsed = SENTENCE.fullmatch(corpus[doc_id]["text"])
                assert parsed["name"] == task["chain"][i] and parsed["teacher"] == task["chain"][i + 1]
    ids = [t["id"] for tasks in splits.values() for t in tasks]
    assert len(set(ids)) == len(ids)


def test_train_and_test_share_no_person_of_any_chain(splits):
    people = {split: {name for t in tasks for name in t["chain"]} for split, tasks in splits.items()}
    assert not people["train"] & people["test"]
    assert not {t["question"] for t in splits["train"]} & {t["question"] for t in splits["test"]}


def test_names_are_unique_and_a_sentence_never_names_the_students(corpus):
    parsed = {doc_id: SENTENCE.fullmatch(d["text"]) for doc_id, d in corpus.items()}
    assert all(parsed.values()), "every sentence has the one form"
    names = [p["name"] for p in parsed.values()]
    assert len(set(names)) == len(names) == len(corpus)
    assert all(corpus[doc_id]["title"] == p["name"] for doc_id, p in parsed.items())
    students: dict[str, list[str]] = {}
    for p in parsed.values():
        if p["teacher"]:
            students.setdefault(p["teacher"], []).append(p["name"])
    assert max(len(s) for s in students.values()) == 2  # side lines branch off: at most two students
    for p in parsed.values():
        text = p.string
        assert not any(student in text for student in students.get(p["name"], [])), text
        # nor does it share a word with them: the line can only be climbed, never walked down
        words = set(p["name"].split())
        assert all(not words & set(s.split()) for s in students.get(p["name"], []))


# ----- the environment, its expert and its verifier ---------------------------------------------------------


def test_the_table_builds_it_with_the_tasks_horizon_as_turn_limit(splits):
    assert ENVIRONMENTS["search_chain"].generator == "course_lib.tasks.search_chain"
    env = make_env("search_chain")
    task = filter_tasks(splits["test"], {"hops": 6})[0]
    assert env.reset(task) == task["question"] and env.max_turns == 8
    assert make_env("search_chain", max_turns=3).index is env.index  # search_qa's per-process index cache
    assert "teacher" in env.system_prompt() and "- search:" in env.system_prompt()


@pytest.mark.parametrize("hops", generator.HOPS)
def test_every_expert_query_shows_its_sentence_in_the_top_3(splits, hops):
    index = make_env("search_chain").index
    tasks = filter_tasks(splits["train"] + splits["test"], {"hops": hops})
    missed = [(q, e) for t in tasks for q, e in zip(t["chain"], t["evidence"])
              if e not in [d["id"] for d in index.search(q)]]
    assert not missed, f"{len(missed)} expert queries miss their sentence: {missed[:5]}"


@pytest.mark.parametrize("hops", generator.HOPS)
def test_the_expert_solves_every_task_in_k_searches_and_an_answer(splits, hops):
    env = make_env("search_chain")
    for task in filter_tasks(splits["train"] + splits["test"], {"hops": hops}):
        env.reset(task)
        actions, depths = [], []
        while not env.done:
            actions.append(env.expert_action())
            result = env.step(actions[-1])
            depths.append(result.info["chain_depth"])
        assert result.reward == 1.0 and actions == expert_actions(task), task["id"]
        assert depths == list(range(1, hops + 1)) + [hops]  # one hop per search


def test_the_expert_gives_up_when_a_search_misses_its_sentence(splits):
    task = dict(splits["test"][0], evidence=["no-such-doc"] * splits["test"][0]["hops"])
    env = make_env("search_chain")
    env.reset(task)
    env.step(env.expert_action())
    assert env.expert_action() == format_answer("unknown")


def test_only_the_chains_last_person_is_right(splits):
    task = filter_tasks(splits["test"], {"hops": 4})[0]
    answers = [(task["answer"], 1.0), (f" the {task['answer'].upper()}. ", 1.0), (task["chain"][-2], 0.0),
               (task["chain"][0], 0.0), (task["answer"].split()[0], 0.0), ("unknown", 0.0)]
    for answer, reward in answers:
        _, trajectory = play(task, [search(n) for n in task["chain"][:-1]] + [format_answer(answer)])
        assert trajectory.reward == reward, answer


def test_a_malformed_call_is_an_observation_and_changes_no_state(splits):
    task = filter_tasks(splits["test"], {"hops": 2})[0]
    env = make_env("search_chain", max_turns=8)
    env.reset(task)
    start = env.state_key()
    for bad in ["It is Alda Morven.", '<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>',
                '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', search("  ")]:
        result = env.step(bad)
        assert result.observation.startswith("Error:") and not result.done and result.reward == 0.0, bad
        assert result.info["chain_depth"] == 0 and result.info["docs_shown"] == []
        assert env.state_key() == start
    result = env.step(search("zzzq"))
    assert result.observation == "No results for 'zzzq'. Search for the full name of a person."
    assert not result.done
    for action in expert_actions(task):  # the episode goes on: turns 6 to 8
        result = env.step(action)
    assert result.done and result.reward == 1.0


def test_the_turn_limit_is_the_horizon_unless_given(splits):
    task = filter_tasks(splits["test"], {"hops": 2})[0]
    env, trajectory = play(task, [search("zzzq")] * 10)
    assert trajectory.num_turns == task["horizon"] == 4 and trajectory.steps[-1].info["turn_limit"]
    env, trajectory = play(task, [search("zzzq")] * 5 + expert_actions(task), max_turns=8)
    assert trajectory.num_turns == 8 and trajectory.reward == 1.0


def test_the_state_key_recurs_across_rollouts_and_advances_with_the_depth(splits):
    task = filter_tasks(splits["test"], {"hops": 6})[0]
    chain = task["chain"]
    # the expert, and a rollout that wanders off to another lineage and repeats a search on the way
    _, direct = play(task, expert_actions(task))
    detour = [search(stranger(task, splits["train"])), search(chain[0]), search(chain[0])]
    _, wandering = play(task, detour + expert_actions(task)[1:], max_turns=10)
    assert [s.anchor for s in direct.steps] == [(task["id"], name) for name in chain]
    assert [s.anchor for s in wandering.steps] == ([(task["id"], chain[0])] * 2 + [(task["id"], chain[1])] * 2
                                                   + [(task["id"], name) for name in chain[2:]])
    assert direct.reward == wandering.reward == 1.0
    # GiGPO's exact step groups: the two rollouts share every state of the chain
    anchors = [s.anchor for t in (direct, wandering) for s in t.steps]
    sizes = step_group_sizes(anchors, ["g"] * len(anchors))
    assert len(sizes) == len(chain) and sum(sizes) == len(anchors) and min(sizes) >= 2


# ----- the turn-reward rules --------------------------------------------------------------------------------


def test_the_expert_earns_both_bonuses_on_every_search(splits):
    task = filter_tasks(splits["test"], {"hops": 4})[0]
    _, expert = play(task, expert_actions(task))
    assert chain_progress_turn_rewards(expert) == pytest.approx([BONUS] * 4 + [0.0])
    assert novelty_turn_rewards(expert) == pytest.approx([BONUS] * 4 + [0.0])
    assert chain_progress_turn_rewards(expert, bonus=0.5) == pytest.approx([0.5] * 4 + [0.0])


def test_novelty_pays_a_search_off_the_chain_and_chain_progress_does_not(splits):
    task = filter_tasks(splits["test"], {"hops": 2})[0]
    first, second = task["chain"][:2]
    actions = [search(stranger(task, splits["train"])), search(first), search(first), "not a tool call",
               search(second), format_answer(task["answer"])]
    _, trajectory = play(task, actions, max_turns=6)
    assert trajectory.reward == 1.0
    assert [s.info["chain_depth"] for s in trajectory.steps] == [0, 1, 1, 1, 2, 2]
    assert novelty_turn_rewards(trajectory) == pytest.approx(
        [BONUS, BONUS, 0.0, PROCESS_PENALTY, BONUS, 0.0])
    assert chain_progress_turn_rewards(trajectory) == pytest.approx(
        [0.0, BONUS, 0.0, PROCESS_PENALTY, BONUS, 0.0])


def test_the_rules_read_the_info_by_hand_and_refuse_another_environments_trajectory():
    def step(depth: int, shown: list[str]) -> Step:
        return Step(action_ids=[], action_text="", logprobs=[], observation_text="1. ...",
                    info={"action_kind": "tool_call", "chain_depth": depth, "docs_shown": shown})

    trajectory = Trajectory("t", "g", "t#0", [], [], steps=[step(1, ["a", "b"]), step(1, ["c"]),
                                                            step(2, ["a", "b"]), step(2, [])])
    assert chain_progress_turn_rewards(trajectory) == pytest.approx([BONUS, 0.0, BONUS, 0.0])
    assert novelty_turn_rewards(trajectory) == pytest.approx([BONUS, BONUS, 0.0, 0.0])
    gridworld = Trajectory("t", "g", "t#0", [], [], steps=[Step([], "", [], info={"turn": 1})])
    for rule in (chain_progress_turn_rewards, novelty_turn_rewards):
        with pytest.raises(ValueError, match="search_chain trajectories only"):
            rule(gridworld)


# ----- the warm start and the shoot-out settings ------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_the_warm_start_demonstrates_the_rl_hops_within_its_turn_limit(fast):
    options = warm_start_options("search_chain", fast)
    if fast:
        assert options["task_filter"] == {"hops": 2} and options["max_turns"] >= 3
        return
    hops = [t["hops"] for t in options["tasks"]]
    assert set(hops) == set(CHAIN_HOPS) and all(hops.count(k) == 80 for k in CHAIN_HOPS)
    assert options["n_demos"] == len(options["tasks"]) == 240 and options["max_turns"] >= max(CHAIN_HOPS) + 1
    assert all(t["id"].startswith("search_chain-train-") for t in options["tasks"])
    assert options["steps"] * options["batch_size"] == 2 * options["n_demos"]  # two passes


def test_the_shootout_has_search_chain_settings(monkeypatch):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "credit_shootout.py"
    spec = importlib.util.spec_from_file_location("credit_shootout", script)
    shootout = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "credit_shootout", shootout)
    spec.loader.exec_module(shootout)
    from course_lib import rewards

    for k in (2, 6, 10):
        setting = f"search_chain-k{k}"
        options = shootout.ENV_OPTIONS[setting]
        assert shootout.env_of(setting) == "search_chain" and options["rl_filter"] == {"hops": k}
        assert options["warm_filter"] == {"hops": k} and options["max_turns"] == k + 2
        # the prompt, k + 2 full turns, one more action
        assert shootout.max_context_of(setting) >= 210 + 112 * (k + 2) + 32
        assert shootout.turn_reward_fn_of(setting, "turn_dense") is rewards.chain_progress_turn_rewards
        assert filter_tasks(load_tasks("search_chain", "test"), options["rl_filter"])
    assert shootout.horizon_settings(["search_chain-k2", "search_chain-k6"]) == {}
