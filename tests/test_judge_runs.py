"""benchmarks/judge_runs.py (notebook 09's reference runs): the two arms differ in the unfinished-episode rule
alone, and the paired comparison reads the arms it is given."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def judge_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("judge_runs", BENCHMARKS / "judge_runs.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "judge_runs", module)
    spec.loader.exec_module(module)
    return module


def test_the_arms_differ_only_in_the_rule(judge_runs, tmp_path):
    plain, ruled = (judge_runs.config_of("notebook", arm, 3, tmp_path / "warm") for arm in judge_runs.ARMS)
    assert plain.reward.source == "judge" and plain.reward.judge_reference
    assert plain.reward.unfinished_reward is None and ruled.reward.unfinished_reward == 0.0
    assert plain.optim.lora_rank == 16 and plain.rollout.sample_dtype == "bfloat16"
    ruled.reward.unfinished_reward = None
    ruled.run_dir = plain.run_dir
    assert ruled == plain
    assert plain.seed == 3 and plain.task_filter == {"hops": 2}


def test_the_comparison_pairs_the_rule_arm_with_the_judge_arm_by_seed(judge_runs):
    start = {"outcomes": [0] * 4}
    runs = [{"arm": "judge", "seed": s, "outcomes": {"8": [0, 0, 0, 0]}} for s in (0, 1)]
    runs += [{"arm": "judge, 0 if unfinished", "seed": 0, "outcomes": {"8": [1, 1, 0, 0]}},
             {"arm": "judge, 0 if unfinished", "seed": 1, "outcomes": {"8": [1, 1, 1, 0]}}]
    (line,) = judge_runs.comparisons(runs, start, judge_runs.ARMS, judge_runs.BASELINE)
    assert line.startswith("judge, 0 if unfinished vs judge, step 8, 2 seed(s): mean success 0.625 vs 0.000")
    assert "5 only judge, 0 if unfinished right, 0 only judge" in line
