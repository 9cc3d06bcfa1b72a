"""MAGRPO: multi-agent group-relative policy optimization, one LoRA adapter per agent.

For one task, the team acts G times (each agent samples G completions on its own observation;
sample g of every agent forms joint action g). The environment scores each joint action with the
joint reward R^g. Then, for every agent i, with the *same* joint advantages:

    A^g   = R^g − mean_g(R)                      (÷ std_g(R) when `scale_advantages_by_std`)
    loss_i = −(1/G) Σ_g A^g · Σ_t log π_i(a_t^g | o_i^g, a_<t^g)

where π_i is the distribution the rollouts were sampled from: the model's logits divided by the
sampling temperature, as TRL's GRPO does (`token_logprobs`). The top-p mask is not applied, as in
TRL and the authors' library: a sampled token is always inside the nucleus, and renormalizing
over it (mass ≥ top_p = 0.95) would move a token's log-probability by at most −log 0.95 = 0.05
nats, at the cost of sorting the whole vocabulary at every position.

and one optimizer step on agent i's LoRA. Training sees every agent's samples and the joint
reward (centralized); each agent still acts on its own observation (decentralized execution).

Options, off by default as in the MAGRPO authors' library:
- PPO-style clipping against the sampling log-probabilities (from vLLM), per token:
    ratio_t = exp(log π_i(a_t) − log π_old(a_t)),  term_t = min(ratio_t·A, clip(ratio_t, 1±ε)·A)
- a KL penalty to the base model (the k3 estimator, LoRA disabled for the reference):
    kl_t = exp(ref_t − logp_t) − (ref_t − logp_t) − 1

Less work per step, exactly the same loss: the samples of one group share their prompt (or, in
a class's incremental view, the long part of it before each sample's own earlier methods), so
that prefix is run once (its key/value cache kept, with gradient) and what follows it in each
sample is packed end to end in one row, each seeing the prefix and itself only
(`group_logprobs`, `prefix_groups`), no padding. A
step whose advantages are all zero carries no signal: `update` then leaves the optimizer alone
(Adam's momentum would still move the LoRA).

Cross pairing (`joint_mode="cross"`, the authors' library's option of that name): in the
aligned mode an agent's good sample paired with a teammate's bad one earns the pair's low reward.
Crossed, every agent's G samples are combined with every teammate's (G^N joint actions from the
same G samples per agent, each combined and judged by the environment as an episode would be,
`agents.team.crossing.recombine`), and agent i's sample k returns the mean joint reward of the joint
actions it is part of (`cross_returns`): its own share of the outcome, averaged over what its
teammates might write, so each agent gets advantages of its own. (The authors' library sums
instead of averaging: the same advantages times G^(N−1).) One turn only: a second turn's
observations depend on the first's joint output.

Several turns (test feedback between them): every agent's call of every turn is trained with its
discounted return. An episode earns its joint reward R when it ends, after T turns (at the first
success or the turn limit), so the call of turn t returns γ^(T−1−t)·R: a team that succeeds at
once keeps all of R, one that needs the feedback turn earns γ·R for its first try. Groups are per
turn: the turn-t calls of the G episodes that reached turn t (`turn_groups`), advantages within
each. (The authors' library grows a tree of G children per node and sums per-turn rewards; with
episodes that end at success, a sum pays a team for failing its first turn, so only the reward
at the end counts here, and each episode has one branch.)
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from learner.config import MAGRPOConfig

# what follows a group's shared prefix, packed in one row; the pass's memory grows with it (the
# attention over the row and its prefix, kept for the backward): the bound that made a class
# step's update both the shortest and the smallest of those measured (docs/runs/training-log.md)
GROUP_TOKENS = 1536


def group_advantages(
    rewards: torch.Tensor, scale_by_std: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """A^g = R^g − mean(R), optionally divided by std(R); `rewards` has shape [G]."""
    advantages = rewards - rewards.mean()
    if scale_by_std:
        advantages = advantages / (rewards.std(unbiased=False) + eps)
    return advantages


def cross_picks(group_size: int, agents: int) -> list[tuple[int, ...]]:
    """Every joint action of a crossed group: (sample of agent 0, of agent 1, ...), G^agents."""
    return list(itertools.product(range(group_size), repeat=agents))


def cross_returns(
    rewards: torch.Tensor, picks: list[tuple[int, ...]], group_size: int
) -> torch.Tensor:
    """Each agent's samples' returns in a crossed group, shape [agents, G]: for agent i's
    sample k, the mean joint reward R over the joint actions `picks` in which agent i played k."""
    index = torch.tensor(picks)  # [joint actions, agents]
    returns = torch.zeros(index.shape[1], group_size, dtype=rewards.dtype)
    counts = torch.zeros_like(returns)
    for agent in range(index.shape[1]):
        returns[agent].index_add_(0, index[:, agent], rewards)
        counts[agent].index_add_(0, index[:, agent], torch.ones_like(rewards))
    if (counts == 0).any():
        raise ValueError("every sample of every agent must be in some joint action")
    return returns / counts


def turn_groups(
    turns_taken: list[int], rewards: torch.Tensor, gamma: float
) -> list[tuple[int, list[int], torch.Tensor]]:
    """The groups of a task's G episodes, one per turn: (turn t, the episodes that reached it,
    their calls' returns γ^(T_g−1−t)·R_g), where episode g took T_g turns and earned R_g.
    One turn: the single group (0, every episode, R)."""
    groups = []
    for turn in range(max(turns_taken)):
        members = [g for g, taken in enumerate(turns_taken) if taken > turn]
        returns = torch.stack([gamma ** (turns_taken[g] - 1 - turn) * rewards[g] for g in members])
        groups.append((turn, members, returns))
    return groups


def has_signal(advantages: torch.Tensor) -> bool:
    """Whether a group's advantages can move the policy (some A^g is not zero)."""
    return bool(advantages.abs().max() > 0) if advantages.numel() else False


def update_dtype(setting: str, gpu: bool) -> torch.dtype:
    """The base model's weights in the update (`MAGRPOConfig.dtype`): "auto" is bfloat16 on a GPU
    or on a CPU that computes in bf16 natively (`cpu_has_bf16`, as vLLM serves there: the update
    then scores tokens in the numbers the rollouts were sampled with), float32 on other CPUs,
    where bf16 matmuls run through slow fallbacks. PEFT keeps the LoRA weights in float32 over a
    bf16 base (`autocast_adapter_dtype`), so Adam's steps are not rounded away."""
    if setting == "auto":
        from agents.serving.server import cpu_has_bf16

        return torch.bfloat16 if gpu or cpu_has_bf16() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[setting]


def policy_loss(
    logprobs: list[torch.Tensor],
    advantages: torch.Tensor,
    old_logprobs: list[torch.Tensor] | None = None,
    clip_eps: float | None = None,
    ref_logprobs: list[torch.Tensor] | None = None,
    kl_coef: float = 0.0,
) -> torch.Tensor:
    """loss = −(1/G) Σ_g A^g · Σ_t log π(a_t^g), with the optional clip and KL terms.

    `logprobs[g]` holds the log-probabilities of sample g's completion tokens under the policy
    being trained (with gradient); `old_logprobs[g]` those under the sampling policy.
    """
    per_sample = []
    for g, logp in enumerate(logprobs):
        advantage = advantages[g]
        if clip_eps is None or old_logprobs is None:
            pg_term = advantage * logp.sum()
        else:
            ratio = torch.exp(logp - old_logprobs[g])
            clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
            pg_term = torch.minimum(ratio * advantage, clipped * advantage).sum()
        kl = 0.0
        if kl_coef and ref_logprobs is not None:
            delta = ref_logprobs[g] - logp
            kl = kl_coef * (torch.exp(delta) - delta - 1).sum()
        per_sample.append(-pg_term + kl)
    return torch.stack(per_sample).mean()


@dataclass
class Sample:
    """One agent's completion in one joint sample: the exact token ids it saw and produced."""

    prompt_ids: list[int]
    completion_ids: list[int]
    sampling_logprobs: list[float] | None = None


@dataclass
class AgentPolicies:
    """One base model in memory with one trainable LoRA adapter per agent (PEFT)."""

    base_path: str
    n_agents: int
    config: MAGRPOConfig
    start_from: dict[int, str | None] = field(default_factory=dict)  # agent -> adapter folder

    def __post_init__(self) -> None:
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM

        torch.manual_seed(self.config.seed)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dtype = update_dtype(self.config.dtype, self.device == "cuda")
        base = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=self.dtype)
        base = base.to(self.device)
        lora = LoraConfig(
            r=self.config.lora_rank,
            lora_alpha=self.config.lora_alpha,
            lora_dropout=self.config.lora_dropout,
            target_modules=list(self.config.target_modules),
            task_type="CAUSAL_LM",
        )
        first, folder = self.adapter_name(0), self.start_from.get(0)
        if folder:
            self.model = PeftModel.from_pretrained(
                base, folder, adapter_name=first, is_trainable=True
            )
        else:
            self.model = get_peft_model(base, lora, adapter_name=first)
        for agent in range(1, self.n_agents):
            name, folder = self.adapter_name(agent), self.start_from.get(agent)
            if folder:
                self.model.load_adapter(folder, adapter_name=name, is_trainable=True)
            else:
                self.model.add_adapter(name, lora)
        self.optimizers = {
            agent: torch.optim.AdamW(
                self.parameters(agent), lr=self.config.learning_rate, weight_decay=0.0
            )
            for agent in range(self.n_agents)
        }

    @staticmethod
    def adapter_name(agent: int) -> str:
        return f"agent{agent}"

    def parameters(self, agent: int) -> list[torch.nn.Parameter]:
        marker = f".{self.adapter_name(agent)}."
        return [p for n, p in self.model.named_parameters() if marker in n]

    def completion_logprobs(
        self, agent: int, samples: list[Sample], reference: bool = False
    ) -> list[torch.Tensor]:
        """log π_agent(a_t | o, a_<t) of each sample's completion tokens, one left-padded batch.

        Left padding lines the completions up at the right, so the model computes logits only for
        the last positions (`logits_to_keep`): the full vocabulary at every prompt position would
        take gigabytes.
        """
        self.model.set_adapter(self.adapter_name(agent))
        for p in self.parameters(agent):  # set_adapter leaves only the active adapter trainable
            p.requires_grad_(True)
        sequences = [s.prompt_ids + s.completion_ids for s in samples]
        width = max(len(seq) for seq in sequences)
        longest = max(len(s.completion_ids) for s in samples)
        input_ids = torch.zeros(len(samples), width, dtype=torch.long)
        attention = torch.zeros(len(samples), width, dtype=torch.long)
        for row, seq in enumerate(sequences):
            input_ids[row, width - len(seq) :] = torch.tensor(seq)
            attention[row, width - len(seq) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # as if each row had no padding
        inputs = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention.to(self.device),
            "position_ids": positions.to(self.device),
            "logits_to_keep": longest + 1,
        }
        if reference:
            with torch.no_grad(), self.model.disable_adapter():
                logits = self.model(**inputs).logits
        else:
            logits = self.model(**inputs).logits
        logits = logits[:, :-1]  # the logits at position t predict token t + 1
        result = []
        for row, s in enumerate(samples):
            n = len(s.completion_ids)
            targets = torch.tensor(s.completion_ids, device=self.device)
            result.append(self.token_logprobs(logits[row, longest - n :], targets))
        return result

    def token_logprobs(self, step_logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log π(target_t) from the logits that predict each target, at the sampling temperature
        (the distribution the rollouts were drawn from), in float32, on the CPU."""
        scaled = step_logits.float() / self.config.temperature
        return torch.log_softmax(scaled, dim=-1).gather(1, targets[:, None]).squeeze(1).cpu()

    def group_logprobs(
        self, agent: int, samples: list[Sample], reference: bool = False
    ) -> list[torch.Tensor]:
        """log π_agent of each sample's completion; the prompt prefix they share is computed once.

        The shared prefix's forward pass keeps its key/value cache (with gradient, so the LoRA on
        its positions is trained as in the per-sample pass). What follows it in each sample (the
        rest of its prompt, then its completion: the completion alone when the prompts are the
        same) is then packed end to end into one row, each at the positions after the prefix,
        under an attention mask by which a token sees the prefix and the earlier tokens of its own
        sample only; the vocabulary projection runs only where a logit predicts a completion
        token. No padding, and a long prompt a group shares (a class's skeleton before each
        agent's own earlier methods) is run once. Equal to `completion_logprobs` on the same
        samples (test_magrpo.py).
        """
        self.model.set_adapter(self.adapter_name(agent))
        for p in self.parameters(agent):
            p.requires_grad_(True)
        if reference:
            with torch.no_grad(), self.model.disable_adapter():
                return self._group_logprobs(samples)
        return self._group_logprobs(samples)

    def _group_logprobs(self, samples: list[Sample]) -> list[torch.Tensor]:
        n_prefix = shared_prefix([s.prompt_ids for s in samples])
        if n_prefix == 0:
            raise ValueError("a group's prompts must share at least their first token")
        tails = [s.prompt_ids[n_prefix:] + s.completion_ids for s in samples]
        prefix = torch.tensor([samples[0].prompt_ids[:n_prefix]], device=self.device)
        head = self.model(input_ids=prefix, use_cache=True, logits_to_keep=1)
        lengths = torch.tensor([len(t) for t in tails])
        scored = torch.tensor([len(s.completion_ids) for s in samples])
        total = int(lengths.sum())
        if total == 0:
            return [torch.zeros(0) for _ in samples]
        branch = torch.repeat_interleave(torch.arange(len(tails)), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        order = torch.arange(total)
        offset = order - starts[branch]  # each token's place in its sample's tail
        own = (branch[:, None] == branch[None, :]) & (order[:, None] >= order[None, :])
        visible = torch.cat([torch.ones(total, n_prefix, dtype=torch.bool), own], dim=1)
        dtype = self.model.get_input_embeddings().weight.dtype
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
        # the logit at a tail position predicts the next tail token: kept where that is a
        # completion token (a completion that starts the tail is begun by the prefix's last logit)
        first = lengths - scored  # where each completion begins in its tail
        keep = (offset >= first[branch] - 1) & (offset < lengths[branch] - 1)
        keep = torch.nonzero(keep).squeeze(1)
        tail = self.model(
            input_ids=torch.tensor([[t for ids in tails for t in ids]], device=self.device),
            attention_mask=mask[None, None].to(self.device),
            position_ids=(n_prefix + offset)[None].to(self.device),
            cache=head.cache,
            logits_to_keep=keep.to(self.device),
        ).logits[0]
        result, kept = [], 0
        for s, begins in zip(samples, first.tolist(), strict=True):
            n = len(s.completion_ids)
            n_tail = max(n - 1, 0) if begins == 0 else n
            step_logits = tail[kept : kept + n_tail]
            if begins == 0:
                step_logits = torch.cat([head.logits[0, -1:], step_logits])
            kept += n_tail
            targets = torch.tensor(s.completion_ids, device=self.device, dtype=torch.long)
            result.append(self.token_logprobs(step_logits[:n], targets))
        return result

    def update(
        self, agent: int, samples: list[Sample], advantages: torch.Tensor
    ) -> dict[str, float]:
        """One policy-gradient step on `agent`'s LoRA from its samples and the joint advantages.

        Samples that share a prompt (a group) go through `group_logprobs`, one group per
        forward/backward; the others are sorted by length into micro-batches of `micro_batch`.
        Gradients accumulate, so the step is the same as on one big batch. A sample with no
        completion tokens (a stop rule kept nothing of its reply) has no log-probability to move
        and is left out of the passes; it still counts in the loss's mean over the samples. When
        every advantage is zero there is no signal: no zero_grad, backward or optimizer step
        happens (returns `{"updated": False}`), so the LoRA and Adam's state stay exactly as they
        were.

        Data parallel (under `torchrun --nproc_per_node N`, torch.distributed initialized): every
        rank is given the same samples, passes every N-th batch, and the gradients are summed
        over the ranks before the step, so each rank takes the step one process would have
        (tests/test_magrpo.py, to 1e-5).
        """
        c = self.config
        count = len(samples)
        kept = [i for i, s in enumerate(samples) if s.completion_ids]
        samples, advantages = [samples[i] for i in kept], advantages[kept]
        if not samples or not has_signal(advantages):
            return {"loss": 0.0, "grad_norm": 0.0, "updated": False}
        self.model.train()
        optimizer = self.optimizers[agent]
        optimizer.zero_grad()
        total = 0.0
        rank, world = _data_parallel()
        # under torch.distributed every rank holds the same samples and passes its share of the
        # batches; the gradients are summed over the ranks before the one step all of them take
        for indices, shared in _batches(samples, c.micro_batch)[rank::world]:
            chunk = [samples[i] for i in indices]
            chunk_adv = advantages[indices]
            if shared:
                logprobs = self.group_logprobs(agent, chunk)
                ref = self.group_logprobs(agent, chunk, reference=True) if c.kl_coef else None
            else:
                logprobs = self.completion_logprobs(agent, chunk)
                ref = self.completion_logprobs(agent, chunk, reference=True) if c.kl_coef else None
            old = None
            if c.clip_eps is not None and all(s.sampling_logprobs for s in chunk):
                old = [torch.tensor(s.sampling_logprobs[: len(s.completion_ids)]) for s in chunk]
            # policy_loss is a mean over its samples: weight each chunk by its share of the batch
            loss = policy_loss(logprobs, chunk_adv, old, c.clip_eps, ref, c.kl_coef)
            loss = loss * len(chunk) / count
            loss.backward()
            total += loss.item()
        if world > 1:
            total = _sum_over_ranks(self.parameters(agent), total)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(agent), c.max_grad_norm)
        optimizer.step()
        return {"loss": total, "grad_norm": grad_norm.item(), "updated": True}

    def save_optimizers(self, folder: Path) -> None:
        """Each agent's optimizer state (Adam's moments and step) to `folder`, to resume."""
        for agent, optimizer in self.optimizers.items():
            torch.save(optimizer.state_dict(), Path(folder) / f"optimizer-agent{agent}.pt")

    def load_optimizers(self, folder: Path) -> None:
        """The optimizer states `save_optimizers` wrote (the adapters come via `start_from`)."""
        for agent, optimizer in self.optimizers.items():
            path = Path(folder) / f"optimizer-agent{agent}.pt"
            optimizer.load_state_dict(torch.load(path, map_location=self.device))

    def save(self, agent: int, dest: Path, metadata: dict | None = None) -> Path:
        """Write agent's adapter to `dest` atomically (temp folder, then rename); never overwrite."""
        dest = Path(dest)
        if dest.exists():
            raise FileExistsError(f"adapter version {dest} exists; versions are immutable")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            name = self.adapter_name(agent)
            self.model.save_pretrained(tmp, selected_adapters=[name])
            saved = tmp / name if (tmp / name / "adapter_config.json").is_file() else tmp
            if metadata is not None:
                (saved / "coteam-adapter.json").write_text(json.dumps(metadata, indent=2))
            os.replace(saved, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many first tokens every prompt has in common."""
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != prompts[0][i] for p in prompts[1:]):
            return i
    return n


def prefix_groups(samples: list[Sample], group_tokens: int = GROUP_TOKENS) -> list[list[int]]:
    """Indices of `samples` whose prompts share a prefix of at least half the longest of them
    (the same prompt, or a class's skeleton before each sample's own earlier methods), a list
    each: the prompts sorted so that those alike are neighbours, each joining the group before
    it while the group's prefix stays that long and what follows the prefix (the rest of each
    prompt, and each completion) stays within `group_tokens`, which bounds the packed row's
    attention mask. Unrelated prompts (another task's, which share a chat template's first
    tokens) are groups of one."""
    order = sorted(range(len(samples)), key=lambda i: samples[i].prompt_ids)
    groups: list[list[int]] = []
    for i in order:
        if groups:
            members = [samples[j] for j in groups[-1]] + [samples[i]]
            prompts = [s.prompt_ids for s in members]
            n = shared_prefix(prompts)
            tails = sum(len(s.prompt_ids) - n + len(s.completion_ids) for s in members)
            if 2 * n >= max(len(p) for p in prompts) and tails <= group_tokens:
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


def update_positions(samples: list[Sample], micro_batch: int) -> int:
    """The token positions `AgentPolicies.update`'s forward passes compute for these samples: a
    group's shared prefix once and the rest of each sample, a padded batch's rows at its width."""
    samples = [s for s in samples if s.completion_ids]
    total = 0
    for indices, shared in _batches(samples, micro_batch):
        chunk = [samples[i] for i in indices]
        if shared:
            n = shared_prefix([s.prompt_ids for s in chunk])
            total += n + sum(len(s.prompt_ids) - n + len(s.completion_ids) for s in chunk)
        else:
            total += len(chunk) * max(len(s.prompt_ids) + len(s.completion_ids) for s in chunk)
    return total


def _data_parallel() -> tuple[int, int]:
    """(rank, world size) of a data-parallel update (`torchrun`, torch.distributed initialized
    with gloo on CPUs or NCCL on GPUs); (0, 1) otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _sum_over_ranks(parameters: list[torch.nn.Parameter], loss: float) -> float:
    """Sum each parameter's gradient and the loss over the ranks (each rank's loss is already
    its share of the whole batch's mean), so every rank steps as one process would have."""
    import torch.distributed as dist

    for p in parameters:
        if p.grad is None:  # a rank with no batch of this agent's
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
    summed = torch.tensor([loss], dtype=torch.float64, device=parameters[0].device)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    return float(summed.item())


def _batches(samples: list[Sample], micro_batch: int) -> list[tuple[list[int], bool]]:
    """Indices of `samples` in forward/backward batches, and whether the batch is a group that
    shares a prompt prefix (`prefix_groups`: its prefix computed once, `group_logprobs`); the
    rest, sorted by length so a batch pads little, in left-padded batches of `micro_batch`."""
    found = prefix_groups(samples)
    groups = [(ids, True) for ids in found if len(ids) > 1]
    single = sorted(
        (ids[0] for ids in found if len(ids) == 1),
        key=lambda i: len(samples[i].prompt_ids) + len(samples[i].completion_ids),
    )
    padded = [(single[k : k + micro_batch], False) for k in range(0, len(single), micro_batch)]
    return groups + padded
