"""The MAGRPO update's time, before and after computing each group's prompt once, in one run.

Builds the samples of one step as training sees them — T HumanEval training tasks, each agent's
chat-templated prompt, G completions per task of `--max-tokens` tokens (random token ids: the
update's cost depends on lengths, not content) — and times one `AgentPolicies.update` per agent:

    per-sample  the update before: every sample's prompt + completion in the forward/backward,
                micro-batches of `micro_batch` (left-padded), as `completion_logprobs` does
    grouped     today's update: each group's prompt once (KV cache repeated to the G branches)

Both give the same loss (tests/test_magrpo.py checks the log-probs to 1e-5); the ratio is the
speed-up of the update. Rollouts (vLLM) are not part of it: see `coteam train`'s step_s.

Usage: python bench/learner_update.py [--model PRESET|FOLDER] [--tasks 2] [--group-size 4]
                                      [--max-tokens 160] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from agents.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.tasks import split_tasks  # noqa: E402
from learner.magrpo import AgentPolicies, MAGRPOConfig, Sample, policy_loss  # noqa: E402


def per_sample_update(policies: AgentPolicies, agent: int, samples, advantages) -> float:
    """The update as it was: every sample's full sequence, micro-batches in the given order."""
    c = policies.config
    optimizer = policies.optimizers[agent]
    optimizer.zero_grad()
    for start in range(0, len(samples), c.micro_batch):
        chunk = samples[start : start + c.micro_batch]
        logprobs = policies.completion_logprobs(agent, chunk)
        loss = policy_loss(logprobs, advantages[start : start + c.micro_batch])
        (loss * len(chunk) / len(samples)).backward()
    torch.nn.utils.clip_grad_norm_(policies.parameters(agent), c.max_grad_norm)
    optimizer.step()
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    from transformers import AutoTokenizer

    path = provision_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    policies = AgentPolicies(str(path), n_agents=1, config=MAGRPOConfig())
    generator = torch.Generator().manual_seed(0)
    samples = []
    for task in split_tasks("coding", "train")[: args.tasks]:
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": task.prompt}], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(chat, add_special_tokens=False)
        for g in range(args.group_size):
            n = args.max_tokens - 20 * g  # completions of different lengths, as sampled
            ids = torch.randint(0, 30000, (n,), generator=generator).tolist()
            samples.append(Sample(prompt, ids))
    advantages = torch.randn(len(samples), generator=generator)
    prompt_tokens = sum(len(s.prompt_ids) for s in samples) // len(samples)
    print(
        f"{args.tasks} tasks x G{args.group_size}: {len(samples)} samples of one agent, "
        f"prompt ~{prompt_tokens} tokens, completions {args.max_tokens - 20 * (args.group_size - 1)}"
        f"-{args.max_tokens} tokens; {torch.get_num_threads()} threads"
    )
    timings: dict[str, list[float]] = {"per-sample": [], "grouped": []}
    policies.update(0, samples, advantages)  # warm-up
    for _ in range(args.repeats):
        for name, update in (
            ("per-sample", per_sample_update),
            ("grouped", AgentPolicies.update),
        ):
            t0 = time.perf_counter()
            update(policies, 0, samples, advantages)
            timings[name].append(time.perf_counter() - t0)
    best = {name: min(times) for name, times in timings.items()}
    for name, seconds in best.items():
        print(
            f"{name:10s} {seconds:6.1f} s per agent update  ({len(samples) / seconds:.2f} samples/s)"
        )
    print(f"speed-up of the update: {best['per-sample'] / best['grouped']:.2f}x")


if __name__ == "__main__":
    main()
