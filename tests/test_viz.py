"""The visualisations: the mask view colours exactly the trained tokens, the viewers react to their
controls, the credit table has one row per turn, and the plots carry titles, labels and fixed colours."""

from __future__ import annotations

import copy
from html.parser import HTMLParser

import matplotlib
import pytest
import torch
from conftest import make_trajectory

from course_lib import viz
from course_lib.credit import CREDIT_METHODS, credit_method_named, gae, outcome_advantages
from course_lib.envs import load_tasks
from course_lib.rollout import expert_rollout
from course_lib.trajectory import Trajectory, TrajectoryGroup

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from course_lib.models import embedded_checkpoint

    return AutoTokenizer.from_pretrained(embedded_checkpoint())


@pytest.fixture(scope="module")
def trajectories(tok):
    return expert_rollout(tok, "lookup", load_tasks("lookup", "test", limit=3))


class _Spans(HTMLParser):
    """Collects (class, text, title) of every <span class="tok ...">."""

    def __init__(self):
        super().__init__()
        self.spans: list[tuple[str, str, str]] = []
        self._open: list[bool] = []

    def handle_starttag(self, tag, attrs):
        if tag != "span":
            return
        attrs = dict(attrs)
        is_token = "tok" in (attrs.get("class") or "").split()
        self._open.append(is_token)
        if is_token:
            self.spans.append((attrs["class"], "", attrs.get("title", "")))

    def handle_endtag(self, tag):
        if tag == "span":
            self._open.pop()

    def handle_data(self, data):
        if self._open and self._open[-1]:
            cls, text, title = self.spans[-1]
            self.spans[-1] = (cls, text + data, title)


def _spans(markup: str) -> list[tuple[str, str, str]]:
    parser = _Spans()
    parser.feed(markup)
    return parser.spans


def _model_runs(trajectory: Trajectory, tok) -> list[str]:
    """The decoded text of every contiguous run of mask-1 tokens."""
    runs, current = [], []
    for tid, mask in zip(trajectory.token_ids + [None], trajectory.loss_mask + [0]):
        if mask:
            current.append(tid)
        elif current:
            runs.append(tok.decode(current, skip_special_tokens=False).replace("<|im_end|>", "⟨im_end⟩"))
            current = []
    return runs


def test_mask_html_has_every_token_and_colours_exactly_the_model_tokens(trajectories, tok):
    t = trajectories[0]
    spans = _spans(viz.mask_html(t, tok))
    assert len(spans) == len(t.token_ids)
    kinds = [cls.split()[1] for cls, _, _ in spans]
    assert [k == "tok-model" for k in kinds] == [m == 1 for m in t.loss_mask]
    assert [k == "tok-prompt" for k in kinds] == [turn < 0 for turn in t.turn_index]
    assert "tok-obs" in kinds
    text = "".join(s for _, s, _ in spans)
    expected = tok.decode(t.token_ids, skip_special_tokens=False)
    for special in tok.all_special_tokens:
        expected = expected.replace(special, viz._special_name(special))
    assert text == expected  # every token's text, newlines included, special tokens visible
    assert "⟨im_end⟩" in text and "\n" in text
    first_model = t.loss_mask.index(1)
    assert f"id {t.token_ids[first_model]} · mask 1 · turn 0 · logprob" in spans[first_model][2]
    assert "mask-legend" in viz.mask_html(t, tok)


def test_mask_html_can_fold_the_prompt(trajectories, tok):
    t = trajectories[0]
    markup = viz.mask_html(t, tok, show_prompt=False)
    prompt_len = t.turn_index.count(-1)
    assert f"⟨prompt: {prompt_len} tokens⟩" in markup
    assert len(_spans(markup)) == len(t.token_ids) - prompt_len


def test_mask_text_round_trips_the_model_spans(trajectories, tok):
    for t in trajectories:
        text = viz.mask_text(t, tok)
        spans = viz.model_spans(text)
        assert spans == _model_runs(t, tok)
        assert spans == [s.action_text + "⟨im_end⟩" for s in t.steps]  # the expert's actions, closed
        assert text.replace("[[", "").replace("]]", "") == "".join(viz.token_pieces(t.token_ids, tok))
        assert viz.mask_text(t, tok) == text  # deterministic
    folded = viz.mask_text(trajectories[0], tok, show_prompt=False)
    assert folded.startswith("⟨prompt: ") and viz.model_spans(folded) == _model_runs(trajectories[0], tok)


def test_token_pieces_keep_multibyte_characters_whole(tok):
    ids = tok("naïve café → 東京 🙂", add_special_tokens=False)["input_ids"]
    pieces = viz.token_pieces(ids, tok)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == "naïve café → 東京 🙂"
    assert not any("\ufffd" in p for p in pieces)


def test_viewer_slider_changes_the_displayed_turn(trajectories, tok):
    viewer = viz.TrajectoryViewer(trajectories, tok)
    assert viewer.slider.max == trajectories[0].num_turns - 1
    first = viewer.output.value
    assert "Turn 0 of 1" in first and "lookup" in first
    viewer.slider.value = 1
    assert viewer.output.value != first
    assert "Turn 1 of 1" in viewer.output.value and "answer" in viewer.output.value
    viewer.dropdown.value = 2
    assert viewer.slider.value == 0 and trajectories[2].traj_id in viewer.output.value
    bundle = viewer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    static = bundle["text/html"]
    assert (all(f"Turn {k} of 1" in static for k in range(2))
            and all(t.traj_id in static for t in trajectories))


def test_viewer_falls_back_to_static_html_without_ipywidgets(trajectories, tok, monkeypatch):
    monkeypatch.setattr(viz, "_widgets", lambda: None)
    viewer = viz.TrajectoryViewer(trajectories[0], tok)
    assert viewer.widget is None and viewer.dropdown is None
    assert set(viewer._repr_mimebundle_()) == {"text/html"}
    assert viz.show_trajectory(trajectories[0], tok) is None


@pytest.fixture
def group() -> TrajectoryGroup:
    return TrajectoryGroup("task", "g", [
        make_trajectory([("s0", "tool_call"), ("s1", "answer")], 1.0, traj_id="a"),
        make_trajectory([("s0", "malformed"), ("s0", "tool_call"), ("s2", "answer")], 0.0, traj_id="b"),
        make_trajectory([("s0", "tool_call"), ("s1", "tool_call"), ("s3", "answer")], 1.0, traj_id="c"),
    ])


def test_credit_table_has_one_row_per_turn_and_one_column_per_method(group):
    table = viz.credit_table(group)
    assert len(table) == sum(t.num_turns for t in group) == 8
    assert list(table.columns) == ["action", "reward", *CREDIT_METHODS]  # outcome, gigpo, turn, critic, ...
    assert table.index.names == ["trajectory", "t"] and table.index[3] == ("b", 1)
    outcome = outcome_advantages(group.rewards, ["g"] * 3)
    for t, adv in zip(group, outcome.tolist()):
        assert table.loc[t.traj_id, "outcome"].tolist() == [round(adv, 4)] * t.num_turns
    returns = gae([0.0, 0.0, 1.0], [0.0] * 3, gamma=1.0, lam=0.95)[0].tolist()  # the trainer's defaults
    assert table.loc["c", "critic"].tolist() == [round(x, 4) for x in returns]  # V = 0: λγ-discounted return
    # the malformed turn of b is penalised relative to the other rollouts' first turns
    assert table.loc[("b", 0), "turn"] < table.loc[("b", 0), "outcome"]
    assert viz.credit_table(group).equals(table)  # deterministic


def test_credit_table_options(group):
    table = viz.credit_table(group, methods=("critic",), values=lambda t: [0.5] * t.num_turns,
                             gae_gamma=1.0, gae_lambda=1.0)
    assert list(table.columns) == ["action", "reward", "critic"]
    assert table.loc["a", "critic"].tolist() == [0.5, 0.5]  # return 1 minus V 0.5 on both turns
    flat = viz.credit_table(group, methods=("turn",), turn_rewards=lambda step: 0.0)
    assert flat["turn"].tolist() == viz.credit_table(group, methods=("outcome",))["outcome"].tolist()
    with pytest.raises(ValueError, match="methods are: outcome, gigpo, turn, critic"):  # and any method added
        viz.credit_table(group, methods=("ppo",))


@pytest.mark.parametrize("options", [{}, {"gamma": 0.8, "omega": 0.5, "turn_weight": 1.0, "gae_gamma": 0.9,
                                      "gae_lambda": 0.7}])
def test_credit_table_columns_are_the_trainers_advantages(group, options):
    """Every column of the credit table equals the advantages the trainer computes (`make_batch`) on the same
    trajectories, with the same option names and defaults, the critic with the same values V(s_t)."""
    from course_lib.train.batch import make_batch
    from course_lib.train.config import TrainConfig

    values = {t.traj_id: [0.1 * (k + 1) for k in range(t.num_turns)] for t in group}
    table = viz.credit_table(group, values=lambda t: values[t.traj_id], digits=6, **options)
    for method in CREDIT_METHODS:
        taken = {k: v for k, v in options.items() if k in credit_method_named(method).options}
        batch = make_batch([group], [], TrainConfig(credit=method, credit_options=taken),
                           values_of=lambda trajs: [torch.tensor(values[t.traj_id]) for t in trajs])
        assert [t.traj_id for t in batch.trajectories] == ["a", "b", "c"], method  # every group has signal
        for t, a in zip(batch.trajectories, batch.advantages):
            per_turn = [float(a[t.turn_index.index(k)]) for k in range(t.num_turns)]  # a turn's first token
            assert table.loc[t.traj_id, method].tolist() == pytest.approx(per_turn, abs=1e-5), method


def test_credit_explorer_dropdown_switches_groups(group, trajectories, tok):
    other = TrajectoryGroup("other", "h",
                            [make_trajectory([("s", "answer")], 0.0, traj_id="x", group_id="h"),
                             make_trajectory([("s", "answer")], 1.0, traj_id="y", group_id="h")])
    explorer = viz.credit_explorer([group, other])
    first = explorer.output.value
    assert first.count("<tr>") == 1 + 8 and "credit-table" in first
    explorer.dropdown.value = 1
    assert explorer.output.value != first and explorer.output.value.count("<tr>") == 1 + 2
    static = explorer._repr_mimebundle_()["text/html"]
    assert static.count("<table") == 2
    with_tokens = viz.credit_explorer(TrajectoryGroup("t", trajectories[0].group_id, trajectories[:1]), tok)
    assert with_tokens.dropdown is None and "turn-action" in with_tokens.output.value


def test_views_do_not_change_the_trajectories(trajectories, tok):
    before = copy.deepcopy(trajectories)
    viz.mask_html(trajectories[0], tok)
    viz.TrajectoryViewer(trajectories, tok).static_html()
    viz.credit_table(trajectories)
    assert [t.token_ids for t in trajectories] == [t.token_ids for t in before]
    assert torch.tensor(trajectories[0].loss_mask).sum() == trajectories[0].num_model_tokens
