"""Team benchmark: wall time of a 2-agent `parallel` episode against a `single` agent on the same
coding tasks (greedy, one turn), run alternately so load on the machine hits both alike.

The parallel team writes about twice the tokens of the single agent, but its two requests reach
the server together and are batched, so it should take well under twice the time.

Usage: python bench/team.py [--problems 0 1 2 3 4] [--repeats 2] [--max-tokens 256]
                            [--vllm-url URL] [--model PRESET|FOLDER]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.serving.models import DEFAULT_MODEL  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402
from agents.tasks import humaneval_task  # noqa: E402
from agents.team.episode import run_episode  # noqa: E402
from agents.team.graph import Sampling, TeamSettings  # noqa: E402

SHAPES = {"single": 1, "parallel": 2}


def measure(policy, problems: list[int], repeats: int, max_tokens: int, db: Path) -> list[dict]:
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=max_tokens)
    rows = []
    run_episode(
        humaneval_task(problems[0]), policy, TeamSettings(shape="single", sampling=sampling), db=db
    )
    for repeat in range(repeats):
        for problem in problems:
            for shape, size in SHAPES.items():
                result = run_episode(
                    humaneval_task(problem),
                    policy,
                    TeamSettings(shape=shape, agents=size, sampling=sampling),
                    db=db,
                )
                tokens = sum(s["completion_tokens"] for s in result.steps)
                rows.append(
                    {
                        "problem": problem,
                        "repeat": repeat,
                        "shape": shape,
                        "wall_s": result.wall_time_s,
                        "tokens": tokens,
                    }
                )
                print(
                    f"HumanEval/{problem:<3} {shape:<9} {result.wall_time_s:6.2f} s "
                    f"{tokens:4d} tokens",
                    flush=True,
                )
    return rows


def report(rows: list[dict]) -> None:
    def total(shape, key):
        return sum(r[key] for r in rows if r["shape"] == shape)

    pairs = {}
    for r in rows:
        pairs.setdefault((r["problem"], r["repeat"]), {})[r["shape"]] = r
    ratios = [p["parallel"]["wall_s"] / p["single"]["wall_s"] for p in pairs.values()]
    single_s, parallel_s = total("single", "wall_s"), total("parallel", "wall_s")
    single_t, parallel_t = total("single", "tokens"), total("parallel", "tokens")
    print(
        f"\nsingle:   {single_s:7.1f} s in all, {single_t} tokens ({single_t / single_s:.1f} tok/s)"
    )
    print(
        f"parallel: {parallel_s:7.1f} s in all, {parallel_t} tokens "
        f"({parallel_t / parallel_s:.1f} tok/s)"
    )
    print(f"parallel / single wall time: {parallel_s / single_s:.2f} (sums)")
    print(
        f"per task pair: median {statistics.median(ratios):.2f}, "
        f"min {min(ratios):.2f}, max {max(ratios):.2f}"
    )
    print(f"parallel / single tokens written: {parallel_t / single_t:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--vllm-url")
    parser.add_argument("--model", default=os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "bench.db"
        with connect_or_start(args.vllm_url, ServerConfig(model=args.model, agents=2)) as client:
            rows = measure(client, args.problems, args.repeats, args.max_tokens, db)
        report(rows)


if __name__ == "__main__":
    main()
