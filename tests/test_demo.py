"""`make demo`'s job at COURSE_FAST size: base -> warm start -> RL, a report, a plot and one printed
episode; a Ctrl+C in the RL run stops the demo at its checkpoint, and the next demo resumes it."""

import os
import signal

import course_lib.__main__ as cli
from course_lib.__main__ import demo


def test_fast_demo_prints_an_episode_and_writes_its_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_RUNS", str(tmp_path / "runs"))  # its own warm start, not the shared cache
    real_train, sent = cli.train, []

    def ctrl_c_in_the_first_reward(trajectory):  # what Ctrl+C sends, once, after the first rollout
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return trajectory.reward

    with monkeypatch.context() as m:
        m.setattr(cli, "train", lambda config: real_train(config, reward_fn=ctrl_c_in_the_first_reward))
        stopped = demo(run_dir=tmp_path / "demo", fast=True)
    out = capsys.readouterr().out
    assert sent and stopped["interrupted"] and "after RL" not in out and "run it again to resume" in out
    assert not (tmp_path / "demo" / "report.md").exists()

    result = demo(run_dir=tmp_path / "demo", fast=True)
    out = capsys.readouterr().out
    assert "Resuming" in out
    episode = (tmp_path / "demo" / "episode.txt").read_text()
    # the task, model tokens, the outcome
    assert "question:" in episode and "[[" in episode and "-> " in episode
    assert episode.strip() in out  # printed, not only saved
    assert (tmp_path / "demo" / "learning_curve.png").stat().st_size > 0
    report = (tmp_path / "demo" / "report.md").read_text()
    for name in ("base", "warm_start", "rl"):
        assert 0.0 <= result[name]["ci_low"] <= result[name]["success"] <= result[name]["ci_high"] <= 1.0
    assert f"{100 * result['rl']['success']:.1f}%" in report and result["verdict"] in report
