"""Serving benchmark: tokens/s of the same model through the vLLM server and through transformers
`generate`, at batch 1 and with 8 concurrent requests, printed with their ratios; the server is
measured with the weights in each dtype asked (bf16, the model's own, and float32: on a CPU
without native bf16 the server's default is float32, `agents.serving.server.cpu_has_bf16`); plus batch-1
decode against the memory-bandwidth bound; and the server's tokens/s per stream when 4 greedy
requests, each held to the full length, decode side by side (a 4-writer team) against one
alone. With `--lora`, the cost of serving adapters of the learner's shape (rank, alpha and target
modules of `MAGRPOConfig`) on a server with the app's 8 adapter slots: greedy, each request held
to the full length, the base model and the adapters taking turns, batch 1 through one adapter
and 8 concurrent requests through one, two and four (shared out in turn); the 8 sampled requests
through two adapters, as a trained team's calls are; and a training step's rollout is timed,
on the base model and through the two adapters: the 16 requests of 2 coding training tasks x 2
agents x G = 4 samples, each agent's own observation (prompts of about 450 tokens, which
one-line tasks do not show). With `--without-plugin` every
server is measured again without CoTeam's vLLM plugin (agents/serving/vllm_plugin): vLLM's own CPU LoRA
ops, the baseline of the plugin's gain.

Bound: decoding one token at batch 1 reads every weight matrix once, so tokens/s <= read bandwidth
/ weight bytes read per token. Read bandwidth is measured here (torch.sum over 1 GiB on all cores);
the bytes read per token are the parameters in the dtype served (2 bytes in bf16, 4 in float32),
less the input embedding when it is not tied to the output layer (a lookup reads one row of it).

Usage: python bench/serving.py [--model PRESET|FOLDER] [--tokens 128]
                               [--dtypes bfloat16,float32 | --vllm-url URL] [--lora]
                               [--without-plugin]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.policy import PolicyClient, Request  # noqa: E402
from agents.serving.server import ServerConfig, connect_or_start  # noqa: E402

TASKS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that counts the vowels in a string.",
    "Write a Python function that returns the prime factors of an integer.",
    "Write a Python function that flattens a nested list.",
    "Write a Python function that transposes a matrix given as a list of lists.",
    "Write a Python function that returns the longest common prefix of a list of strings.",
]


def messages(task: str) -> list[dict]:
    return [{"role": "user", "content": task}]


def read_bandwidth_gbs(size_mb: int = 1024, repeats: int = 5) -> float:
    data = torch.ones(size_mb * 2**20 // 4)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return data.numel() * 4 / best / 1e9


def bench_transformers(model_path, tokens: int) -> dict[str, float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    # fp32: the fastest transformers dtype on this CPU (bf16 matmuls are slower here)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    params = sum(p.numel() for p in model.parameters())  # tied weights count once
    embedding = model.get_input_embeddings().weight
    tied = model.get_output_embeddings().weight is embedding
    read_per_token = params if tied else params - embedding.numel()

    def run(tasks: list[str]) -> float:
        chats = [
            tokenizer.apply_chat_template(messages(t), add_generation_prompt=True, tokenize=False)
            for t in tasks
        ]
        batch = tokenizer(chats, return_tensors="pt", padding=True)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=tokens,
                do_sample=len(tasks) > 1,
                temperature=0.8,
                top_p=0.95,
            )
        elapsed = time.perf_counter() - start
        new = out[:, batch["input_ids"].shape[1] :]
        produced = int((new != tokenizer.pad_token_id).sum())
        return produced / elapsed

    run(TASKS[:1])  # warm-up
    return {"batch1": run(TASKS[:1]), "batch8": run(TASKS), "read_params": read_per_token}


def lora_adapters(model_path, folder: Path, count: int = 4) -> list[Path]:
    """`count` PEFT LoRA adapters of the learner's shape, saved under `folder`. Freshly made (B = 0,
    so they answer as the base model does) they cost the server what trained ones cost."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from learner.config import MAGRPOConfig

    c = MAGRPOConfig()
    config = LoraConfig(
        r=c.lora_rank, lora_alpha=c.lora_alpha, target_modules=list(c.target_modules)
    )
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32), config
    )
    paths = [folder / f"agent{k}" for k in range(count)]
    for path in paths:  # the same weights under separate names: each takes its own LoRA slot
        model.save_pretrained(path)
    return paths


def rollout_requests(tokens: int, names: list[str | None]) -> list[Request]:
    """A training step's rollout (`learner.train`'s defaults): 2 coding training tasks x 2 agents
    x G = 4 samples, each agent's own first observation, sampled; agent k through `names[k]`."""
    from bench.learner import bench_tasks, team_view

    views = [team_view(task, "parallel", 2)[1] for task in bench_tasks(2)]
    return [
        Request(view[k], adapter=names[k], max_tokens=tokens, temperature=0.8, top_p=0.95)
        for view in views
        for k in (0, 1)
        for _ in range(4)
    ]


def bench_vllm(client: PolicyClient, tokens: int, adapters: list[Path] = ()) -> dict[str, float]:
    def run(
        tasks: list[str], temperature: float, names: list[str | None] = (None,), held: int = 0
    ) -> float:
        start = time.perf_counter()
        done = client.generate(
            [
                Request(
                    messages(t),
                    max_tokens=tokens,
                    min_tokens=held,
                    temperature=temperature,
                    top_p=0.95,
                    adapter=names[k % len(names)],
                )
                for k, t in enumerate(tasks)
            ]
        )
        return sum(c.completion_tokens for c in done) / (time.perf_counter() - start)

    run(TASKS[:1], 0.0)  # warm-up
    figures = {"batch1": run(TASKS[:1], 0.0), "batch8": run(TASKS, 0.8)}
    # a 4-writer team's batch against one writer: each request held to the full length, so the
    # streams decode side by side to the end (tok/s per stream)
    figures["one_held"] = run(TASKS[:1], 0.0, held=tokens)
    figures["four_held"] = run(TASKS[:4], 0.0, held=tokens) / 4
    if adapters:
        names = [f"bench-lora{k}" for k in range(len(adapters))]
        for name, path in zip(names, adapters, strict=True):
            client.load_adapter(name, str(path))
        run(TASKS[:4], 0.0, names)  # warm-up: the adapters' first use
        # greedy, each request held to the full length (the same work every time), the base
        # model and the adapters taking turns, so that all see the machine in the same state:
        # batch 1 through one adapter, and 8 concurrent requests through 1, 2 and 4 (in turn)
        turns = {key: [] for key in ("batch1_base", "batch1_lora", "batch8_base")}
        turns |= {f"batch8_lora{n}": [] for n in (1, 2, 4)}
        for task in TASKS[:3] * 2:
            turns["batch1_base"].append(run([task], 0.0, held=tokens))
            turns["batch1_lora"].append(run([task], 0.0, names[:1], held=tokens))
        for _ in range(2):
            turns["batch8_base"].append(run(TASKS, 0.0, held=tokens))
            for n in (1, 2, 4):
                turns[f"batch8_lora{n}"].append(run(TASKS, 0.0, names[:n], held=tokens))
        figures |= {key: sum(v) / len(v) for key, v in turns.items()}
        figures["batch8_lora"] = run(TASKS, 0.8, names[:2])  # sampled, as a team's calls are
        for key, team in (("rollout_base_s", [None, None]), ("rollout_lora_s", names[:2])):
            start = time.perf_counter()  # each prompt new to the server's prefix cache
            client.generate(rollout_requests(tokens, team))
            figures[key] = time.perf_counter() - start
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    parser.add_argument(
        "--dtypes", default="bfloat16,float32", help="the server's weight types to measure, in turn"
    )
    parser.add_argument("--vllm-url", help="measure this running server instead of starting one")
    parser.add_argument(
        "--lora",
        action="store_true",
        help="also measure adapters: batch 1 through one and on the base model in turn, the 8 "
        "concurrent requests through 1, 2 and 4 adapters, and a training step's rollout on the "
        "base model and through two",
    )
    parser.add_argument(
        "--without-plugin",
        action="store_true",
        help="measure each server again without CoTeam's vLLM plugin (vLLM's own CPU LoRA ops)",
    )
    args = parser.parse_args()
    if args.without_plugin and args.vllm_url:
        parser.error("--without-plugin starts its own servers: leave out --vllm-url")
    model_path = provision_model(args.model)
    dtypes = ["served"] if args.vllm_url else args.dtypes.split(",")
    adapters, scratch = [], None
    if args.lora:  # the adapters' folder is removed when `scratch` goes, at the end of main
        scratch = tempfile.TemporaryDirectory(prefix="coteam-bench-lora-")
        adapters = lora_adapters(model_path, Path(scratch.name))

    print(f"model {args.model}, {args.tokens} new tokens per request, {os.cpu_count()} cores")
    bandwidth = read_bandwidth_gbs()
    print(f"memory read bandwidth (torch.sum over 1 GiB): {bandwidth:.1f} GB/s")
    print("transformers generate (float32) ...", flush=True)
    hf = bench_transformers(model_path, args.tokens)
    vl = {}
    servers = [(d, True) for d in dtypes] + [(d, False) for d in dtypes if args.without_plugin]
    for dtype, plugin in servers:
        label = dtype if plugin else f"{dtype}, vLLM ops"
        print(f"vLLM server ({label}) ...", flush=True)
        config = ServerConfig(
            model=str(model_path),
            agents=4,  # the app's: 8 adapter slots
            dtype=None if args.vllm_url else dtype,
            coteam_plugin=plugin,
        )
        with connect_or_start(args.vllm_url, config) as client:
            vl[label] = bench_vllm(client, args.tokens, adapters)
    labels = list(vl)

    print()
    print(f"{'':30s}{'transformers':>14s}" + "".join(f"{'vLLM ' + d:>24s}" for d in labels))
    for key, label in (
        ("batch1", "batch 1, greedy (tok/s)"),
        ("batch8", "8 concurrent, sampled (tok/s)"),
    ):
        cells = "".join(f"{vl[d][key]:17.1f} ({vl[d][key] / hf[key]:.1f}x)" for d in labels)
        print(f"{label:30s}{hf[key]:14.1f}{cells}")
    cells = "".join(
        f"{vl[d]['four_held']:16.1f} ({vl[d]['four_held'] / vl[d]['one_held']:.2f}x)"
        for d in labels
    )
    print(f"{'4 concurrent, per stream':30s}{'':>14s}{cells}  (x: of one stream alone)")
    if adapters:
        print("held to full length, greedy, base model and adapters taking turns (tok/s):")
        rows = [("batch1_base", "batch1_base", "batch 1, base model")]
        rows += [("batch1_lora", "batch1_base", "batch 1, 1 LoRA")]
        rows += [("batch8_base", "batch8_base", "8 concurrent, base model")]
        rows += [
            (f"batch8_lora{n}", "batch8_base", f"8 concurrent, {n} LoRA(s)") for n in (1, 2, 4)
        ]
        for key, base, label in rows:
            cells = "".join(f"{vl[d][key]:16.1f} ({vl[d][key] / vl[d][base]:.2f}x)" for d in labels)
            print(f"  {label:28s}{'':>14s}{cells}  (x: of the base model's)")
        cells = "".join(
            f"{vl[d]['batch8_lora']:16.1f} ({vl[d]['batch8_lora'] / vl[d]['batch8']:.2f}x)"
            for d in labels
        )
        print(f"{'8 concurrent, 2 LoRAs (tok/s)':30s}{'':>14s}{cells}  (x: of the base model's)")
        cells = "".join(f"{vl[d]['rollout_base_s']:16.1f}        " for d in labels)
        print(f"{'rollout, base model (s)':30s}{'':>14s}{cells}")
        cells = "".join(
            f"{vl[d]['rollout_lora_s']:16.1f} ({vl[d]['rollout_lora_s'] / vl[d]['rollout_base_s']:.2f}x)"
            for d in labels
        )
        print(f"{'rollout, 2 LoRAs (s)':30s}{'':>14s}{cells}  (x: of the base model's time)")
        for d in dtypes:
            if f"{d}, vLLM ops" in vl:
                ours, theirs = vl[d], vl[f"{d}, vLLM ops"]
                print(
                    f"{d}: CoTeam's plugin / vLLM's LoRA ops: rollout through the adapters "
                    f"{theirs['rollout_lora_s'] / ours['rollout_lora_s']:.2f}x as fast, "
                    f"8 concurrent {ours['batch8_lora'] / theirs['batch8_lora']:.2f}x the tok/s"
                )
    if {"bfloat16", "float32"} <= set(vl):
        for key in ("batch1", "batch8"):
            ratio = vl["float32"][key] / vl["bfloat16"][key]
            print(f"vLLM float32 / bfloat16, {key}: {ratio:.2f}x")
    for dtype in dtypes:
        if dtype == "served":  # a server at --vllm-url: its weights' type is not known here
            continue
        size = 4 if dtype == "float32" else 2
        bound = bandwidth * 1e9 / (hf["read_params"] * size)  # each weight read once per token
        print(
            f"{dtype}: batch-1 bound {bound:.1f} tok/s ({hf['read_params'] / 1e6:.0f}M params x "
            f"{size} bytes at {bandwidth:.1f} GB/s): vLLM reaches {vl[dtype]['batch1'] / bound:.2f}"
        )


if __name__ == "__main__":
    main()
