"""The tabular horizon curve's script at a tiny size end to end (two seeds, two horizons, four updates), so it
cannot rot; its resuming; its interval against hand-computed values."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "tabular_horizon.py"


@pytest.fixture
def horizon(monkeypatch):
    spec = importlib.util.spec_from_file_location("tabular_horizon", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tabular_horizon", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "UPDATES", 4)
    monkeypatch.setattr(module, "WINDOW", (2, 4))
    return module


def test_the_maps_of_a_horizon_are_the_first_test_maps_three_with_a_detour(horizon):
    for h in (4, 24):
        maps = horizon.horizon_maps(h)
        assert len(maps) == 4 and all(m["horizon"] == h for m in maps)
        assert sum(m["detour"] > 0 for m in maps) >= 3


def test_a_tiny_run_end_to_end_and_resumed(horizon, tmp_path, monkeypatch):
    runs_path = tmp_path / "runs.json"
    arms = ["outcome", "turn (path)"]
    runs = horizon.run_all(2, [4, 8], arms, runs_path)
    assert len(runs) == 2 * 2 * 2 and json.loads(runs_path.read_text()) == runs
    assert all(len(run["success"]) == 4 for run in runs.values())
    monkeypatch.setattr(horizon, "train_table", lambda *a, **k: pytest.fail("a kept run was run again"))
    assert horizon.run_all(2, [4, 8], arms, runs_path) == runs
    summary = horizon.summarise(runs, 2, [4, 8], arms)
    assert summary[4]["seeds"] == [0, 1] and set(summary[8]["vs_outcome"]) == {"turn (path)"}
    per_seed = summary[4]["success"]["outcome"]["per_seed"]
    assert per_seed[0] == pytest.approx(sum(runs["4|outcome|0"]["success"][2:4]) / 2)
    text = horizon.markdown(summary, "# header")
    assert "| 8 | 16 | 2 |" in text and "turn (path) − outcome" in text
    horizon.plot(summary, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_mean_interval_by_hand(horizon):
    # mean 0.5, s = sqrt(((−.1)² + 0 + .1²) / 2) = 0.1, t_{0.975, 2} = 4.302653
    m = horizon.mean_interval([0.4, 0.5, 0.6])
    assert m["mean"] == pytest.approx(0.5) and m["n"] == 3
    assert m["high"] - m["mean"] == pytest.approx(4.302653 * 0.1 / 3 ** 0.5, abs=1e-6)
