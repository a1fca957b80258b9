"""Looking at trajectories and credit (notebooks 03 to 08).

    mask_html, show_mask, mask_text   the loss mask of one trajectory, token by token (notebook 03)
    TrajectoryViewer, show_trajectory a turn-by-turn viewer: slider over turns, dropdown over trajectories
    credit_table, credit_explorer     per-turn advantages under outcome / GiGPO / turn / critic credit

The plots (learning curves, histograms, bars with intervals, one colour per method) are in `course_lib.plots`.

Every interactive view has a static HTML fallback: the widget's display bundle also carries a
`text/html` rendering of everything, so a notebook read on GitHub, or run headless by nbval, still
shows the content, and a kernel without `ipywidgets` gets the static view instead of an error.
HTML is styled inline (no <style> blocks), because notebook viewers strip style sheets.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from course_lib.trajectory import Step, Trajectory, TrajectoryGroup

# ---------------------------------------------------------------------------------------------------------
# token pieces: what each token of a trajectory looks like as text
# ---------------------------------------------------------------------------------------------------------

MODEL_COLORS = ("#b6e3ae", "#d5f0cf")  # two greens, alternating so token boundaries stay visible
PROMPT_STYLE = "color:#6b6b6b;background:#f1f1f1"
OBSERVATION_STYLE = "color:#5b4b86;background:#ece7f7;font-style:italic"
SPECIAL_STYLE = "font-weight:bold;font-size:85%;color:#a0306a"
BOX_STYLE = ("font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;"
             "line-height:1.55;white-space:pre-wrap;word-break:break-word;border:1px solid #ddd;"
             "border-radius:4px;padding:6px 8px;background:#fff;color:#222")


def _special_name(token: str) -> str:
    """'<|im_end|>' -> '⟨im_end⟩': special tokens stay visible instead of vanishing or looking like text."""
    return "⟨" + token.strip("<>|") + "⟩"


def token_pieces(token_ids: Sequence[int], tokenizer) -> list[str]:
    """The text of every token, aligned with `token_ids`; joined they give the decoded sequence.

    Special tokens become ⟨name⟩. A character split over several byte-level tokens is given to the
    last of them (the earlier ones get ""), so no piece shows a broken '�'.
    """
    special = set(getattr(tokenizer, "all_special_ids", []))
    pieces: list[str] = []
    start = 0  # first token of the character being assembled
    for i, tid in enumerate(token_ids):
        if tid in special:
            pieces.append(_special_name(tokenizer.convert_ids_to_tokens(int(tid))))
            start = i + 1
            continue
        text = tokenizer.decode(list(token_ids[start:i + 1]), skip_special_tokens=False,
                                clean_up_tokenization_spaces=False)
        if text.endswith("\ufffd") and i + 1 < len(token_ids) and i - start < 3:
            pieces.append("")  # an incomplete UTF-8 character: wait for its next byte
            continue
        pieces.append(text)
        start = i + 1
    return pieces


def _kind(mask: int, turn: int) -> str:
    return "model" if mask else ("prompt" if turn < 0 else "obs")


def _span(piece: str, kind: str, title: str, shade: int, special: bool) -> str:
    style = {"model": f"background:{MODEL_COLORS[shade % 2]}", "prompt": PROMPT_STYLE,
             "obs": OBSERVATION_STYLE}[kind]
    if special:
        style += ";" + SPECIAL_STYLE
    return (f'<span class="tok tok-{kind}" title="{html.escape(title)}" style="{style}">'
            f"{html.escape(piece)}</span>")


def _token_spans(trajectory: Trajectory, tokenizer, positions: Sequence[int]) -> str:
    """Spans for the tokens at `positions` of the trajectory (in order)."""
    ids = [trajectory.token_ids[j] for j in positions]
    pieces = token_pieces(ids, tokenizer)
    special = set(getattr(tokenizer, "all_special_ids", []))
    out = []
    for n, (j, piece) in enumerate(zip(positions, pieces)):
        mask, turn = trajectory.loss_mask[j], trajectory.turn_index[j]
        title = f"token {j} · id {trajectory.token_ids[j]} · mask {mask} · turn {turn}"
        if mask:
            title += f" · logprob {trajectory.logprobs[j]:.3f}"
        out.append(_span(piece, _kind(mask, turn), title, n, trajectory.token_ids[j] in special))
    return "".join(out)


def _legend() -> str:
    items = [
        (f"background:{MODEL_COLORS[0]}", "model token (loss_mask = 1, trained on)"),
        (PROMPT_STYLE, "prompt (mask 0)"),
        (OBSERVATION_STYLE, "observation / template (mask 0)"),
        (SPECIAL_STYLE, "⟨special token⟩"),
    ]
    cells = "".join(f'<span style="{s};padding:1px 6px;margin-right:8px;border-radius:3px">'
                    f'{html.escape(t)}</span>' for s, t in items)
    return f'<div class="mask-legend" style="font-size:12px;margin:4px 0">{cells}</div>'


# ---------------------------------------------------------------------------------------------------------
# the loss-mask view (notebook 03)
# ---------------------------------------------------------------------------------------------------------


def _prompt_end(trajectory: Trajectory) -> int:
    return next((j for j, t in enumerate(trajectory.turn_index) if t >= 0), len(trajectory.turn_index))


def mask_html(trajectory: Trajectory, tokenizer, *, show_prompt: bool = True) -> str:
    """The trajectory's tokens as HTML: one <span class="tok tok-KIND"> per token, KIND in
    model / prompt / obs. Model tokens (loss_mask 1) are green, the prompt grey, observations violet
    and italic; special tokens are shown as ⟨name⟩; hovering a token shows its id, mask, turn and
    log-prob. `show_prompt=False` folds the prompt into one line (its token count)."""
    n = len(trajectory.token_ids)
    start = 0 if show_prompt else _prompt_end(trajectory)
    folded = "" if show_prompt else (
        f'<span class="tok-folded" style="{PROMPT_STYLE}">⟨prompt: {start} tokens⟩</span>\n')
    summary = (f"{html.escape(str(trajectory.traj_id))} · {n} tokens, {sum(trajectory.loss_mask)} trained on "
               f"· {trajectory.num_turns} turns · reward {trajectory.reward:g}")
    return (f'<div class="mask-view"><div style="font-size:12px;font-weight:bold">{summary}</div>{_legend()}'
            f'<div style="{BOX_STYLE}">{folded}{_token_spans(trajectory, tokenizer, range(start, n))}'
            f'</div></div>')


def show_mask(trajectory: Trajectory, tokenizer, *, show_prompt: bool = True) -> None:
    """Display `mask_html` in a notebook (plain HTML output: renders on GitHub and under nbval)."""
    from IPython.display import HTML, display

    display(HTML(mask_html(trajectory, tokenizer, show_prompt=show_prompt)))


def mask_text(trajectory: Trajectory, tokenizer, *, show_prompt: bool = True) -> str:
    """The trajectory as plain text with every run of model tokens (loss_mask 1) inside [[ ]].

    Deterministic (for `# NBVAL_CHECK_OUTPUT` cells). Special tokens appear as ⟨name⟩. The text
    inside each [[ ]] is exactly what the model's tokens decode to; `model_spans` reads them back.
    """
    start = 0 if show_prompt else _prompt_end(trajectory)
    pieces = token_pieces(trajectory.token_ids[start:], tokenizer)
    out = [] if show_prompt else [f"⟨prompt: {start} tokens⟩\n"]
    inside = False
    for piece, mask in zip(pieces, trajectory.loss_mask[start:]):
        if mask and not inside:
            out.append("[[")
        elif not mask and inside:
            out.append("]]")
        inside = bool(mask)
        out.append(piece)
    if inside:
        out.append("]]")
    return "".join(out)


def model_spans(text: str) -> list[str]:
    """The [[ ]] spans of a `mask_text` string, in order (assumes the model wrote no '[[' or ']]')."""
    spans, rest = [], text
    while "[[" in rest:
        rest = rest.split("[[", 1)[1]
        span, rest = rest.split("]]", 1)
        spans.append(span)
    return spans


# ---------------------------------------------------------------------------------------------------------
# the trajectory viewer: one turn at a time
# ---------------------------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 160) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def turn_html(trajectory: Trajectory, tokenizer, turn: int) -> str:
    """One turn of a trajectory: header (reward, anchor), the action's tokens, the observation."""
    if not 0 <= turn < trajectory.num_turns:
        raise ValueError(f"turn {turn} does not exist; "
                         f"this trajectory has turns 0..{trajectory.num_turns - 1}")
    step: Step = trajectory.steps[turn]
    positions = [j for j, t in enumerate(trajectory.turn_index) if t == turn]
    action = [j for j in positions if trajectory.loss_mask[j]]
    observation = [j for j in positions if not trajectory.loss_mask[j]]
    flags = []
    if step.truncated:
        flags.append("truncated")
    if step.info.get("action_kind") == "malformed" or step.observation_text.startswith("Error:"):
        flags.append("error")
    header = (f"Turn {turn} of {trajectory.num_turns - 1} · step reward {step.reward:g}"
              + (f" · trajectory reward {trajectory.reward:g}" if step.done else "")
              + (f" · {', '.join(flags)}" if flags else ""))
    anchor = html.escape(_short(step.anchor))
    observation_label = "closing template tokens: the episode ended" if step.done else "observation"
    return (f'<div class="turn-view" data-turn="{turn}">'
            f'<div class="turn-header" style="font-weight:bold;font-size:13px">{html.escape(header)}</div>'
            f'<div style="font-size:12px;color:#555;margin:2px 0">anchor (state before the action): '
            f'<code>{anchor}</code></div>'
            f'<div style="font-size:12px;margin-top:4px">action</div>'
            f'<div class="turn-action" style="{BOX_STYLE}">'
            f'{_token_spans(trajectory, tokenizer, action)}</div>'
            f'<div style="font-size:12px;margin-top:4px">{observation_label} (masked out of the loss)</div>'
            f'<div class="turn-observation" style="{BOX_STYLE}">'
            f'{_token_spans(trajectory, tokenizer, observation) or "<i>(none: the episode ended)</i>"}</div>'
            "</div>")


def _trajectory_label(i: int, trajectory: Trajectory) -> str:
    return f"{i}: {trajectory.traj_id} (R={trajectory.reward:g}, {trajectory.num_turns} turns)"


def _bundle(widget: Any, static: str) -> dict[str, str]:
    """A display bundle with the live widget (JupyterLab) and a static HTML copy (GitHub, nbval, no
    frontend)."""
    data = dict(widget._repr_mimebundle_() or {}) if widget is not None else {}
    data["text/html"] = static
    return data


def _widgets():
    """ipywidgets, or None where it is not installed (the views then fall back to static HTML)."""
    try:
        import ipywidgets
    except ImportError:
        return None
    return ipywidgets


class TrajectoryViewer:
    """Step through trajectories turn by turn: a slider over turns, a dropdown over trajectories.

    `viewer.widget` is the ipywidgets box; `viewer.slider`, `viewer.dropdown` (None for a single
    trajectory) and `viewer.output` (an HTML widget) are its parts. Displaying the viewer shows the
    widget where a widget frontend runs and `static_html()` (every turn) everywhere else.
    """

    def __init__(self, trajectories: Trajectory | Sequence[Trajectory] | TrajectoryGroup, tokenizer):
        if isinstance(trajectories, Trajectory):
            trajectories = [trajectories]
        self.trajectories = list(trajectories)
        if not self.trajectories or any(t.num_turns == 0 for t in self.trajectories):
            raise ValueError("TrajectoryViewer needs at least one trajectory, each with at least one turn")
        self.tokenizer = tokenizer
        self.widget = self.slider = self.dropdown = self.output = None
        widgets = _widgets()
        if widgets is not None:
            self._build(widgets)

    def _build(self, widgets) -> None:
        self.slider = widgets.IntSlider(value=0, min=0, max=self.trajectories[0].num_turns - 1,
                                        description="turn", continuous_update=True)
        self.output = widgets.HTML(value=self.turn_html(0, 0))
        parts = [self.slider, self.output]
        if len(self.trajectories) > 1:
            self.dropdown = widgets.Dropdown(
                options=[(_trajectory_label(i, t), i) for i, t in enumerate(self.trajectories)],
                value=0, description="trajectory", layout=widgets.Layout(width="60%"))
            self.dropdown.observe(self._on_trajectory, names="value")
            parts.insert(0, self.dropdown)
        self.slider.observe(self._refresh, names="value")
        self.widget = widgets.VBox(parts)

    @property
    def selected(self) -> int:
        return self.dropdown.value if self.dropdown is not None else 0

    def _on_trajectory(self, change) -> None:
        self.slider.value = 0  # before max shrinks, so the old turn never lands out of range
        self.slider.max = self.trajectories[self.selected].num_turns - 1
        self._refresh()

    def _refresh(self, change=None) -> None:
        self.output.value = self.turn_html(self.selected, self.slider.value)

    def turn_html(self, trajectory: int, turn: int) -> str:
        t = self.trajectories[trajectory]
        label = html.escape(_trajectory_label(trajectory, t))
        return f'<div style="font-size:12px;color:#555">{label}</div>' + turn_html(t, self.tokenizer, turn)

    def static_html(self) -> str:
        """Every turn of every trajectory, one after another: the view without a widget frontend."""
        blocks = []
        for i, t in enumerate(self.trajectories):
            turns = "".join(turn_html(t, self.tokenizer, k) for k in range(t.num_turns))
            blocks.append(f'<details open><summary style="font-weight:bold">'
                          f'{html.escape(_trajectory_label(i, t))}</summary>{turns}</details>')
        return f'<div class="trajectory-viewer-static">{_legend()}{"".join(blocks)}</div>'

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return _bundle(self.widget, self.static_html())

    def show(self) -> None:
        from IPython.display import display

        display(self)


def show_trajectory(trajectories: Trajectory | Sequence[Trajectory] | TrajectoryGroup, tokenizer,
                    interactive: bool | None = None) -> TrajectoryViewer | None:
    """Display trajectories turn by turn. interactive=None: the widget with a static copy for
    frontends without widgets; False: static HTML only (smallest notebook, same everywhere).
    Returns the viewer, or None when static."""
    from IPython.display import HTML, display

    viewer = TrajectoryViewer(trajectories, tokenizer)
    if interactive is False or viewer.widget is None:
        display(HTML(viewer.static_html()))
        return None
    display(viewer)
    return viewer


# ---------------------------------------------------------------------------------------------------------
# credit explorer: per-turn advantages under four credit methods (notebooks 05 to 08)
# ---------------------------------------------------------------------------------------------------------

def _trajectories(groups: TrajectoryGroup | Sequence[TrajectoryGroup] | Sequence[Trajectory]
                  ) -> list[Trajectory]:
    if isinstance(groups, TrajectoryGroup):
        return list(groups)
    return [t for g in groups for t in (g if isinstance(g, TrajectoryGroup) else [g])]


def credit_table(
    group: TrajectoryGroup | Sequence[TrajectoryGroup] | Sequence[Trajectory],
    *,
    methods: Sequence[str] | None = None,
    turn_rewards: Callable[[Step], float] | None = None,
    values: Callable[[Trajectory], Sequence[float]] | None = None,
    digits: int = 4,
    **options: Any,
):
    """Per-turn advantages of every trajectory under each credit method, as a pandas DataFrame.

    One row per (trajectory, turn t), index (trajectory, t); columns: action (shortened), reward (the
    step reward r_t; the last turn carries R(τ)), then one column per method (default: every method of
    `credit.CREDIT_METHODS`), each computed by `credit.advantages(method, inputs, **options)`, exactly as
    the trainer does (`train.batch.make_batch`), with the trainer's option names and defaults:
        outcome  A(τ) of `outcome_advantages`, the same on every turn
        gigpo    `gigpo_advantages` with step rewards r_t and each step's anchor (gamma, omega)
        turn     `turn_advantages` with per-turn rewards `turn_rewards(step)` (default
                 `rewards.process_reward`: −0.1 for a malformed action or tool error) (turn_weight, gamma)
        critic   turn-level `gae` on the per-turn rewards plus R(τ) on the last turn, with values
                 V = `values(trajectory)` (one per turn); without a trained value head V = 0, so A_t is the
                 λ-discounted return (gae_gamma, gae_lambda, whiten)
    `options`: options of the credit methods (e.g. gamma=0.9, gae_lambda=1.0); each method takes those it
    names. Trajectories are grouped by `group_id`. Values are rounded to `digits` (deterministic output).
    """
    import pandas as pd

    from course_lib import credit
    from course_lib.rewards import process_reward

    methods = list(credit.CREDIT_METHODS) if methods is None else list(methods)
    for method in methods:
        credit.credit_method_named(method)  # an unknown name: a ValueError that lists the methods
    trajectories = _trajectories(group)
    rows = [(t, k, s) for t in trajectories for k, s in enumerate(t.steps)]
    if not rows:
        raise ValueError("no turns to score: every trajectory is empty")
    score = turn_rewards or process_reward
    inputs = credit.CreditInputs.of(
        trajectories, turn_rewards=[[score(s) for s in t.steps] for t in trajectories],
        values=[list(values(t)) if values is not None else [0.0] * t.num_turns for t in trajectories])
    columns: dict[str, list] = {"action": [_short(s.action_text, 40) for _, _, s in rows],
                                "reward": [s.reward for _, _, s in rows]}
    for method in methods:
        result = credit.advantages(method, inputs, **options)
        columns[method] = [float(x) for a in result.advantages for x in a]
    index = pd.MultiIndex.from_tuples([(t.traj_id, k) for t, k, _ in rows], names=["trajectory", "t"])
    table = pd.DataFrame(columns, index=index)
    numeric = ["reward", *methods]
    table[numeric] = table[numeric].round(digits) + 0.0  # + 0.0 turns -0.0 into 0.0: stable printed output
    return table


def _advantage_color(value: float, scale: float) -> str:
    """White at 0, green for positive, red for negative advantages."""
    alpha = min(1.0, abs(value) / scale) * 0.6 if scale > 0 else 0.0
    rgb = "46,160,67" if value > 0 else "207,34,46"
    return f"rgba({rgb},{alpha:.2f})"


def credit_table_html(table) -> str:
    """A credit table as HTML with advantages shaded by sign and size (shared scale over methods)."""
    methods = [c for c in table.columns if c not in ("action", "reward")]
    scale = max((abs(v) for m in methods for v in table[m]), default=0.0)
    head = "".join(f"<th style='padding:2px 8px'>{html.escape(c)}</th>"
                   for c in ["trajectory", "t", *table.columns])
    body = []
    for (traj, t), row in table.iterrows():
        cells = [html.escape(str(traj)), str(t), f"<code>{html.escape(row['action'])}</code>",
                 f"{row['reward']:g}"]
        cells += [f"<span style='background:{_advantage_color(row[m], scale)};padding:0 4px'>"
                  f"{row[m]:+.3f}</span>" for m in methods]
        body.append("<tr>" + "".join(f"<td style='padding:2px 8px'>{c}</td>" for c in cells) + "</tr>")
    return (f"<table class='credit-table' style='border-collapse:collapse;font-size:12px'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


class CreditExplorer:
    """Pick a group, compare the per-turn advantages of its trajectories under each credit method.

    `explorer.widget` (ipywidgets), `explorer.dropdown` (None for one group), `explorer.output` (HTML);
    `explorer.table(i)` is group i's `credit_table`. The static view shows every group's table.
    """

    def __init__(self, groups: TrajectoryGroup | Sequence[TrajectoryGroup], tokenizer=None, **table_options):
        self.groups = [groups] if isinstance(groups, TrajectoryGroup) else list(groups)
        if not self.groups:
            raise ValueError("credit_explorer needs at least one TrajectoryGroup")
        self.tokenizer = tokenizer
        self.table_options = table_options
        self.widget = self.dropdown = self.output = None
        widgets = _widgets()
        if widgets is None:
            return
        self.output = widgets.HTML(value=self.group_html(0))
        parts = [self.output]
        if len(self.groups) > 1:
            self.dropdown = widgets.Dropdown(
                options=[(f"{i}: {g.group_id} (rewards {', '.join(f'{r:g}' for r in g.rewards)})", i)
                         for i, g in enumerate(self.groups)], value=0, description="group")
            self.dropdown.observe(
                lambda change: setattr(self.output, "value", self.group_html(change["new"])), names="value")
            parts.insert(0, self.dropdown)
        self.widget = widgets.VBox(parts)

    def table(self, i: int = 0):
        return credit_table(self.groups[i], **self.table_options)

    def group_html(self, i: int) -> str:
        """Group i: its advantage table and, given a tokenizer, each trajectory's turns side by side."""
        group = self.groups[i]
        out = [f"<div style='font-weight:bold;font-size:13px'>{html.escape(str(group.group_id))}</div>",
               credit_table_html(self.table(i))]
        if self.tokenizer is not None:
            for t in group:
                turns = "".join(turn_html(t, self.tokenizer, k) for k in range(t.num_turns))
                out.append(f"<details><summary>{html.escape(str(t.traj_id))} (R={t.reward:g})</summary>"
                           f"{turns}</details>")
        return "".join(out)

    def static_html(self) -> str:
        return "<hr>".join(self.group_html(i) for i in range(len(self.groups)))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return _bundle(self.widget, self.static_html())


def credit_explorer(groups: TrajectoryGroup | Sequence[TrajectoryGroup], tokenizer=None,
                    methods: Sequence[str] | None = None, **table_options) -> CreditExplorer:
    """A dropdown over groups and the per-turn advantage table (see `credit_table` for the methods,
    `turn_rewards`, `values` and the credit options). Display the returned explorer (last line of
    a cell); without a widget frontend it shows every group's table as static HTML."""
    return CreditExplorer(groups, tokenizer, methods=methods, **table_options)
