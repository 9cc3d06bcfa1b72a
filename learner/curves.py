"""Plots of training: mean joint reward per step (with the group maxima), as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_training_curve(
    history: list[dict], path: str | Path, title: str = "MAGRPO", pass_steps: int | None = None
) -> Path:
    """Write the reward curve of a run (`history` as `learner.train.train` returns it).

    With `pass_steps` (steps per pass over a small task set that training cycles through), the
    mean of each pass is drawn at its last step: passes see the same tasks, so they compare; a
    moving mean of 3 steps otherwise.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = [h["step"] for h in history]
    means = [h["reward_mean"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, means, marker="o", label="mean joint reward")
    ax.plot(steps, [h["reward_max"] for h in history], ls="--", alpha=0.6, label="best sample")
    if pass_steps and len(history) >= 2 * pass_steps:
        ends = range(pass_steps, len(history) + 1, pass_steps)
        per_pass = [sum(means[end - pass_steps : end]) / pass_steps for end in ends]
        ax.plot(
            [steps[end - 1] for end in ends], per_pass, marker="s", lw=2,
            label=f"mean per pass over the tasks ({pass_steps} steps)",
        )  # fmt: skip
    elif len(history) >= 3:
        window = 3
        smooth = [
            sum(means[max(0, i - window + 1) : i + 1]) / min(i + 1, window)
            for i in range(len(means))
        ]
        ax.plot(steps, smooth, lw=2, alpha=0.8, label=f"moving mean ({window})")
    ax.set_xlabel("training step")
    ax.set_ylabel("joint reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
