"""`course_lib.checkpoint`: a run's checkpoint written atomically and restored exactly, its metrics file,
and a Ctrl+C held until the update ends. Real files in tmp_path; the model is a real (tiny) Llama from
transformers with the course's tokenizer, so a checkpoint takes kilobytes, not the 135M model's 1.6 GB."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from course_lib.checkpoint import (
    DeferredInterrupt,
    check_disk_for_checkpoint,
    checkpoint_bytes,
    find_checkpoint,
    log_metrics,
    nonfinite_in_a_row,
    read_metrics,
    restore_checkpoint,
    save_checkpoint,
    save_model,
    truncate_metrics,
)
from course_lib.value_head import ValueHead


def _tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval()


def _trained(model, head=None):
    """An AdamW that has taken two steps, so that its state (moments, step count) is not empty."""
    params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    for _ in range(2):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        if head is not None:
            hidden = model.get_decoder()(input_ids=ids).last_hidden_state
            loss = loss + head(hidden, torch.tensor([[2]])).sum()
        loss.backward()
        optimizer.step()
    return optimizer


def _step(checkpoint: Path) -> int:
    return json.loads((checkpoint / "step.json").read_text())["step"]


def test_a_restored_checkpoint_gives_the_same_optimizer_step_value_head_and_random_draws(tmp_path, tokenizer):
    model, head = _tiny_model(), ValueHead(16)
    optimizer = _trained(model, head)
    torch.manual_seed(123)
    random.seed(456)
    save_checkpoint(tmp_path, model, tokenizer, optimizer, head, 7, {"env": "lookup", "steps": 9})
    draws = (torch.rand(4).tolist(), random.random())
    saved_state, saved_head = optimizer.state_dict(), {k: v.clone() for k, v in head.state_dict().items()}

    checkpoint = find_checkpoint(tmp_path)
    assert checkpoint == tmp_path / "checkpoint"
    assert json.loads((checkpoint / "config.json").read_text()) == {"env": "lookup", "steps": 9}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no temporary folder left behind

    reloaded = AutoModelForCausalLM.from_pretrained(checkpoint / "model")
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a, b), name
    fresh_head = ValueHead(16)
    fresh_optimizer = torch.optim.AdamW(list(reloaded.parameters()) + list(fresh_head.parameters()), lr=1e-2)
    torch.manual_seed(0)
    random.seed(0)
    assert restore_checkpoint(checkpoint, fresh_optimizer, fresh_head) == 7
    assert (torch.rand(4).tolist(), random.random()) == draws
    for k, v in saved_head.items():
        assert torch.equal(fresh_head.state_dict()[k], v) and v.abs().sum() > 0
    restored = fresh_optimizer.state_dict()
    assert restored["param_groups"] == saved_state["param_groups"]
    assert restored["state"].keys() == saved_state["state"].keys()
    for i, state in saved_state["state"].items():
        assert float(state["step"]) == 2.0
        for key in ("step", "exp_avg", "exp_avg_sq"):
            back = restored["state"][i][key]
            assert torch.equal(torch.as_tensor(back), torch.as_tensor(state[key])), (i, key)


def test_a_later_save_replaces_the_checkpoint(tmp_path, tokenizer):
    model = _tiny_model()
    optimizer = _trained(model)
    save_checkpoint(tmp_path, model, tokenizer, optimizer, None, 1, {})
    save_checkpoint(tmp_path, model, tokenizer, optimizer, None, 2, {})
    assert _step(find_checkpoint(tmp_path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert restore_checkpoint(find_checkpoint(tmp_path), torch.optim.AdamW(model.parameters())) == 2


def test_a_save_that_fails_midway_leaves_the_previous_checkpoint_readable(tmp_path, tokenizer):
    """The weights are written, then the config cannot be (a set is not JSON): the write raises an OSError
    that names the step and the free space, the partial folder goes, and the checkpoint of step 3 stays."""
    model = _tiny_model()
    optimizer = _trained(model)
    save_checkpoint(tmp_path, model, tokenizer, optimizer, None, 3, {"ok": True})
    with pytest.raises(OSError, match=r"checkpoint of step 4 .* GB are free .* is untouched") as failure:
        save_checkpoint(tmp_path, model, tokenizer, optimizer, None, 4, {"bad": {1, 2}})
    assert isinstance(failure.value.__cause__, TypeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    checkpoint = find_checkpoint(tmp_path)
    assert _step(checkpoint) == 3 and json.loads((checkpoint / "config.json").read_text()) == {"ok": True}
    assert restore_checkpoint(checkpoint, torch.optim.AdamW(model.parameters())) == 3


def test_a_first_save_that_fails_says_there_is_no_earlier_checkpoint(tmp_path, tokenizer):
    model = _tiny_model()
    with pytest.raises(OSError, match="no earlier checkpoint exists"):
        save_checkpoint(tmp_path, model, tokenizer, _trained(model), None, 1, {"bad": object()})
    assert find_checkpoint(tmp_path) is None and list(tmp_path.iterdir()) == []


def test_a_save_cut_between_its_two_renames_is_recovered(tmp_path, tokenizer):
    """The old checkpoint was renamed aside and the new one not yet into place (a kill between the renames):
    `find_checkpoint` puts the old one back."""
    model = _tiny_model()
    save_checkpoint(tmp_path, model, tokenizer, _trained(model), None, 5, {})
    (tmp_path / "checkpoint").rename(tmp_path / ".checkpoint-old")
    (tmp_path / "checkpoint").mkdir()  # a half-made folder without step.json
    assert _step(find_checkpoint(tmp_path)) == 5
    assert not (tmp_path / ".checkpoint-old").exists()
    assert find_checkpoint(tmp_path / "elsewhere") is None


def test_save_model_replaces_the_target_and_leaves_no_temporary_folder(tmp_path, tokenizer):
    target = tmp_path / "runs" / "policy"
    save_model(_tiny_model(seed=1), tokenizer, target)
    second = _tiny_model(seed=2)
    save_model(second, tokenizer, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["policy"]
    loaded = AutoModelForCausalLM.from_pretrained(target)
    assert torch.equal(loaded.lm_head.weight, second.lm_head.weight)
    assert (target / "tokenizer_config.json").exists()


# ------------------------------------------------------------------------------------------------------
# the disk
# ------------------------------------------------------------------------------------------------------


def test_checkpoint_bytes_are_the_weights_and_adams_two_moments():
    linear = torch.nn.Linear(10, 3)  # 33 fp32 parameters
    assert checkpoint_bytes(linear) == 3 * 33 * 4
    assert checkpoint_bytes(linear, ValueHead(10)) == 3 * (33 + 11) * 4
    assert checkpoint_bytes(torch.nn.Linear(10, 3, dtype=torch.bfloat16)) == 3 * 33 * 2


def test_a_checkpoint_that_cannot_fit_on_the_disk_fails_before_the_run(tmp_path):
    check_disk_for_checkpoint(tmp_path, torch.nn.Linear(10, 3), None)  # a few hundred bytes fit
    huge = torch.nn.Linear(2**22, 2**22, bias=False, device="meta")  # 2^44 fp32 weights: 3 x 64 TiB
    with pytest.raises(OSError, match=r"GB free, and a checkpoint of this run needs about 196608\.00 GB"):
        check_disk_for_checkpoint(tmp_path, huge, None)


# ------------------------------------------------------------------------------------------------------
# the metrics file
# ------------------------------------------------------------------------------------------------------


def test_metrics_are_appended_read_back_and_truncated_after_a_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(tmp_path) == []
    rows = [{"kind": "train", "step": 1, "loss": 0.5}, {"kind": "eval", "step": 1, "success": 0.25},
            {"kind": "train", "step": 2, "loss": 0.25}, {"kind": "train", "step": 3, "loss": 0.125}]
    for row in rows:
        log_metrics(path, row)
    assert read_metrics(str(tmp_path)) == rows
    assert len(path.read_text().splitlines()) == 4
    truncate_metrics(path, 1)
    assert read_metrics(tmp_path) == rows[:2]
    log_metrics(path, rows[2])
    assert read_metrics(tmp_path) == rows[:3]


def test_nonfinite_in_a_row_counts_the_last_train_steps_only():
    ok, bad, ev = {"kind": "train"}, {"kind": "train", "nonfinite": True}, {"kind": "eval"}
    assert nonfinite_in_a_row([]) == 0
    assert nonfinite_in_a_row([bad, ok, bad, ev, bad]) == 2  # eval rows in between do not break the run
    assert nonfinite_in_a_row([bad, bad, ok]) == 0
    assert nonfinite_in_a_row([bad, bad, bad, ev]) == 3


# ------------------------------------------------------------------------------------------------------
# Ctrl+C during an update
# ------------------------------------------------------------------------------------------------------


def test_a_ctrl_c_inside_hold_waits_for_the_block_to_end(capsys):
    # Python's own Ctrl+C handler, as in a terminal or a notebook (a job started in the background with `&`
    # inherits SIGINT ignored, and then a Ctrl+C after hold() would rightly do nothing)
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_inside_hold_waits(capsys)
    finally:
        signal.signal(signal.SIGINT, original)


def _ctrl_c_inside_hold_waits(capsys) -> None:
    before = signal.getsignal(signal.SIGINT)
    interrupt = DeferredInterrupt()
    done = []
    with interrupt.hold():
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10  # the Python-level handler runs between bytecodes: soon, not at once
        while not interrupt.pending and time.monotonic() < deadline:
            pass
        done.append("the update finished")
    assert done == ["the update finished"] and interrupt.pending
    assert "finishing this update" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # outside hold(), Ctrl+C interrupts again
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pass


def test_hold_outside_the_main_thread_changes_no_handler():
    before, seen = signal.getsignal(signal.SIGINT), []

    def worker():
        with DeferredInterrupt().hold():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [before] and signal.getsignal(signal.SIGINT) is before


def test_checkpoints_take_plain_data_not_the_training_config():
    """A checkpoint stores the config as JSON data: the module never names TrainConfig."""
    import course_lib.checkpoint

    assert "TrainConfig" not in Path(course_lib.checkpoint.__file__).read_text()


def test_interruptible_gives_back_ctrl_c_to_a_process_started_with_sigint_ignored():
    """What `cmd &` in a script does to a run: SIGINT starts ignored. Without interruptible() the signal is
    lost; with it the process gets its KeyboardInterrupt (and a run, its checkpoint). "ready" is printed
    inside the try, so that a signal that comes at once is caught there too (a busy machine
    showed that race)."""
    import subprocess
    import sys

    code = ("import sys, time\n"
            "from course_lib.checkpoint import interruptible\n"
            "if sys.argv[1] == 'on': interruptible()\n"
            "try:\n    print('ready', flush=True)\n    time.sleep(20)\n    print('slept')\n"
            "except KeyboardInterrupt:\n    print('KeyboardInterrupt')\n")
    seen = {}
    for mode in ("off", "on"):
        proc = subprocess.Popen([sys.executable, "-c", code, mode], stdout=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        try:
            seen[mode] = proc.communicate(timeout=3)[0].strip()
        except subprocess.TimeoutExpired:
            proc.kill()
            seen[mode] = "still running"
    assert seen == {"off": "still running", "on": "KeyboardInterrupt"}
