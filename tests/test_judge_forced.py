"""Forced-position group judging: the judge reads the whole group, and each id's score is the expected digit
at a position its answer is forced to ("Scores:\\nid t3f2: "). With a backend whose digit probabilities
the test writes, with the real embedded model, through the real judge server, and a hub model by name."""

from __future__ import annotations

import math
import re

import pytest

from course_lib.judge.answers import expected_digit
from course_lib.judge.backends import ForcedScores, LocalJudge, OpenAIJudge
from course_lib.judge.prompts import (
    DEFAULT_RUBRIC,
    SCORES_HEADER,
    forced_group_prompt,
    score_line,
    shared_prefix,
)
from course_lib.judge.scoring import JudgeMetrics, score_group

PREFIX = [{"role": "system", "content": "Answer questions."},
          {"role": "user", "content": "Capital of France?"}]


def shared_start(a: list[dict[str, str]], b: list[dict[str, str]]) -> list[dict[str, str]]:
    """The messages two conversations share from the start (the group's shared prefix)."""
    return a[:shared_prefix([a, b])]


def conv(answer: str) -> list[dict[str, str]]:
    return PREFIX + [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]


def one_hot(digit: int, mass: float = 1.0) -> list[float]:
    return [mass if d == digit else 0.0 for d in range(10)]


class ScriptedForced:
    """A backend whose digit probabilities the test writes: 9 for a trajectory answering Paris, 2 for any
    other, plus `bias` times its position in the order read (a position-biased judge when bias > 0).
    Keeps every prompt and every list of forced lines it is shown."""

    name = "scripted-forced"

    def __init__(self, bias: int = 0, mass: float = 1.0):
        self.bias, self.mass = bias, mass
        self.reads: list[tuple[list[dict[str, str]], str, list[str]]] = []

    def forced_scores(self, messages, header, lines):
        self.reads.append((messages, header, lines))
        blocks = re.findall(r'<trajectory id="(t[0-9a-f]+)">(.*?)</trajectory>', messages[1]["content"],
                            re.DOTALL)
        answer = {i: re.search(r"<answer>(.*?)</answer>", body).group(1) for i, body in blocks}
        order = [i for i, _ in blocks]
        probs = []
        for line in lines:
            i = re.fullmatch(r"id (t[0-9a-f]+) \(.*\): ", line).group(1)
            digit = min(9, (9 if answer[i] == "Paris" else 2) + self.bias * order.index(i))
            probs.append(one_hot(digit, self.mass))
        return ForcedScores(probs, 100)


def test_expected_digit_is_the_mean_digit_over_nine_and_low_mass_fails():
    assert expected_digit(one_hot(9)) == (1.0, expected_digit(one_hot(9))[1])
    half = [0.0] * 10
    half[0], half[9] = 0.3, 0.3  # mass 0.6: renormalised, the expected digit is 4.5
    assert expected_digit(half)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="only 0.40 of the probability is on the score digits"):
        expected_digit(one_hot(5, 0.4))


def test_forced_scores_follow_ids_and_the_result_records_the_order():
    """Scores come back by id, whatever order the seed draws; `orders` and `positions` say where each
    trajectory stood; the forced lines name the ids in the order read, after the answer's header."""
    group = [conv("Lyon"), conv("Paris"), conv("Nice"), conv("Paris")]
    seen = set()
    for seed in range(4):
        judge = ScriptedForced()
        scores = score_group(group, judge=judge, seed=seed, use_cache=False)
        assert scores.method == "group_forced" and not scores.failed
        assert [s.score for s in scores] == pytest.approx([2 / 9, 1.0, 2 / 9, 1.0])
        messages, header, lines = judge.reads[0]
        assert header == "Scores:\n"
        assert [line.split(" (")[0] for line in lines] == [f"id {i}" for i in scores.orders[0]]
        assert scores.ids[1] == scores.ids[3] and len(set(scores.ids)) == 3  # identical ones share an id
        assert sorted(scores.orders[0]) == sorted(set(scores.ids))
        assert [scores.orders[0][p] for p in scores.positions] == scores.ids
        assert messages[1]["content"].count("Capital of France?") == 1  # the shared prefix once
        seen.add(tuple(scores.orders[0]))
    assert len(seen) > 1, "the seed should shuffle the order"


def test_a_permuted_group_maps_its_scores_back_to_the_right_members():
    """A position-biased judge: the same trajectories in another input order get the scores of their own
    positions in the order read, mapped back to them (not to whoever sits at that input index)."""
    group = [conv("Lyon"), conv("Paris"), conv("Nice")]
    for perm in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        scores = score_group([group[k] for k in perm], judge=ScriptedForced(bias=1), seed=3, use_cache=False)
        for k, (s, pos) in enumerate(zip(scores, scores.positions)):
            base = 9 if perm[k] == 1 else 2
            assert s.score == pytest.approx(min(9, base + pos) / 9)


def test_two_orders_average_the_reads_and_record_both():
    judge = ScriptedForced(bias=1)
    scores = score_group([conv("Lyon"), conv("Nice")], judge=judge, two_orders=True, use_cache=False)
    assert len(judge.reads) == 2 and scores.orders[1] == scores.orders[0][::-1]
    assert [s.score for s in scores] == pytest.approx([2.5 / 9, 2.5 / 9])  # positions 0 and 1, averaged
    assert scores.metrics.calls == 2 and scores.metrics.tokens == 200


def test_too_little_mass_on_the_digits_fails_the_group_and_is_counted(tmp_path):
    total = JudgeMetrics()
    scores = score_group([conv("Lyon"), conv("Paris")], judge=ScriptedForced(mass=0.3), cache_dir=tmp_path,
                         metrics=total)
    assert scores.failed and all(math.isnan(s.score) for s in scores)
    assert "forced read failed" in scores[0].explanation and "min_mass=0.5" in scores[0].explanation
    assert total.failed_groups == 1 and total.calls == 1 and total.retries == 0  # nothing to re-ask
    assert not list(tmp_path.glob("*.json"))  # a failure is not cached
    ok = score_group([conv("Lyon"), conv("Paris")], judge=ScriptedForced(mass=0.3), min_mass=0.2,
                     use_cache=False)
    assert not ok.failed


def test_answer_chooses_forced_or_json_and_auto_follows_the_backend():
    """auto: forced for a backend with `forced_scores`, JSON for one that can only write text; asking a
    text-only backend for forced reads is an error, not a silent switch."""
    class TextOnly:
        name = "text-only"

        def complete(self, messages, *, max_tokens=512, temperature=0.0):
            ids = re.findall(r'<trajectory id="(t[0-9a-f]+)">', messages[1]["content"])
            return "[" + ", ".join(f'{{"id": "{i}", "score": 0.5}}' for i in ids) + "]"

    group = [conv("Lyon"), conv("Paris")]
    assert score_group(group, judge=TextOnly(), use_cache=False).method == "group_json"
    with pytest.raises(TypeError, match="cannot give next-token probabilities"):
        score_group(group, judge=TextOnly(), answer="forced", use_cache=False)
    with pytest.raises(ValueError, match="answer must be one of"):
        score_group(group, judge=ScriptedForced(), answer="logits", use_cache=False)
    class Both(ScriptedForced, TextOnly):  # forced reads and JSON answers; says it cannot force
        asked = 0

        def can_force(self):
            self.asked += 1
            return False

    both = Both()
    assert score_group(group, judge=both, use_cache=False).method == "group_json" and both.asked == 1
    assert (score_group(group, judge=both, answer="json", use_cache=False).method == "group_json"
            and both.asked == 1)
    identical = score_group([conv("Paris")] * 2, judge=ScriptedForced(), use_cache=False)
    assert ([s.score for s in identical] == [0.5, 0.5] and identical.orders == []
            and identical.positions == [None] * 2)


def test_forced_prompt_asks_for_digits_and_suggests_no_score_for_a_real_id():
    messages = forced_group_prompt(PREFIX, {"ta1": conv("Lyon")[2:], "tb2": conv("Paris")[2:]},
                                   DEFAULT_RUBRIC)
    assert DEFAULT_RUBRIC in messages[0]["content"]
    assert "one digit from 0 (useless) to 9 (perfect)" in messages[0]["content"]
    assert "ta1" not in messages[0]["content"] and "tb2" not in messages[0]["content"]
    assert messages[1]["content"].endswith("Score every trajectory id: ta1, tb2.")


def test_score_lines_recall_each_ending_and_a_reference_reaches_the_prompt_and_the_cache_key(tmp_path):
    """Each forced line recalls its own trajectory (actions counted, last action) whatever the order; a
    reference is shown once, after the shared context, and only when given; a different reference is a
    different cache entry (never answered from a judging without it)."""
    long_action = {"role": "assistant", "content": "<tool_call>" + "x" * 200 + "</tool_call>"}
    assert score_line("ta1") == "id ta1: "
    assert score_line("ta1", conv("Lyon")[2:]) == "id ta1 (1 action, last: <answer>Lyon</answer>): "
    line = score_line("tb2", [long_action, {"role": "tool", "content": "r"}, long_action])
    assert line.startswith("id tb2 (2 actions, last: <tool_call>xx") and line.endswith("...): ")
    assert len(line) < 110
    judge = ScriptedForced()
    group = [conv("Paris"), conv("Lyon"), conv("Nice")]
    plain = score_group(group, judge=judge, seed=3, cache_dir=tmp_path)
    guided = score_group(group, judge=judge, seed=3, reference="Paris", cache_dir=tmp_path)
    assert guided.metrics.cache_hits == 0 and len(judge.reads) == 2
    (_, _, lines), (messages, _, _) = judge.reads
    answer_of = {i: a for i, a in zip(plain.ids, ["Paris", "Lyon", "Nice"])}
    assert ([re.search(r"<answer>(.*?)</answer>", li).group(1) for li in lines]
            == [answer_of[i] for i in plain.orders[0]])
    assert "reference answer" not in judge.reads[0][0][1]["content"]
    text = messages[1]["content"]
    assert text.count("(a correct final answer): Paris") == 1
    assert text.index("</context>") < text.index("(a correct final answer)") < text.index("<trajectory")
    assert [s.score for s in guided] == [s.score for s in plain]  # the scripted judge ignores it: same scores


# ----- the real embedded model ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_qa_pair(tokenizer):
    """A real search_qa expert trajectory, and a copy whose final answer is another task's answer."""
    from course_lib.envs import load_tasks
    from course_lib.rollout import expert_rollout

    tasks = load_tasks("search_qa", "test", limit=2)
    expert = expert_rollout(tokenizer, "search_qa", tasks[:1])[0]
    messages = [dict(m) for m in expert.messages]
    last = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
    assert tasks[0]["answer"] in messages[last]["content"]
    messages[last]["content"] = messages[last]["content"].replace(tasks[0]["answer"], tasks[1]["answer"])
    return expert.messages, messages


def test_local_forced_group_scores_a_real_search_qa_group(policy, search_qa_pair):
    """The embedded model reads the group and is read at each forced line: one finite score per member,
    no failure at the default min_mass, the order recorded; the scores are those of the reads, by id."""
    model, tokenizer = policy
    judge = LocalJudge(model=model, tokenizer=tokenizer)
    expert, swapped = search_qa_pair
    total = JudgeMetrics()
    scores = score_group([expert, swapped, expert], judge=judge, seed=1, use_cache=False, metrics=total)
    assert scores.method == "group_forced" and len(scores) == 3
    assert all(math.isfinite(s.score) and 0.0 <= s.score <= 1.0
               for s in scores), [s.explanation for s in scores]
    assert total.failed_groups == 0 and total.calls == 1 and total.tokens > 0
    assert scores[0].score == scores[2].score and sorted(scores.positions[:2]) == [0, 1]
    # the same reads, asked directly: each score is its own id's read, whatever the position
    order, prefix = scores.orders[0], shared_start(expert, swapped)
    remainders = {scores.ids[k]: m[len(prefix):] for k, m in enumerate([expert, swapped])}
    prompt = forced_group_prompt(prefix, {i: remainders[i] for i in order}, DEFAULT_RUBRIC)
    read = judge.forced_scores(prompt, SCORES_HEADER, [score_line(i, remainders[i]) for i in order])
    for k in range(2):
        own_read = read.digit_probs[order.index(scores.ids[k])]
        assert scores[k].score == pytest.approx(expected_digit(own_read)[0], abs=1e-5)


def test_local_forced_reads_each_line_as_if_alone(policy, search_qa_pair):
    """The batched read over one shared prompt pass equals reading each line in a prompt of its own."""
    model, tokenizer = policy
    judge = LocalJudge(model=model, tokenizer=tokenizer)
    expert, swapped = search_qa_pair
    prefix = shared_start(expert, swapped)
    prompt = forced_group_prompt(prefix, {"t1a": expert[len(prefix):], "t2b": swapped[len(prefix):]},
                                 DEFAULT_RUBRIC)
    both = judge.forced_scores(prompt, "Scores:\n", ["id t1a: ", "id t2b: "])
    for k, line in enumerate(["id t1a: ", "id t2b: "]):
        alone = judge.forced_scores(prompt, "Scores:\n", [line])
        assert both.digit_probs[k] == pytest.approx(alone.digit_probs[0], abs=1e-4)
    assert sum(both.digit_probs[0]) > 0.5  # the forced position is one where the model writes a digit


def test_endpoint_forced_scores_over_the_real_judge_server(policy, search_qa_pair):
    """OpenAIJudge -> HTTP -> course_lib.judge.server with the embedded model: the endpoint serves the
    completions API with logprobs, so auto reads forced positions there too, and gets what the model
    gives in process (the top 20 tokens hold nearly all the digits' mass)."""
    from course_lib.judge.server import serve_in_thread

    model, tokenizer = policy
    expert, swapped = search_qa_pair
    local = score_group([expert, swapped], judge=LocalJudge(model=model, tokenizer=tokenizer),
                        use_cache=False)
    server, base_url = serve_in_thread(port=0, model=model, tokenizer=tokenizer)
    try:
        judge = OpenAIJudge(base_url=base_url, timeout=120, max_retries=0)
        assert judge.can_force()
        metrics = JudgeMetrics()
        served = score_group([expert, swapped], judge=judge, use_cache=False, metrics=metrics)
        as_json = score_group([conv("Paris"), conv("Rome")], "Score 0 to 1.", judge=judge, answer="json",
                              max_tokens=8, max_retries=0, use_cache=False)
    finally:
        server.shutdown()
        server.server_close()
    assert served.method == "group_forced" and not served.failed and served.orders == local.orders
    assert metrics.calls == 1 and metrics.tokens > 0
    assert [s.score for s in served] == pytest.approx([s.score for s in local], abs=0.02)
    # a valid answer or a counted failure
    assert as_json.method == "group_json" and as_json.metrics.calls == 1


# ----- a stronger judge by name ------------------------------------------------------------------------


def test_a_judge_by_path_takes_the_same_code_path(policy, search_qa_pair):
    """LocalJudge(name) loads through load_policy: the embedded model's folder by path works like any
    checkpoint (a hub model by name takes the same path online)."""
    from course_lib.models import embedded_checkpoint

    path = str(embedded_checkpoint(verbose=False))
    judge = LocalJudge(path, device="cpu")
    assert judge.name == f"local:{path}"
    scores = score_group(list(search_qa_pair), judge=judge, use_cache=False)
    assert scores.method == "group_forced" and not scores.failed


def test_a_hub_name_is_passed_through_unchanged(monkeypatch):
    """A hub id reaches from_pretrained as written; offline, loading it fails at once with a clear error."""
    from course_lib.models import resolve_model_path

    name = "Qwen/Qwen2.5-1.5B-Instruct"
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert resolve_model_path(name) == name
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match=re.escape(f"model {name!r} needs the Hugging Face hub")):
        LocalJudge(name)
