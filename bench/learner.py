"""Learner benchmark: joint samples and generated tokens per second of a training step of
CoTeam's MAGRPO against TRL's `GRPOTrainer` and comlrl's `MAGRPOTrainer`, on the same model,
coding tasks, group size G and token budget, printed with their ratios (the targets, issue 55:
CoTeam at least 2.5x TRL and 4x comlrl per joint sample).

A joint sample is one answer of the team: one completion of every agent (TRL trains one policy,
so one of its completions is a whole answer). A step on T tasks with G joint samples per task
covers T·G joint samples in all three; it trains on 2·T·G agent completions in CoTeam and comlrl
(2 agents) and on T·G in TRL, so completions per second are printed too, after the joint figures,
and so are generated tokens per second (what the samples cost: a trainer whose completions are
shorter makes more of them a second). The machine, the dtypes and the engines are recorded.

TRL generates with transformers here: its vLLM generation (`use_vllm`) syncs the trained weights
into the vLLM server through NCCL, which needs a CUDA device.

    CoTeam  learner.train.train itself: the 2-agent parallel team samples G joint outputs per task
            through the vLLM server, CoTeam's joint reward (sandboxed tests), A = R − mean(R),
            one policy-gradient step on each agent's LoRA, the new adapters loaded into vLLM
    TRL     GRPOTrainer with HF generate rollouts, a PEFT LoRA like CoTeam's, beta 0, the single
            agent's view with its begun reply continued (the same start as CoTeam's `single`),
            one task's G completions a forward/backward, reward = CoTeam's coding reward
    comlrl  MAGRPOTrainer with HF generate rollouts, one model per agent (each with a LoRA like
            CoTeam's), each agent's own prompt, reward = CoTeam's coding reward of the joint code

Only steady state counts: each trainer runs one warm-up step, then N timed steps. TRL and comlrl
run in a subprocess with the bench environment (`scripts/setup.sh --bench`: TRL and comlrl over
the main environment's packages), one at a time, after CoTeam's model and server are gone.

With --without-plugin CoTeam is timed twice, first on a server without CoTeam's vLLM plugin
(agents/serving/vllm_plugin: vLLM's own CPU LoRA ops), then with it: the plugin's gain in one run.

Usage: python bench/learner.py [--model PRESET|FOLDER] [--group-size 4] [--tasks 2]
                               [--max-tokens 128] [--steps 3] [--vllm-url URL]
                               [--skip-trl] [--skip-comlrl] [--without-plugin]
                               [--joint-mode aligned|cross] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")  # comlrl imports wandb; nothing is logged
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from agents.serving.models import DEFAULT_MODEL, provision_model  # noqa: E402
from agents.serving.server import machine  # noqa: E402
from agents.tasks import Task  # noqa: E402
from agents.team.combine import combine_code, extract_code  # noqa: E402
from agents.team.episode import make_team
from agents.team.graph import TeamSettings, initial_state, observe  # noqa: E402
from agents.team.roles import Role  # noqa: E402
from learner.coding_reward import coding_reward  # noqa: E402
from learner.config import (  # noqa: E402
    JOINT_MODES,
    MAGRPOConfig,
    TrainArgs,  # noqa: E402
)
from learner.magrpo import update_dtype  # noqa: E402
from learner.train import training_tasks  # noqa: E402
from store.paths import venv_python  # noqa: E402

AGENTS = 2
NAMES = {
    "coteam": "CoTeam MAGRPO (vLLM)",
    "coteam_vllm_ops": "  with vLLM's LoRA ops",  # --without-plugin: CoTeam's vLLM plugin off
    "trl": "TRL GRPOTrainer",
    "comlrl": "comlrl MAGRPO",
}
TARGETS = {"trl": 2.5, "comlrl": 4}  # issue 55: CoTeam's joint samples/s over each, same run


def bench_tasks(count: int) -> list[Task]:
    """The first `count` coding training tasks: what `coteam train --task-limit count` cycles over."""
    return training_tasks(TrainArgs(task="coding", task_limit=count))


def team_view(task: Task, shape: str, agents: int) -> tuple[list[Role], list[list[dict]]]:
    """The team's roles and each agent's first observation (chat messages) on `task`."""
    team = make_team(task, None, TeamSettings(shape=shape, agents=agents))
    state = initial_state(team)
    return team.roles, [observe(team, state, i) for i in range(team.size)]


def coding_score(task: Task, roles: list[Role], texts: list[str]) -> float:
    """CoTeam's coding reward (quality + coordination, 0 to 2) of the agents' texts (what each
    generated after its begun reply, if any), joined as the team's combiner joins them: the
    reward the other trainers get for what CoTeam's team would be scored on."""
    owners = [r.owns for r in roles]
    texts = [r.reply_start + t for r, t in zip(roles, texts, strict=True)]  # begun replies
    program = combine_code(texts, owners, preamble=task.preamble, problem=task.prompt).code
    score = coding_reward(
        [extract_code(text) for text in texts],
        owners,
        task.entry_point,
        program,
        tests=task.tests or "",
        given=task.preamble,
    )
    return score["quality"] + score["coordination"]


def step_figures(
    step_seconds: list[float],
    samples_per_step: int,
    tasks: int,
    group: int,
    step_tokens: list[int],
    engine: str,
) -> dict:
    """A trainer's figures over its timed steps (each step's seconds and generated tokens)."""
    seconds = sum(step_seconds) / len(step_seconds)
    tokens = sum(step_tokens) / len(step_tokens) if step_tokens else 0.0
    return {
        "engine": engine,
        "step_s": seconds,
        "steps_s": step_seconds,
        "joint_samples_per_step": tasks * group,
        "joint_samples_per_s": tasks * group / seconds,
        "tokens_per_step": tokens,
        "steps_tokens": step_tokens,
        "tokens_per_s": tokens / seconds,
        "samples_per_step": samples_per_step,
        "samples_per_s": samples_per_step / seconds,
    }


def chat_prompt(tokenizer, messages: list[dict]) -> str:
    """An agent's view as the text the model continues: a begun reply (the last message is the
    assistant's) is continued, as vLLM does for CoTeam; otherwise a reply is opened."""
    begun = messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=not begun, continue_final_message=begun, tokenize=False
    )


def token_count(tokenizer, texts) -> int:
    """Tokens generated for `texts` (the completions a trainer handed its reward function)."""
    return sum(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)


def magrpo_config(args) -> MAGRPOConfig:
    """CoTeam's MAGRPO knobs for this run; the other trainers copy its LoRA and sampling."""
    return MAGRPOConfig(
        group_size=args.group_size,
        tasks_per_step=args.tasks,
        max_new_tokens=args.max_tokens,
        joint_mode=args.joint_mode,
    )


# -- CoTeam: learner.train.train through the vLLM server --------------------------------------


def bench_coteam(model_path, client, args) -> dict:
    from learner.train import train

    train_args = TrainArgs(
        task="coding",
        steps=1 + args.steps,
        agents=AGENTS,
        task_limit=args.tasks,
        magrpo=magrpo_config(args),
        publish=False,
    )
    ends, steps = [], []  # when each step finished, and its metrics; the first is the warm-up
    with tempfile.TemporaryDirectory() as folder:
        train(train_args, client, model_path, Path(folder) / "bench.db",
              on_step=lambda metrics: (ends.append(time.perf_counter()), steps.append(metrics)))  # fmt: skip
    seconds = [later - earlier for earlier, later in zip(ends, ends[1:], strict=False)]
    _, dtype = device_and_dtype()
    figures = step_figures(
        seconds,
        AGENTS * args.tasks * args.group_size,
        args.tasks,
        args.group_size,
        [m["tokens_generated"] for m in steps[1:]],
        f"vLLM server rollouts ({client.base_url}), transformers {transformers_version()} + "
        f"PEFT update in {dtype}",
    )
    # a step without signal takes no optimizer step (learner/train.py) and would look fast:
    # say which timed steps updated, and where their time went
    timed = steps[1:]
    figures["updated"] = [m["updated"] for m in timed]
    figures["rollout_s"] = [m["rollout_s"] for m in timed]
    figures["update_s"] = [m["update_s"] for m in timed]
    return figures


def coteam_part(model_path, args, coteam_plugin: bool = True) -> dict:
    """CoTeam's figures, on the server at --vllm-url or on a managed one started here (without
    CoTeam's vLLM plugin when `coteam_plugin` is False)."""
    from agents.serving.server import ServerConfig, connect_or_start

    config = ServerConfig(model=str(model_path), agents=AGENTS, coteam_plugin=coteam_plugin)
    with connect_or_start(args.vllm_url, config) as client:
        if args.vllm_url:  # a server of someone else's may serve the base model under any name
            client.base_model = next(m["id"] for m in client.models() if not m.get("parent"))
        figures = bench_coteam(model_path, client, args)
    # the learner's process; the vLLM server's memory is its own (its KV cache is set at start)
    figures["peak_memory_gb"] = peak_memory_gb()
    return figures


# -- TRL and comlrl: run in the bench environment --------------------------------------------


def transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")


def device_and_dtype() -> tuple[bool, torch.dtype]:
    """As CoTeam's learner weighs the base model (`learner.magrpo.update_dtype`): bf16 on a GPU or
    on a CPU with native bf16, fp32 on other CPUs; the same for every engine of a run."""
    gpu = torch.cuda.is_available()
    return gpu, update_dtype(MAGRPOConfig().dtype, gpu)


def lora_config(cfg: MAGRPOConfig):
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )


def bench_trl(model_path, args) -> dict:
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cfg, tasks = magrpo_config(args), bench_tasks(args.tasks)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    generated: list[int] = []  # tokens of each reward call (one per step: T·G completions)
    views = [team_view(task, "single", 1) for task in tasks]
    # the single agent's whole view as text, its begun reply included (TRL's chat path would
    # close that reply and open another): the same start as CoTeam's `single`
    dataset = Dataset.from_list(
        [
            {"prompt": chat_prompt(tokenizer, observations[0]), "task_index": i}
            for i, (_, observations) in enumerate(views)
        ]
    )

    def coteam_coding_reward(prompts, completions, task_index, **columns) -> list[float]:
        generated.append(token_count(tokenizer, completions))
        return [
            coding_score(tasks[i], views[i][0], [completion])
            for completion, i in zip(completions, task_index, strict=True)
        ]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    gpu, dtype = device_and_dtype()
    clock = StepClock()
    with tempfile.TemporaryDirectory() as folder:
        config = GRPOConfig(
            output_dir=folder,
            use_cpu=not gpu,
            bf16=gpu,
            model_init_kwargs={"dtype": dtype},
            beta=0.0,
            num_generations=args.group_size,
            max_completion_length=args.max_tokens,
            # one task's G completions a forward/backward, T of them accumulated into one step:
            # CoTeam's learner also takes a group sharing a prompt as one batch (learner/magrpo.py);
            # all T·G at once was killed for memory on 23 GB (2026-12-02). One generation per step.
            per_device_train_batch_size=args.group_size,
            gradient_accumulation_steps=args.tasks,
            activation_checkpointing=False,  # CoTeam's learner does not checkpoint either
            max_steps=1 + args.steps,
            learning_rate=cfg.learning_rate,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=cfg.seed,
        )
        trainer = GRPOTrainer(
            model=str(model_path),
            reward_funcs=coteam_coding_reward,
            args=config,
            train_dataset=dataset,
            peft_config=lora_config(cfg),
            callbacks=[clock],
        )
        trainer.train()
    seconds = [later - earlier for earlier, later in zip(clock.ends, clock.ends[1:], strict=False)]
    engine = f"TRL {trl.__version__} GRPOTrainer, transformers {transformers_version()} "
    engine += f"generate and update in {dtype}"
    return step_figures(
        seconds, args.tasks * args.group_size, args.tasks, args.group_size, generated[1:], engine
    )


def bench_comlrl(model_path, args) -> dict:
    from comlrl.trainers.reinforce import MAGRPOConfig as ComlrlConfig
    from comlrl.trainers.reinforce import MAGRPOTrainer
    from datasets import Dataset
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, tasks = magrpo_config(args), bench_tasks(args.tasks)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    views = [team_view(task, "parallel", AGENTS) for task in tasks]
    rows = []
    for i, (_, observations) in enumerate(views):
        prompts = [chat_prompt(tokenizer, messages) for messages in observations]
        rows.append({"task_index": i, **{f"prompt{a}": p for a, p in enumerate(prompts)}})

    generated = [0]  # tokens of the step running

    def coteam_coding_reward(helper_texts, entry_texts, *, batch_items) -> list[float]:
        generated[-1] += token_count(tokenizer, [*helper_texts, *entry_texts])
        i = batch_items[0]["task_index"]
        return [
            coding_score(tasks[i], views[i][0], list(texts))
            for texts in zip(helper_texts, entry_texts, strict=True)
        ]

    gpu, dtype = device_and_dtype()
    # comlrl trains one model per agent: two copies of the base, each with its own LoRA
    agents = [
        get_peft_model(
            AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype), lora_config(cfg)
        )
        for _ in range(AGENTS)
    ]
    trainer = MAGRPOTrainer(
        agents=agents,
        num_agents=AGENTS,
        tokenizer=tokenizer,
        train_dataset=Dataset.from_list(rows),
        reward_func=coteam_coding_reward,
        formatters=[lambda item, a=a: item[f"prompt{a}"] for a in range(AGENTS)],
        args=ComlrlConfig(
            num_train_epochs=1,  # one pass over the T tasks: one update per agent, one step
            agent_learning_rate=cfg.learning_rate,
            num_agents=AGENTS,
            num_generations=args.group_size,
            max_new_tokens=args.max_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=None,
            num_turns=1,
            eval_interval=0,
            rollout_buffer_size=args.tasks,
            train_batch_size=args.tasks,
            advantage_normalization=cfg.scale_advantages_by_std,
        ),
    )
    trainer.train()  # warm-up step
    seconds = []
    for _ in range(args.steps):
        generated.append(0)
        start = time.perf_counter()
        trainer.train()
        seconds.append(time.perf_counter() - start)
    from importlib.metadata import version

    engine = f"comlrl {version('comlrl')} MAGRPOTrainer, transformers {transformers_version()} "
    engine += f"generate and update in {dtype}"
    samples = AGENTS * args.tasks * args.group_size
    return step_figures(seconds, samples, args.tasks, args.group_size, generated[1:], engine)


PARTS = {"trl": bench_trl, "comlrl": bench_comlrl}


def run_part(part: str, model_path, args) -> dict:
    """Run one of PARTS in the bench environment; its figures, or {"skipped": why}."""
    python = venv_python("bench")
    if not python.is_file():
        return {"skipped": f"no bench environment at {python}: run `scripts/setup.sh --bench`"}
    print(f"{NAMES[part]} (in {python.parent.parent}) ...", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "result.json"
        command = [
            str(python), str(Path(__file__).resolve()), "--part", part, "--part-result", str(result),
            "--model", str(model_path), "--group-size", str(args.group_size),
            "--tasks", str(args.tasks), "--max-tokens", str(args.max_tokens),
            "--steps", str(args.steps),
        ]  # fmt: skip
        code = subprocess.run(command).returncode
        if not result.is_file():
            return {"skipped": f"the {part} subprocess exited with code {code} and no result"}
        return json.loads(result.read_text())


def peak_memory_gb() -> float:
    """The peak resident memory of this process so far, in GB (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def part_main(args) -> None:
    """In the bench environment: run one part and write its figures (or its error) as JSON."""
    try:
        figures = PARTS[args.part](provision_model(args.model), args)
        figures["peak_memory_gb"] = peak_memory_gb()
    except Exception as e:
        traceback.print_exc()
        figures = {"skipped": f"{type(e).__name__}: {e}"}
    Path(args.part_result).write_text(json.dumps(figures))


# -- report ----------------------------------------------------------------------------------


def report(results: dict[str, dict]) -> dict[str, float]:
    """Print the table (joint samples and tokens first) and the ratios; return the ratios."""
    print()
    print(
        f"{'':22s}{'s/step':>8s}{'joint/step':>12s}{'joint/s':>9s}{'tokens/step':>13s}"
        f"{'tokens/s':>10s}{'completions/s':>15s}"
    )
    for part, r in results.items():
        if "skipped" in r:
            print(f"{NAMES[part]:22s}  skipped: {r['skipped']}")
            continue
        print(
            f"{NAMES[part]:22s}{r['step_s']:8.1f}{r['joint_samples_per_step']:12d}"
            f"{r['joint_samples_per_s']:9.3f}{r['tokens_per_step']:13.0f}{r['tokens_per_s']:10.1f}"
            f"{r['samples_per_s']:15.3f}"
        )
        print(f"{'':22s}{r['engine']}, peak memory {r['peak_memory_gb']:.1f} GB")
        if "updated" in r:
            print(
                f"{'':22s}rollout {r['rollout_s']} s, update {r['update_s']} s, "
                f"updated {r['updated']} (a step without signal takes no optimizer step)"
            )
    print("(a joint sample: one answer of the team, one completion of every agent; TRL: one)")
    ratios = {}
    coteam = results["coteam"]
    if "samples_per_s" in results.get("coteam_vllm_ops", {}):
        ratios["plugin"] = coteam["samples_per_s"] / results["coteam_vllm_ops"]["samples_per_s"]
        print(
            f"CoTeam with its vLLM plugin / with vLLM's own CPU LoRA ops: {ratios['plugin']:.2f}x"
        )
    for part in ("trl", "comlrl"):
        other = results.get(part, {})
        if "samples_per_s" not in other:
            continue
        for key, figure in (("joint", "joint_samples_per_s"), ("tokens", "tokens_per_s"),
                            ("completions", "samples_per_s")):  # fmt: skip
            ratios[f"coteam_over_{part}_{key}"] = coteam[figure] / other[figure]
        met = "yes" if ratios[f"coteam_over_{part}_joint"] >= TARGETS[part] else "no"
        print(
            f"CoTeam/{part}: {ratios[f'coteam_over_{part}_joint']:.2f}x joint samples/s "
            f"(target >= {TARGETS[part]}x: {met}), {ratios[f'coteam_over_{part}_tokens']:.2f}x "
            f"generated tokens/s, {ratios[f'coteam_over_{part}_completions']:.2f}x completions/s"
        )
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("COTEAM_MODEL", DEFAULT_MODEL))
    parser.add_argument("--group-size", type=int, default=4, help="G joint samples per task")
    parser.add_argument("--tasks", type=int, default=2, help="T tasks per step")
    parser.add_argument("--max-tokens", type=int, default=128, help="new tokens per completion")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--vllm-url", help="use this running server instead of starting one")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--skip-comlrl", action="store_true")
    parser.add_argument(
        "--without-plugin",
        action="store_true",
        help="first time CoTeam on a server without CoTeam's vLLM plugin (vLLM's own CPU LoRA "
        "ops), the baseline of the plugin's gain; needs a managed server (no --vllm-url)",
    )
    parser.add_argument(
        "--joint-mode",
        choices=JOINT_MODES,
        default="aligned",
        help="CoTeam's pairing of the agents' samples (learner.magrpo; the others: aligned)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # the subprocess
    parser.add_argument("--part-result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps < 1 or args.tasks < 1 or args.group_size < 2:
        parser.error("--steps and --tasks must be >= 1 and --group-size >= 2")
    if args.part:
        return part_main(args)
    if args.without_plugin and args.vllm_url:
        parser.error("--without-plugin starts its own servers: leave out --vllm-url")
    model_path = provision_model(args.model)

    print(
        f"model {args.model}, {args.tasks} task(s) x G={args.group_size} per step, "
        f"{args.max_tokens} new tokens per completion, {AGENTS} agents (TRL: 1), "
        f"1 warm-up + {args.steps} timed step(s), on {machine()}"
    )
    results = {}
    if args.without_plugin:
        print("CoTeam MAGRPO, vLLM without CoTeam's plugin ...", flush=True)
        results["coteam_vllm_ops"] = coteam_part(model_path, args, coteam_plugin=False)
        gc.collect()
    print(f"{NAMES['coteam']} ...", flush=True)
    results["coteam"] = coteam_part(model_path, args)
    gc.collect()  # the learner's model goes before the next trainer loads its own
    for part, skip in (("trl", args.skip_trl), ("comlrl", args.skip_comlrl)):
        results[part] = {"skipped": f"--skip-{part}"} if skip else run_part(part, model_path, args)
        if "skipped" in results[part] and not skip:
            print(f"{NAMES[part]} skipped: {results[part]['skipped']}", flush=True)
    ratios = report(results)
    if args.json:
        settings = {
            k: getattr(args, k) for k in ("model", "group_size", "tasks", "max_tokens", "steps")
        }
        figures = {
            "settings": settings,
            "machine": machine(),
            "sample": "joint sample: one answer of the team, one completion of every agent (TRL: "
            "one); samples_per_s counts completions",
            "results": results,
            "ratios": ratios,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
