"""The judge's backends and their contract: the runtime-checkable Protocols of `course_lib.judge.backends`,
which the shipped backends satisfy without inheriting and a new backend satisfies by being one small class;
the judges check them before asking; ChatML; `OpenAIJudge` against the real local judge server."""

from __future__ import annotations

import json

import pytest

from course_lib.judge.backends import (
    ChatBackend,
    ForcedBackend,
    ForcingCheck,
    LocalJudge,
    OpenAIJudge,
    UsageBackend,
    YesNoBackend,
    chatml,
)
from course_lib.judge.prompts import DEFAULT_RUBRIC, TURN_RUBRIC
from course_lib.judge.scoring import group_layout, score_group, score_pointwise
from course_lib.judge.turns import score_turns, score_turns_pointwise

PROTOCOLS = (ChatBackend, UsageBackend, YesNoBackend, ForcedBackend, ForcingCheck)
PREFIX = [{"role": "system", "content": "Answer questions."},
          {"role": "user", "content": "Capital of France?"}]


def conv(answer: str) -> list[dict[str, str]]:
    return PREFIX + [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]


@pytest.fixture(scope="module")
def local(policy):
    model, tokenizer = policy
    return LocalJudge(model=model, tokenizer=tokenizer)


class Renamed:
    """A new backend in a few lines: the real embedded judge under a name of its own (so a cache key of its
    own), its chat answers and forced reads passed on. No base class, no registration."""

    def __init__(self, inner: LocalJudge, name: str):
        self.inner, self.name = inner, name

    def complete(self, messages, *, max_tokens=512, temperature=0.0):
        return self.inner.complete(messages, max_tokens=max_tokens, temperature=temperature)

    def forced_scores(self, messages, header, lines):
        return self.inner.forced_scores(messages, header, lines)


class FixedText:
    """A backend that writes the same text whatever it is asked: a chat backend and nothing more."""

    name = "fixed-text"

    def __init__(self, text: str):
        self.text = text

    def complete(self, messages, *, max_tokens=512, temperature=0.0):
        return self.text


def test_the_local_judge_satisfies_every_protocol_without_inheriting_them(local):
    assert all(isinstance(local, p) for p in PROTOCOLS)
    for cls in (LocalJudge, OpenAIJudge):
        assert not set(PROTOCOLS) & set(cls.__mro__), cls


def test_a_new_backend_is_one_class_that_satisfies_the_protocol(local, tmp_path):
    """Wrapping the real judge: accepted by score_group, read at forced positions as the judge itself is,
    and cached under its own name."""
    new = Renamed(local, "renamed:smollm2-135m")
    assert isinstance(new, ChatBackend) and isinstance(new, ForcedBackend)
    assert not isinstance(new, YesNoBackend) and not isinstance(new, UsageBackend)
    group = [conv("Paris"), conv("Rome")]
    wrapped = score_group(group, judge=new, cache_dir=tmp_path)
    direct = score_group(group, judge=local, cache_dir=tmp_path)
    assert wrapped.method == direct.method == "group_forced" and not wrapped.failed
    assert [s.score for s in wrapped] == pytest.approx([s.score for s in direct], abs=1e-5)
    assert wrapped.metrics.tokens == direct.metrics.tokens > 0 and wrapped.orders == direct.orders
    assert len(list(tmp_path.glob("*.json"))) == 2  # two names, two cache entries
    as_json = score_group(group, judge=new, answer="json", max_tokens=8, max_retries=0, use_cache=False)
    assert as_json.method == "group_json" and as_json.metrics.calls == 1 and as_json.metrics.tokens == 0


def test_a_backend_that_only_writes_text_is_judged_in_json_and_refused_where_it_cannot_be():
    group = [conv("Paris"), conv("Rome")]
    _, _, ids = group_layout(group)
    fixed = FixedText(json.dumps([{"id": i, "explanation": "", "score": s}
                                  for i, s in zip(ids, (1.0, 0.25))]))
    assert isinstance(fixed, ChatBackend) and not isinstance(fixed, ForcedBackend)
    scores = score_group(group, judge=fixed, use_cache=False)
    assert scores.method == "group_json" and [s.score for s in scores] == [1.0, 0.25]
    turn = FixedText('[{"turn": 1, "explanation": "fine", "score": 0.5}]')
    assert list(score_turns(conv("Paris"), judge=turn)) == [0.5]
    with pytest.raises(TypeError, match="cannot give next-token probabilities: use answer='json'"):
        score_group(group, judge=fixed, answer="forced", use_cache=False)
    with pytest.raises(TypeError, match=r"'fixed-text' cannot read P\(yes\).*score_group"):
        score_pointwise(group, judge=fixed, use_cache=False)
    with pytest.raises(TypeError, match=r"cannot read P\(yes\)"):
        score_turns_pointwise(conv("Paris"), judge=fixed)


def test_the_judges_refuse_a_backend_without_a_chat_answer_before_asking():
    """No name, no `complete`, or neither: a TypeError that names the judging and what it needs."""
    class Nameless:
        def complete(self, messages, *, max_tokens=512, temperature=0.0):
            raise AssertionError("never asked")

    class Silent:
        name = "silent"

    group = [conv("Paris"), conv("Rome")]
    for judge in (Nameless(), Silent(), object()):
        assert not isinstance(judge, ChatBackend)
        with pytest.raises(TypeError, match="cannot answer chat prompts .group judging with a JSON answer"):
            score_group(group, judge=judge, use_cache=False)
        with pytest.raises(TypeError, match="cannot answer chat prompts .turn judging"):
            score_turns(conv("Paris"), judge=judge)


@pytest.mark.parametrize("score, first, rubric", [(score_group, [conv("Paris")], DEFAULT_RUBRIC),
                                                  (score_pointwise, [conv("Paris")], DEFAULT_RUBRIC),
                                                  (score_turns, conv("Paris"), TURN_RUBRIC),
                                                  (score_turns_pointwise, conv("Paris"), TURN_RUBRIC)])
def test_the_judge_is_a_required_keyword(score, first, rubric):
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'judge'"):
        score(first, rubric)
    with pytest.raises(TypeError, match="positional argument"):
        score(first, rubric, FixedText("[]"))


def test_chatml_is_the_embedded_models_own_chat_template(tokenizer):
    messages = PREFIX + [{"role": "assistant", "content": "Paris."},
                         {"role": "user", "content": "And Italy?"}]
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chatml(messages) == expected and expected.endswith("<|im_start|>assistant\n")
    assert chatml([]) == "<|im_start|>assistant\n"


def test_openai_judge_over_the_real_judge_server_is_the_backends_it_can_be(policy, local):
    """Through HTTP to `course_lib.judge.server` with the embedded model: a chat backend with usage and
    forced reads (the server has the completions API with logprobs), not a yes/no one; its greedy answer
    is the in-process judge's."""
    from course_lib.judge.server import serve_in_thread

    model, tokenizer = policy
    server, base_url = serve_in_thread(port=0, model=model, tokenizer=tokenizer)
    try:
        judge = OpenAIJudge(base_url=base_url, timeout=120, max_retries=0)
        assert all(isinstance(judge, p) for p in (ChatBackend, UsageBackend, ForcedBackend, ForcingCheck))
        assert not isinstance(judge, YesNoBackend) and judge.can_force()
        messages = [{"role": "user", "content": "Name a colour."}]
        assert judge.complete(messages, max_tokens=6) == local.complete(messages, max_tokens=6)
        with pytest.raises(TypeError, match=r"cannot read P\(yes\)"):
            score_pointwise([conv("Paris"), conv("Rome")], judge=judge, use_cache=False)
    finally:
        server.shutdown()
        server.server_close()
