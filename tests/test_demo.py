"""`make demo`'s job at COURSE_FAST size: base -> warm start -> RL, a report, a plot and one printed
episode."""

from course_lib.__main__ import demo


def test_fast_demo_prints_an_episode_and_writes_its_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))  # its own warm start, not the shared cache
    result = demo(run_dir=tmp_path / "demo", fast=True)
    out = capsys.readouterr().out
    episode = (tmp_path / "demo" / "episode.txt").read_text()
    # the task, model tokens, the outcome
    assert "question:" in episode and "[[" in episode and "-> " in episode
    assert episode.strip() in out  # printed, not only saved
    assert (tmp_path / "demo" / "learning_curve.png").stat().st_size > 0
    report = (tmp_path / "demo" / "report.md").read_text()
    for name in ("base", "warm_start", "rl"):
        assert 0.0 <= result[name]["ci_low"] <= result[name]["success"] <= result[name]["ci_high"] <= 1.0
    assert f"{100 * result['rl']['success']:.1f}%" in report and result["verdict"] in report
