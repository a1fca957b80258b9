"""The shoot-out script at its tiny size (one seed, one step per method), so it cannot rot."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "credit_shootout.py"


def test_shootout_runs_every_method_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))
    spec = importlib.util.spec_from_file_location("credit_shootout", SCRIPT)
    shootout = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "credit_shootout", shootout)  # dataclasses look their module up
    spec.loader.exec_module(shootout)
    args = ["--size", "tiny", "--envs", "gridworld", "--seeds", "0", "--out", str(tmp_path / "results")]
    out = shootout.main(args)
    assert sorted(r["method"] for r in out["results"]) == sorted(shootout.METHODS)
    table = out["markdown"].read_text()
    for method in shootout.METHODS:
        assert f"| gridworld | {method} |" in table
    assert out["plot"].stat().st_size > 0
    assert out["group_stats"]["gridworld"]["rows"] > 0
    # A second invocation finds every run finished and trains nothing.
    stamps = {p: p.stat().st_mtime for p in (tmp_path / "runs").glob("shootout/tiny/*/*/seed0/result.json")}
    assert len(stamps) == len(shootout.METHODS)
    shootout.main(args)
    assert {p: p.stat().st_mtime for p in stamps} == stamps
