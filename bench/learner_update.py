"""The MAGRPO update's time in three forms, in one run: per sample, grouped and padded, packed.

Builds the samples of one step as training sees them — T HumanEval training tasks, each agent's
chat-templated prompt, G completions per task (random token ids: the update's cost depends on
lengths, not content) — and times one update of one agent's LoRA in each form:

    per-sample  every sample's prompt + completion in the forward/backward, micro-batches of
                `micro_batch` (left-padded), as `completion_logprobs` does
    padded      each group's prompt once, its KV cache repeated to G rows, the completions
                right-padded to the longest (the learner's update until 2026-11-26)
    packed      today's group pass (`group_logprobs`, as `AgentPolicies.update` runs it): each
                group's prompt once, its G completions end to end in one row under a
                per-completion attention mask, the vocabulary projection only where a logit
                predicts a token: no padding

All three give the same loss (tests/test_magrpo.py checks the packed log-probs against
per-sample ones to 1e-5); the ratios are the speed-ups. Sampled completions differ in length:
`--lengths` gives a group's lengths as fractions of `--max-tokens`, cycled over the G samples.
The default, 1.0,0.45,0.3,0.2, pads about as much as the untrained team's sampled HumanEval
answers do (4 a problem, T = 0.8: 41-47% of a padded group's completion positions were padding).
Rollouts (vLLM) are not part of it: see `coteam train`'s step_s.

`--check` prints instead how far the padded and packed log-probs are from per-sample ones
(random LoRA weights, a 300-token prompt, completions of 160, 72, 31 and 100 tokens), in fp32
and in bf16.

`--view class` times instead the update as training runs it (`AgentPolicies.update`) on one
agent's samples of a class step in the incremental view (`coteam train --task class
--incremental`: each method's prompt the class's skeleton, then the agent's own earlier
methods of that sample, then the ask; `--tasks` training classes drawn with a fixed seed, the
agent's dealt methods, G samples each, random completions of the --lengths), its batches formed
two ways: the samples with the same prompt packed, the rest per sample in micro-batches (the
update until 2026-12-07), and the samples that share a long prompt prefix packed on it
(`prefix_groups`, today's; `--group-tokens` bounds a packed row, several bounds timed if
listed). The same loss either way; the ratios are the speed-ups.

`--processes N` times instead the update as training runs it (`AgentPolicies.update`) under
`torchrun` with 1 and N processes (data parallel: each rank a share of the batches, gradients
summed by torch.distributed) and prints the ratio.

Usage: python bench/learner_update.py [--model PRESET|FOLDER] [--tasks 2] [--group-size 4]
                                      [--max-tokens 192] [--lengths 1.0,0.45,0.3,0.2]
                                      [--repeats 2] [--check | --processes N |
                                       --view class [--group-tokens 3072]]
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.tasks import split_tasks  # noqa: E402
from learner.config import MAGRPOConfig  # noqa: E402
from learner.magrpo import (  # noqa: E402
    GROUP_TOKENS,
    AgentPolicies,
    Sample,
    policy_loss,
)


def per_sample_logprobs(policies: AgentPolicies, agent: int, samples: list[Sample]):
    c = policies.config
    return [
        lp
        for start in range(0, len(samples), c.micro_batch)
        for lp in policies.completion_logprobs(agent, samples[start : start + c.micro_batch])
    ]


def padded_logprobs(policies: AgentPolicies, agent: int, samples: list[Sample]):
    """The group pass before packing: the prompt's cache repeated to one right-padded row per
    completion, the full vocabulary projected at every position."""
    policies.model.set_adapter(policies.adapter_name(agent))
    for p in policies.parameters(agent):
        p.requires_grad_(True)
    result = []
    device = policies.device
    for group in _groups(samples):
        prompt_ids, completions = group[0].prompt_ids, [s.completion_ids for s in group]
        n_rows, n_prompt = len(completions), len(prompt_ids)
        head = policies.model(
            input_ids=torch.tensor([prompt_ids], device=device), use_cache=True, logits_to_keep=1
        )
        cache = head.past_key_values
        cache.batch_repeat_interleave(n_rows)
        width = max(len(c) for c in completions)
        input_ids = torch.zeros(n_rows, width, dtype=torch.long)
        attention = torch.zeros(n_rows, n_prompt + width, dtype=torch.long)
        attention[:, :n_prompt] = 1
        for row, ids in enumerate(completions):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, n_prompt : n_prompt + len(ids)] = 1
        positions = torch.arange(n_prompt, n_prompt + width).expand(n_rows, -1)
        tail = policies.model(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            position_ids=positions.to(device),
            past_key_values=cache,
        ).logits
        logits = torch.cat([head.logits[:, -1:].expand(n_rows, -1, -1), tail[:, :-1]], dim=1)
        for row, ids in enumerate(completions):
            logp = torch.log_softmax(logits[row, : len(ids)].float(), dim=-1)
            result.append(logp.gather(1, torch.tensor(ids, device=device)[:, None]).squeeze(1))
    return result


def best_times(forms: dict, run, repeats: int) -> dict[str, float]:
    """`run(form)` for each form once to warm up, then `repeats` rounds of every form in turn
    (so a busy machine slows each alike); the best seconds of each form."""
    timings: dict[str, list[float]] = {name: [] for name in forms}
    for round_ in range(repeats + 1):
        for name, form in forms.items():
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            run(form)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if round_:
                timings[name].append(time.perf_counter() - t0)
    return {name: min(times) for name, times in timings.items()}


def timed_update(logprobs_of, policies: AgentPolicies, samples, advantages) -> None:
    """One optimizer step of agent 0 from the log-probs that `logprobs_of` computes."""
    optimizer = policies.optimizers[0]
    optimizer.zero_grad()
    policy_loss([lp.cpu() for lp in logprobs_of(policies, 0, samples)], advantages).backward()
    torch.nn.utils.clip_grad_norm_(policies.parameters(0), policies.config.max_grad_norm)
    optimizer.step()


def check(policies: AgentPolicies) -> None:
    """How far the padded and the packed pass are from the per-sample one, in fp32 and in bf16,
    with random LoRA weights (a fresh LoRA's B is zero, which would hide a wrong prompt pass)."""
    with torch.no_grad():
        for p in policies.parameters(0):
            p.normal_(0, 0.02)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 30000, (300,), generator=generator).tolist()
    completions = [
        torch.randint(0, 30000, (n,), generator=generator).tolist() for n in (160, 72, 31, 100)
    ]
    samples = [Sample(prompt, c) for c in completions]
    for dtype in (torch.float32, torch.bfloat16):
        policies.model.to(dtype)
        with torch.no_grad():
            alone = per_sample_logprobs(policies, 0, samples)
            forms = {
                "padded": padded_logprobs(policies, 0, samples),
                "packed": policies.group_logprobs(0, samples),
            }
        for name, logprobs in forms.items():
            worst = max(
                (a.cpu() - b.cpu()).abs().max().item() for a, b in zip(logprobs, alone, strict=True)
            )
            print(f"{dtype}: max |{name} - per-sample| log-prob = {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument(
        "--lengths",
        default="1.0,0.45,0.3,0.2",
        help="a group's completion lengths as fractions of --max-tokens, cycled over G",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--check",
        action="store_true",
        help="instead of timing: each form's largest log-prob difference from per-sample",
    )
    parser.add_argument(
        "--processes",
        type=int,
        help="instead: time `AgentPolicies.update` under torchrun with 1 and this many "
        "processes (data parallel; gloo on CPU, NCCL on GPUs) and print the ratio",
    )
    parser.add_argument(
        "--view",
        choices=("coding", "class"),
        default="coding",
        help="class: time instead the update on a class step's samples in the incremental view, "
        "batched by the same prompt (before) and by a shared prefix (today)",
    )
    parser.add_argument(
        "--group-tokens",
        default=str(GROUP_TOKENS),
        help="--view class: the packed row's bound (`prefix_groups`), a comma-separated list to "
        "time several",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="--view class, instead of timing: one update for each --group-tokens bound, each in "
        "a process of its own, with its seconds and the process's peak resident memory",
    )
    parser.add_argument("--ddp-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.processes:
        return compare_processes(args)
    if args.ddp_worker:
        return ddp_worker(args)
    if args.memory and args.view != "class":
        parser.error("--memory measures the class view's update: add --view class")
    if args.memory and "," in args.group_tokens:
        return memory_per_bound(args)
    torch.set_num_threads(os.cpu_count() or 1)
    path = provision_model(args.model)
    policies = AgentPolicies(str(path), n_agents=1, config=MAGRPOConfig())
    if args.check:
        return check(policies)
    if args.view == "class":
        return (one_update if args.memory else compare_class_batches)(args, policies, path)
    samples, advantages = step_samples(args, path)
    lengths = [len(s.completion_ids) for s in samples[: args.group_size]]
    prompt_tokens = sum(len(s.prompt_ids) for s in samples) // len(samples)
    padding = 1 - sum(lengths) / (max(lengths) * len(lengths))
    print(
        f"{args.tasks} tasks x G{args.group_size}: {len(samples)} samples of one agent, "
        f"prompt ~{prompt_tokens} tokens, a group's completions {lengths} tokens "
        f"({padding:.0%} padding when padded); {policies.device}, {torch.get_num_threads()} threads"
    )
    forms = {
        "per-sample": per_sample_logprobs,
        "padded": padded_logprobs,
        "packed": lambda p, agent, s: [
            lp for group in _groups(s) for lp in p.group_logprobs(agent, group)
        ],
    }
    best = best_times(
        forms, lambda form: timed_update(form, policies, samples, advantages), args.repeats
    )
    for name, seconds in best.items():
        print(
            f"{name:10s} {seconds:7.2f} s per agent update  ({len(samples) / seconds:6.2f} samples/s)"
            f"  {best['per-sample'] / seconds:.2f}x per-sample, {best['padded'] / seconds:.2f}x padded"
        )


def step_samples(args: argparse.Namespace, path) -> tuple[list[Sample], torch.Tensor]:
    """One agent's samples of a step (the tasks' chat-templated prompts, G random completions of
    the --lengths each) and their advantages, the same in every process."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    fractions = [float(f) for f in args.lengths.split(",")]
    samples = []
    for task in split_tasks("coding", "train")[: args.tasks]:
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": task.prompt}], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer.encode(chat, add_special_tokens=False)
        for g in range(args.group_size):
            n = max(1, round(args.max_tokens * fractions[g % len(fractions)]))
            ids = torch.randint(0, 30000, (n,), generator=generator).tolist()
            samples.append(Sample(prompt, ids))
    return samples, torch.randn(len(samples), generator=generator)


def class_samples(args: argparse.Namespace, path) -> tuple[list[Sample], torch.Tensor]:
    """Agent 1's samples of a class step in the incremental view: for each of --tasks training
    classes (a seeded draw, as a step's are) and each of G samples, its dealt methods one after
    another, each prompt holding the sample's own earlier methods (openings, random tokens)."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from agents.kinds.class_team import method_messages
    from agents.kinds.classes import class_splits, deal

    tokenizer = AutoTokenizer.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    fractions = [float(f) for f in args.lengths.split(",")]
    samples = []
    for problem in random.Random(0).sample(class_splits()["train"], args.tasks):
        team = SimpleNamespace(problem=problem, dealt=deal(problem, 2))
        for g in range(args.group_size):
            n = max(1, round(args.max_tokens * fractions[g % len(fractions)]))
            seen = []
            for method in team.dealt[0]:
                messages = method_messages(team, 0, method, seen)
                prompt = tokenizer.apply_chat_template(
                    messages, continue_final_message=True, tokenize=False
                )
                ids = torch.randint(0, 30000, (n,), generator=generator).tolist()
                samples.append(Sample(tokenizer.encode(prompt, add_special_tokens=False), ids))
                seen.append(SimpleNamespace(text=messages[-1]["content"] + tokenizer.decode(ids)))
    return samples, torch.randn(len(samples), generator=generator)


def compare_class_batches(args: argparse.Namespace, policies: AgentPolicies, path) -> None:
    """`AgentPolicies.update` on a class step's samples, batched by the same prompt and by a
    shared prefix, alternated --repeats times after a warm-up of each; the best of each."""
    from unittest import mock

    import learner.magrpo as magrpo

    samples, advantages = class_samples(args, path)
    forms = {"same prompt": same_prompt}
    for cap in (int(c) for c in args.group_tokens.split(",")):
        forms[f"prefix, {cap}"] = functools.partial(magrpo.prefix_groups, group_tokens=cap)
    for name, grouping in forms.items():
        with mock.patch.object(magrpo, "prefix_groups", grouping):
            batches = magrpo._batches(samples, policies.config.micro_batch)
        packed = sum(len(ids) for ids, shared in batches if shared)
        print(f"{name}: {len(batches)} passes, {packed} of {len(samples)} samples packed")
    tokens = sum(len(s.prompt_ids) for s in samples) // len(samples)
    print(f"{len(samples)} samples of one agent, prompt ~{tokens} tokens; {policies.device}")

    def batched_update(grouping) -> None:
        with mock.patch.object(magrpo, "prefix_groups", grouping):
            policies.update(0, samples, advantages)

    best = best_times(forms, batched_update, args.repeats)
    for name, seconds in best.items():
        print(
            f"{name:16s} {seconds:7.2f} s per agent update  "
            f"{best['same prompt'] / seconds:.2f}x same prompt"
        )


def memory_per_bound(args: argparse.Namespace) -> None:
    """This script again with --memory for each --group-tokens bound, one process each: a
    process's peak memory is only its own."""
    import subprocess

    for cap in args.group_tokens.split(","):
        argv = [a for a in sys.argv[1:] if not a.startswith("--group-tokens")]
        argv = [a for a in argv if a != args.group_tokens]
        subprocess.run([sys.executable, __file__, *argv, f"--group-tokens={cap}"], check=True)


def one_update(args: argparse.Namespace, policies: AgentPolicies, path) -> None:
    """One `AgentPolicies.update` on a class step's samples grouped under one bound: its passes,
    seconds and the process's peak resident memory, before the update and after."""
    import resource
    from unittest import mock

    import learner.magrpo as magrpo

    samples, advantages = class_samples(args, path)
    cap = int(args.group_tokens)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    grouping = functools.partial(magrpo.prefix_groups, group_tokens=cap)
    with mock.patch.object(magrpo, "prefix_groups", grouping):
        passes = len(magrpo._batches(samples, policies.config.micro_batch))
        t0 = time.perf_counter()
        policies.update(0, samples, advantages)
        seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(
        f"bound {cap}: {len(samples)} samples, {passes} passes, {seconds:.1f} s, peak memory "
        f"{peak:.2f} GB ({before:.2f} GB before the update)",
        flush=True,
    )


def ddp_worker(args: argparse.Namespace) -> None:
    """One rank under torchrun: the best of --repeats updates (after a warm-up), from rank 0."""
    import json

    import torch.distributed as dist

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    world = dist.get_world_size()
    if torch.cuda.is_available():
        torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    else:  # the machine's cores shared between the ranks
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    path = provision_model(args.model)
    policies = AgentPolicies(str(path), n_agents=1, config=MAGRPOConfig())
    samples, advantages = step_samples(args, path)
    policies.update(0, samples, advantages)  # warm-up
    times = []
    for _ in range(args.repeats):
        dist.barrier()
        t0 = time.perf_counter()
        policies.update(0, samples, advantages)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        print(json.dumps({"processes": world, "seconds": min(times), "samples": len(samples)}))
    dist.destroy_process_group()


def compare_processes(args: argparse.Namespace) -> None:
    """The update's time with 1 and with --processes processes, measured in this run."""
    import json
    import subprocess

    seconds = {}
    for n in dict.fromkeys((1, args.processes)):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={n}", __file__, "--ddp-worker", "--model", args.model,
            "--tasks", str(args.tasks), "--group-size", str(args.group_size),
            "--max-tokens", str(args.max_tokens), "--lengths", args.lengths,
            "--repeats", str(args.repeats),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"torchrun with {n} process(es) failed:\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        seconds[n] = result["seconds"]
        print(
            f"{n} process(es): {result['seconds']:.2f} s per agent update of "
            f"{result['samples']} samples"
        )
    if len(seconds) == 2:
        print(f"{args.processes} processes: {seconds[1] / seconds[args.processes]:.2f}x one")


def same_prompt(samples: list[Sample]) -> list[list[int]]:
    """Indices of the samples that have the same prompt, a list each, in first-seen order (the
    update's groups until 2026-12-07; the padded form's groups)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        by_prompt.setdefault(tuple(s.prompt_ids), []).append(i)
    return list(by_prompt.values())


def _groups(samples: list[Sample]) -> list[list[Sample]]:
    """The samples that have the same prompt, a list each, in first-seen order."""
    return [[samples[i] for i in ids] for ids in same_prompt(samples)]


if __name__ == "__main__":
    main()
