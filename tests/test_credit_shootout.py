"""The shoot-out script: its tiny size end to end (one seed, one step per method), so it cannot rot; its
paired statistics against scipy and hand-computed values; its report from partial results."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from scipy import stats

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "credit_shootout.py"


@pytest.fixture
def shootout(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))
    spec = importlib.util.spec_from_file_location("credit_shootout", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "credit_shootout", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_paired_comparison_matches_scipy_and_hand_values(shootout):
    a, b = [0.5, 0.6, 0.55, 0.7, 0.65], [0.5] * 5
    c = shootout.paired_comparison(a, b)
    # d = 0, .1, .05, .2, .15: mean .1, sd sqrt(.025 / 4) = .0790569, se = sd / sqrt(5) = .0353553,
    # t = 2 sqrt(2)
    assert c["n"] == 5
    assert c["mean_diff"] == pytest.approx(0.1)
    assert c["sd_diff"] == pytest.approx(0.0790569, abs=1e-6)
    assert c["t"] == pytest.approx(2 * math.sqrt(2))
    assert c["p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert c["p"] == pytest.approx(0.04742, abs=1e-5)
    # t_{0.975,4} = 2.776445 and t_{0.80,4} = 0.940965 (t tables)
    assert c["low"] == pytest.approx(0.1 - 2.776445 * 0.0353553, abs=1e-6)
    assert c["high"] == pytest.approx(0.1 + 2.776445 * 0.0353553, abs=1e-6)
    assert c["mde"] == pytest.approx((2.776445 + 0.940965) * 0.0353553, abs=1e-6)
    # the MDE is the effect the two-sided test finds with power about 0.8 (noncentral t, 4 degrees of freedom)
    nc, t_crit = c["mde"] / (c["sd_diff"] / math.sqrt(5)), stats.t.ppf(0.975, 4)
    assert stats.nct.sf(t_crit, 4, nc) + stats.nct.cdf(-t_crit, 4, nc) == pytest.approx(0.8, abs=0.02)
    assert shootout.verdict("gigpo", "outcome", c, 40) == "resolved: gigpo > outcome (p=0.047)"
    flipped = shootout.paired_comparison(b, a)
    assert flipped["p"] == pytest.approx(c["p"]) and flipped["mean_diff"] == pytest.approx(-0.1)
    assert shootout.verdict("gigpo", "outcome", flipped, 40).startswith("resolved: gigpo < outcome")


def test_a_null_states_the_detectable_effect(shootout):
    c = shootout.paired_comparison([0.5, 0.4, 0.6], [0.45, 0.5, 0.5])  # d = .05, -.1, .1
    assert c["p"] == pytest.approx(stats.ttest_rel([0.5, 0.4, 0.6], [0.45, 0.5, 0.5]).pvalue)
    line = shootout.verdict("turn", "outcome", c, 40)
    assert line == (f"not resolved (p={c['p']:.2f}); the run could detect differences of about "
                    f"{c['mde']:.2f} or larger")
    # no spread: the t-test is undefined, and the detectable effect comes from the evaluation's binomial noise
    same = shootout.paired_comparison([0.5] * 5, [0.5] * 5)
    assert math.isnan(same["p"]) and math.isnan(same["mde"]) and same["low"] == same["high"] == 0.0
    mde = (2.776445 + 0.940965) * math.sqrt(0.5 / 40) / math.sqrt(5)
    assert shootout.binomial_mde(5, 40) == pytest.approx(mde, abs=1e-6)
    assert f"about {mde:.2f} or larger" in shootout.verdict("turn", "outcome", same, 40)
    with pytest.raises(ValueError, match="at least two"):
        shootout.paired_comparison([0.5], [0.4])


def test_t_interval_and_eval_steps(shootout):
    mean, low, high = shootout.t_interval([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert high - mean == pytest.approx(stats.t.ppf(0.975, 2) * 0.2 / math.sqrt(3))
    assert shootout.t_interval([0.3]) == (0.3, 0.3, 0.3)
    assert shootout.eval_steps(shootout.PRESETS["cpu"]) == [5, 10]
    assert shootout.eval_steps(shootout.PRESETS["cpu"].replace(eval_every=0)) == [10]
    assert shootout.eval_steps(shootout.PRESETS["cpu"].replace(eval_every=4)) == [4, 8, 10]


def fake_result(env: str, method: str, seed: int, curve: list, outcomes: list[int]) -> dict:
    """A result.json as run_one writes it (the report reads only these files)."""
    return {"env": env, "method": method, "seed": seed, "size": "tiny", "curve": curve, "final": curve[-1][1],
            "outcomes": outcomes, "mean_turns_success": 2.0 if any(outcomes) else None,
            "seconds": 60.0, "train_tokens": 100, "steps_run": 1, "equal_reward_groups": 0, "updates": 1,
            "step_group_sizes": {"1": 2, "2": 1} if method == "gigpo" else {},
            "step_rows": 4 if method == "gigpo" else 0,
            "machine": "test machine", "threads": 1, "torch": "x", "date": "2026-12-01 10:00"}


def test_report_from_partial_results(shootout, tmp_path):
    """The results file comes from whatever runs have finished: here outcome has 3 seeds, gigpo 2, turn 1."""
    env_dir = shootout.env_dir("tiny", "gridworld")
    env_dir.mkdir(parents=True)
    (env_dir / "start_eval.json").write_text(json.dumps({"success": 0.5, "ci_low": 0.1, "ci_high": 0.9,
                                                         "n": 2, "warm_start": "w"}))
    runs = {("outcome", 0): [1, 0], ("outcome", 1): [1, 1], ("outcome", 2): [0, 1], ("gigpo", 0): [1, 1],
            ("gigpo", 1): [1, 1], ("turn", 0): [0, 0]}  # per held-out task (2 tasks)
    for (method, seed), outcomes in runs.items():
        run_dir = shootout.run_dir_of("tiny", "gridworld", method, seed)
        run_dir.mkdir(parents=True)
        curve = [[0, 0.5], [1, sum(outcomes) / 2]]
        (run_dir / "result.json").write_text(json.dumps(fake_result("gridworld", method, seed, curve,
                                                                    outcomes)))
    aside = env_dir / "turn_older_variant" / "seed1"  # a folder moved aside: its run is not counted
    aside.mkdir(parents=True)
    (aside / "result.json").write_text(json.dumps(fake_result("gridworld", "turn", 1, [[0, 0.5], [1, 1.0]],
                                                              [1, 1])))
    out = shootout.main(["--size", "tiny", "--report", "--out", str(tmp_path / "results")])
    table = out["markdown"].read_text()
    assert ("| gridworld | outcome | 3 | 0: 0.500, 1: 0.667 | 0.667 | 0.289 | 0: 0.500, 1: 1.000, 2: 0.500 "
            "| 2.00 |") in table
    assert "| gridworld | gigpo | 2 |" in table and "| gridworld | turn | 1 |" in table
    c = shootout.paired_comparison([1.0, 1.0], [0.5, 1.0])
    assert (f"| gridworld | gigpo - outcome | 2 | +0.250 | [{c['low']:+.3f}, {c['high']:+.3f}] "
            f"| {c['p']:.2g} |") in table
    assert "| gridworld | turn - outcome | 1 | - | - | - | - | not tested: one paired seed so far |" in table
    assert "| gridworld | outcome - warm start | 3 | +0.167 |" in table
    assert "or larger" in table
    # per task: gigpo won task 2 of seed 0 where outcome failed; no task the other way round
    assert f"| gridworld | gigpo - outcome | 2 | 1 | 0 | {stats.binomtest(1, 1).pvalue:.2g} |" in table
    assert "| gridworld | turn - outcome | 1 | 0 | 1 | 1 |" in table
    assert "| gridworld | gigpo runs, all steps of 2 seeds | 8 | 0.50 | 1: 4, 2: 2 |" in table
    assert "Machine: test machine, 1 torch threads per worker, torch x." in table
    assert out["plot"].stat().st_size > 0
    # the runs as data, for notebook 06's reference curves: one entry per finished run, outcome first
    data = json.loads((tmp_path / "results" / "credit_shootout_tiny_runs.json").read_text())
    assert [(r["method"], r["seed"]) for r in data["runs"]][:4] == [("outcome", 0), ("outcome", 1),
                                                                  ("outcome", 2), ("gigpo", 0)]
    assert data["runs"][3]["outcomes"] == [1, 1] and data["runs"][3]["train"] == []  # no metrics.jsonl here
    assert data["budget"]["steps"] == shootout.PRESETS["tiny"].steps


def test_shootout_runs_every_method_and_resumes(shootout, tmp_path):
    args = ["--size", "tiny", "--envs", "gridworld", "--seeds", "0", "--out", str(tmp_path / "results")]
    out = shootout.main(args)
    methods = shootout.PRESETS["tiny"].methods
    assert sorted(r["method"] for r in out["results"]) == sorted(methods)
    table = out["markdown"].read_text()
    for method in methods:
        assert f"| gridworld | {method} | 1 |" in table
    assert "| gridworld | *warm start (step 0)* |" in table
    assert "| gridworld | warm start, one step's rollouts |" in table
    assert out["plot"].stat().st_size > 0
    # step 0 is the shared evaluation; the run evaluated itself once, at its last step
    for r in out["results"]:
        assert [s for s, _ in r["curve"]] == [0, 1] and r["steps_run"] == 1
        assert len(r["outcomes"]) == 2 and r["final"] == sum(r["outcomes"]) / 2
        assert not (shootout.run_dir_of("tiny", "gridworld", r["method"], 0) / "checkpoint").exists()
    # A second invocation finds every run finished and trains nothing.
    stamps = {p: p.stat().st_mtime for p in out["run_root"].glob("*/*/seed0/result.json")}
    assert len(stamps) == len(methods)
    shootout.main(args)
    assert {p: p.stat().st_mtime for p in stamps} == stamps


def test_prepare_only_makes_the_shared_start_and_trains_nothing(shootout, tmp_path):
    out = shootout.main(["--size", "tiny", "--envs", "gridworld", "--prepare-only"])
    assert list(out["prepared"]) == ["gridworld"]
    env_dir = shootout.env_dir("tiny", "gridworld")
    assert (env_dir / "start_eval.json").exists() and (env_dir / "group_stats.json").exists()
    assert not list(shootout.preset_dir("tiny").glob("*/*/seed*"))
    # a preset that changes only the training shares the warm start's evaluation: read, not run again
    shootout.PRESETS["tiny_lr"] = shootout.PRESETS["tiny"].replace(lr=1e-3)
    try:
        first = json.loads((env_dir / "start_eval.json").read_text())
        again = shootout.start_eval("tiny_lr", "gridworld", shootout.warm_start_of("tiny", "gridworld"))
        assert shootout.env_dir("tiny_lr", "gridworld") != env_dir
        # the same measurement, its seconds too: no second evaluation; the warm start's identity and the
        # measurement's date were recorded when it was measured, not when a preset copied it
        assert again == first and {"seconds", "warm_id", "machine", "date"} <= set(again)
    finally:
        del shootout.PRESETS["tiny_lr"]


def test_long_horizon_settings_run_their_environment_with_its_limits(shootout, tmp_path):
    """A setting "gridworld_long-h8" trains gridworld_long on horizon-8 maps with 16 turns, a context that
    holds them, the bf16 sampler of the horizon preset, and the aligned path
    reward for the turn method only."""
    from course_lib import rewards

    assert shootout.env_of("gridworld_long-h8") == "gridworld_long"
    assert shootout.env_of("search_qa") == "search_qa"
    config = shootout.train_config("horizon", "gridworld_long-h8", "turn", 3, tmp_path / "warm")
    assert config.env == "gridworld_long" and config.task_filter == {"horizon": 8}
    assert config.rollout.max_turns == 16 and config.rollout.sample_dtype == "bfloat16"
    assert config.rollout.max_context >= 240 + 91 * 16 + 32  # the prompt, 16 full turns, one more action
    assert shootout.turn_reward_fn_of("gridworld_long-h8", "turn") is rewards.path_distance_turn_rewards
    assert shootout.turn_reward_fn_of("gridworld_long-h8", "turn_dense") is rewards.path_distance_turn_rewards
    assert shootout.turn_reward_fn_of("gridworld_long-h8", "outcome") is None
    assert shootout.turn_reward_fn_of("search_qa", "turn") is None  # the trainer's process reward
    assert shootout.horizon_settings(["search_qa", "gridworld_long-h4"]) == {}
    assert shootout.horizon_settings(["gridworld_long-h12", "gridworld_long-h4"]) == {
        4: "gridworld_long-h4", 12: "gridworld_long-h12"}


def test_horizon_report(shootout, tmp_path):
    """With runs at two horizons the report adds the table of final success against the horizon, and its
    plot; a setting with one seed gives its mean without an interval."""
    for h, start, finals in ((4, 0.5, [0.6, 0.8]), (8, 0.25, [0.3, 0.5]), (12, 0.1, [0.2])):
        env = f"gridworld_long-h{h}"
        shootout.env_dir("horizon", env).mkdir(parents=True)
        (shootout.env_dir("horizon", env) / "start_eval.json").write_text(json.dumps(
            {"success": start, "ci_low": start - 0.2, "ci_high": start + 0.2, "n": 20, "warm_start": "w"}))
        for seed, final in enumerate(finals):
            run_dir = shootout.run_dir_of("horizon", env, "outcome", seed)
            run_dir.mkdir(parents=True)
            result = fake_result(env, "outcome", seed, [[0, start], [16, final]], [1, 0])
            (run_dir / "result.json").write_text(json.dumps(result))
    out = shootout.main(["--size", "horizon", "--report", "--out", str(tmp_path / "results")])
    table = out["markdown"].read_text()
    mean4, low4, high4 = shootout.t_interval([0.6, 0.8])
    assert "| method | h = 4 | h = 8 | h = 12 |" in table
    assert "| *warm start (step 0)* | 0.500 [0.300, 0.700] | 0.250 [0.050, 0.450] | 0.100 [" in table
    assert f"| outcome | {mean4:.3f} [{low4:.3f}, {high4:.3f}] (n=2) | 0.400 [" in table
    assert "| 0.200 (n=1, no interval) |" in table
    assert (tmp_path / "results" / "credit_shootout_horizon_curve.png").stat().st_size > 0


def old_format_run(env: str, method: str, seed: int, curve: list, outcomes: list[int]) -> dict:
    """One run of a `_runs.json` written before runs recorded their warm start (no totals, no start)."""
    return {"env": env, "method": method, "seed": seed, "curve": curve, "final": curve[-1][1],
            "outcomes": outcomes, "mean_turns_success": None, "updates": 1, "steps_run": 1, "seconds": 60.0,
            "machine": "an earlier machine", "threads": 1, "date": "2026-12-05 22:00",
            "train": [{"step": 1, "equal_reward_groups": 1, "train_tokens": 50,
                       "nonzero_advantage_tokens": 0.5}]}


def test_committed_runs_count_as_finished_and_keep_their_warm_start(shootout, tmp_path):
    """A new machine has lost the run folders but not the committed results file: its runs are neither run
    again nor dropped from the report; runs from this machine's warm start are told apart from them, and each
    is compared with the warm start it started from."""
    out = tmp_path / "results"
    out.mkdir()
    committed = [old_format_run("gridworld", m, 0, [[0, 0.5], [1, 1.0]], [1, 1])
                 for m in ("outcome", "gigpo")]
    (out / "credit_shootout_tiny_runs.json").write_text(json.dumps(
        {"preset": "tiny", "budget": shootout.budget(shootout.PRESETS["tiny"]), "runs": committed}))
    env_dir = shootout.env_dir("tiny", "gridworld")
    env_dir.mkdir(parents=True)
    here = {"success": 0.0, "ci_low": 0.0, "ci_high": 0.66, "n": 2, "warm_start": "w", "warm_id": "abcd1234",
            "machine": "this machine", "date": "2026-12-06 04:00", "mean_turns_success": None}
    (env_dir / "start_eval.json").write_text(json.dumps(here))
    for method, seed, final in (("outcome", 1, 0.5), ("gigpo", 1, 1.0)):
        run_dir = shootout.run_dir_of("tiny", "gridworld", method, seed)
        run_dir.mkdir(parents=True)
        result = fake_result("gridworld", method, seed, [[0, 0.0], [1, final]], [1, int(final == 1.0)])
        (run_dir / "result.json").write_text(json.dumps({**result, "start": here}))
    report = shootout.main(["--size", "tiny", "--report", "--out", str(out)])
    assert sorted((r["method"], r["seed"]) for r in report["results"]) == [
        ("gigpo", 0), ("gigpo", 1), ("outcome", 0), ("outcome", 1)]
    table = report["markdown"].read_text()
    assert "| gridworld | *warm start not recorded (step 0, 2 runs)* | - | 0: 0.500 |" in table
    assert "| gridworld | *warm start abcd1234 (step 0, 2 runs)* | - | 0: 0.000 |" in table
    assert "| gridworld | outcome | 2 | 0: 0.250, 1: 0.750 | 0.750 |" in table
    # against its own warm start: seed 0 gained 0.5 (from 0.5), seed 1 gained 0.5 (from 0.0)
    assert "| gridworld | outcome - warm start | 2 | +0.500 |" in table
    assert "2 warm starts of the same recipe" in table
    assert "| gridworld | gigpo runs, all steps of 1 seeds | 4 |" in table  # the committed one has no groups
    # the rewritten file keeps the committed runs, now with their start and totals
    runs = {(r["method"], r["seed"]): r for r in json.loads((out / "credit_shootout_tiny_runs.json")
                                                             .read_text())["runs"]}
    old = runs[("outcome", 0)]
    assert old["start"]["success"] == 0.5 and old["start"]["warm_id"] is None
    assert old["train_tokens"] == 50 and old["train"][0]["train_tokens"] == 50
    assert runs[("outcome", 1)]["start"]["warm_id"] == "abcd1234"
    # reading the rewritten file again gives the same report (the start is kept, not recomputed)
    again = shootout.main(["--size", "tiny", "--report", "--out", str(out)])
    assert again["markdown"].read_text().split("\n")[3:] == table.split("\n")[3:]


def test_a_committed_run_is_not_trained_again(shootout, tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    methods = shootout.PRESETS["tiny"].methods
    committed = [old_format_run("gridworld", m, 0, [[0, 0.5], [1, 0.5]], [1, 0]) for m in methods]
    (out / "credit_shootout_tiny_runs.json").write_text(json.dumps(
        {"preset": "tiny", "budget": shootout.budget(shootout.PRESETS["tiny"]), "runs": committed}))
    result = shootout.main(["--size", "tiny", "--envs", "gridworld", "--seeds", "0", "--out", str(out)])
    assert not list(shootout.preset_dir("tiny").glob("*/*/seed0/result.json"))
    assert sorted(r["method"] for r in result["results"]) == sorted(methods)
    # this machine's warm start is in the report beside the committed one, with no run yet
    assert "(step 0, 0 runs)*" in result["markdown"].read_text()


def test_committed_runs_of_another_budget_are_refused(shootout, tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    budget = {**shootout.budget(shootout.PRESETS["tiny"]), "steps": 99}
    (out / "credit_shootout_tiny_runs.json").write_text(json.dumps({"preset": "tiny", "budget": budget,
                                                                    "runs": []}))
    with pytest.raises(SystemExit, match="another budget"):
        shootout.main(["--size", "tiny", "--report", "--out", str(out)])


def test_loss_type_joins_the_budget_only_off_its_default(shootout, tmp_path):
    # the presets of runs kept before loss_type existed keep their budget (and hash); the grpo probe differs
    assert "loss_type" not in shootout.budget(shootout.PRESETS["horizon_lr0.001"])
    grpo = shootout.budget(shootout.PRESETS["horizon_lr0.001_grpo"])
    assert grpo == {**shootout.budget(shootout.PRESETS["horizon_lr0.001"]), "loss_type": "grpo"}
    assert shootout.preset_dir("horizon_lr0.001_grpo") != shootout.preset_dir("horizon_lr0.001")
    config = shootout.train_config("horizon_lr0.001_grpo", "gridworld_long-h4", "outcome", 0, tmp_path)
    assert config.optim.loss_type == "grpo"
    default = shootout.train_config("horizon", "gridworld_long-h4", "outcome", 0, tmp_path)
    assert default.optim.loss_type == "dapo"


def test_temperature_joins_the_budget_only_off_its_default(shootout, tmp_path):
    # the exploration probe's rollout temperature reaches the training rollouts; the kept presets' hashes stay
    base = shootout.budget(shootout.PRESETS["horizon_lr0.001"])
    assert "temperature" not in base
    hot = shootout.budget(shootout.PRESETS["horizon_lr0.001_t1.5"])
    assert hot == {**base, "temperature": 1.5}
    assert len({shootout.preset_dir(s) for s in ("horizon_lr0.001", "horizon_lr0.001_t1.5",
                                                 "horizon_lr0.001_t0.7")}) == 3
    assert shootout.train_config("horizon_lr0.001_t0.7", "gridworld_long-h4", "outcome", 0,
                                 tmp_path).rollout.temperature == 0.7
    assert shootout.train_config("horizon", "gridworld_long-h4", "outcome", 0,
                                 tmp_path).rollout.temperature == 1.0
    # and the Adam-ε probe's ε reaches the optimizer's config, also only off its default
    assert "adam_eps" not in base
    assert shootout.budget(shootout.PRESETS["horizon_sgdlike"])["adam_eps"] == 1e-4
    assert shootout.train_config("horizon_sgdlike", "gridworld_long-h4", "outcome", 0,
                                 tmp_path).optim.adam_eps == 1e-4
    plain = shootout.train_config("horizon", "gridworld_long-h4", "outcome", 0, tmp_path)
    assert plain.optim.adam_eps == 1e-8
