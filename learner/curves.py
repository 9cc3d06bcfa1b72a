"""Plots of training: mean joint reward per step (with the group maxima), as PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_training_curve(history: list[dict], path: str | Path, title: str = "MAGRPO") -> Path:
    """Write the reward curve of a run (`history` as `learner.train.train` returns it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, [h["reward_mean"] for h in history], marker="o", label="mean joint reward")
    ax.plot(steps, [h["reward_max"] for h in history], ls="--", alpha=0.6, label="best sample")
    if len(history) >= 3:
        window = 3
        means = [h["reward_mean"] for h in history]
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
