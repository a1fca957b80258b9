"""What an optimizer step on a zero gradient does to a warm start: AdamW after one real gradient.

vs_trl.py's time-to-success run found TRL's GRPOTrainer with a gradient at its first step only: every later
batch had equal rewards in every group, so the loss and the gradient were 0, and the Trainer stepped the
optimizer anyway. Our trainer skips the update then. AdamW's bias-corrected moments do not stop at a zero
gradient: after one gradient g at step 1, step t moves every weight by

    lr · m̂_t / (sqrt(v̂_t) + ε),   m̂_t = 0.9^(t-1) · 0.1 g / (1 − 0.9^t),
                                 v̂_t = 0.999^(t-1) · 0.001 g² / (1 − 0.999^t)

which is lr · sign(g) times 1.00, 0.67, 0.52, ... 0.19 at t = 10: each weight keeps moving by about lr a step,
in the direction of the one gradient, whatever its size. This script measures it on the model: from the
warm start, one AdamW step on a real gradient (the supervised loss on 4 expert demonstrations, clipped to norm
`--grad-norm`), then either no more steps (our trainer) or `--steps` − 1 steps on zero gradients (the
Trainer's), held-out greedy success and the weights' distance from the warm start side by side.

    python benchmarks/adam_zero_grad.py --threads 2      # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import copy

import torch

from course_lib.batching import collate
from course_lib.envs import load_tasks
from course_lib.evaluate import evaluate
from course_lib.losses import sft_loss
from course_lib.models import load_policy
from course_lib.sft import demonstrations, ensure_warm_start


def sft_gradient(model, demos) -> None:
    """model.grad = ∇ of the mean token loss on the demonstrations' model turns (no optimizer step)."""
    batch = collate(demos)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss, _ = sft_loss(logits, batch["input_ids"], batch["loss_mask"], attention_mask=batch["attention_mask"])
    loss.backward()


def distance(model, start: dict[str, torch.Tensor]) -> float:
    """||w − w₀|| / ||w₀|| over every weight."""
    num = sum(float((p.detach() - start[n]).pow(2).sum()) for n, p in model.named_parameters())
    den = sum(float(w.pow(2).sum()) for w in start.values())
    return (num / den) ** 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="lookup")
    ap.add_argument("--warm-start-steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--grad-norm", type=float, default=0.45, help="the first gradient's norm (TRL's: 0.448)")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    warm = ensure_warm_start(a.env, n_demos=64, steps=a.warm_start_steps, batch_size=4,
                             formats=("ours", "tool_calling"), progress=False)
    model, tokenizer = load_policy(str(warm))

    def held_out(m) -> float:
        return evaluate(m, a.env, n_tasks=a.eval_tasks, tokenizer=tokenizer, max_turns=3,
                        max_new_tokens=43)["success"]

    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    print(f"warm start {warm.name}: held-out {held_out(model):.2f} on {a.eval_tasks} tasks")
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    model.train()
    sft_gradient(model, demonstrations(tokenizer, a.env, load_tasks(a.env, "train", 4)))
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_norm))
    optimizer.step()
    model.eval()
    skipped = copy.deepcopy(model)  # our trainer: no optimizer step while the gradient is 0
    print(f"step 1: one AdamW step on a gradient of norm {norm:.2f} clipped to {a.grad_norm}")
    rows = [(1, held_out(skipped), distance(skipped, start), held_out(model), distance(model, start))]
    for step in range(2, a.steps + 1):
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # what a loss of exactly 0 leaves
        optimizer.step()
        if step in (5, 10, a.steps):
            rows.append((step, rows[0][1], rows[0][2], held_out(model), distance(model, start)))
    print("\n| step | held-out, update skipped at zero gradient | distance | held-out, optimizer stepped | "
          "distance |\n|---:|---:|---:|---:|---:|")
    for step, s_skip, d_skip, s_step, d_step in rows:
        print(f"| {step} | {s_skip:.2f} | {d_skip:.2e} | {s_step:.2f} | {d_step:.2e} |")
    print("(distance: ||w - w0|| / ||w0|| from the warm start)")


if __name__ == "__main__":
    main()
