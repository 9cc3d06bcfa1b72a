"""CoTeam's vLLM plugin: LoRA on vLLM's CPU backend, right for mixed batches, one matmul for all
adapter slots.

vLLM-CPU applies LoRA with plain PyTorch ops (`vllm.lora.ops.torch_ops`) that gather one copy of
the adapter weights per token (`lora_weights[token_lora_indices]`) and multiply token by token.
Two consequences, both measured here (docs/runs/training-log.md, "LoRA on vLLM's CPU backend"):

- **Wrong answers**: a token without an adapter has index -1, which selects the *last* adapter
  slot instead of none. Once that slot has held an adapter (vLLM leaves the weights of a
  deactivated slot in place), every base-model request that is batched with an adapter request
  gets that adapter's delta: the untrained team, `single` and the base team answer as if trained.
  vLLM's GPU kernels skip index -1 (upstream: vllm-project/vllm#48421, open).
- **Slow answers**: a prompt of 450 tokens gathers 450 copies of each adapter matrix per layer;
  a training step's 16 rollout requests took 1.87x the base model's time under adapters
  (`bench/serving.py --lora --without-plugin`), 1.00x with these ops.

- **Slow decoding**: at batch 1 a trained agent decoded far slower than the base model,
  each layer's slices and their ops called one by one, each converting or transposing every
  slot's weights (bench/serving.py --lora; docs/runs/training-log.md, "LoRA decoding").

The ops below compute the same products with one matmul against every adapter slot at once and
a zero delta for index -1, and `register` (a `vllm.general_plugins` entry point, which vLLM calls
in every one of its processes) puts them in place of vLLM's, on the CPU platform only; it also
replaces the CPU punica wrapper's layer-level methods by ones that do a whole layer (every slice
and slot) in one matmul against weights laid out once (`patch_wrapper`). They keep the
signatures and output conventions of vLLM 0.32's; `register` patches nothing (and says so in the
server's log) when those signatures have changed.

It also keeps the CPU engine alive under seeded requests. When a prompt's prefill is split over
several steps, vLLM samples a token after each chunk, throws it away and rewinds the request's
random generator by moving its offset back; a CPU generator has no offset, so the first seeded
request whose prefill was chunked killed the engine ("CPU Generator does not use offset": every
request after it failed, `/health` answered 503). `keep_seeded_requests_alive` rewinds a CPU
generator the way that works for it: the state from before the discarded sample is put back.

Installed into the vLLM environment by scripts/setup.sh (`pip install agents/serving/vllm_plugin`).
"""

from __future__ import annotations

import inspect
import logging
import sys
from dataclasses import dataclass, field

import torch

log = logging.getLogger("vllm.coteam_plugin")  # under vLLM's logger: its server log shows it

# vLLM 0.32's torch ops and their parameters: what is replaced, and what must not have changed
SIGNATURES = {
    "bgmv_shrink": ["inputs", "lora_b_weights", "output_tensor", "lora_indices_tensor", "scaling"],
    "bgmv_expand": [
        "inputs", "lora_b_weights", "output_tensor", "lora_indices_tensor", "add_inputs",
    ],
    "bgmv_expand_slice": [
        "inputs", "lora_b_weights", "output_tensor", "lora_indices_tensor", "slice_offset",
        "slice_size", "add_inputs",
    ],
}  # fmt: skip
# vLLM 0.32's PunicaWrapperCPU methods that `patch_wrapper` replaces, and their parameters
WRAPPER_SIGNATURES = {
    "update_metadata": ["self", "mapping", "lora_index_to_id", "max_loras", "vocab_size", "kwargs"],
    "add_shrink": ["self", "y", "x", "lora_a_stacked", "scale", "kwargs"],
    "add_expand": [
        "self", "y", "x", "lora_b_stacked", "output_slices", "offset_start", "add_inputs",
        "kwargs",
    ],
    "add_lora_linear": [
        "self", "y", "x", "lora_a_stacked", "lora_b_stacked", "scale", "output_slices", "buffer",
        "kwargs",
    ],
}  # fmt: skip


def lora_products(
    inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Row t of the result is inputs[t] @ weights[indices[t]].T, in `dtype`, and zero where
    indices[t] is -1 (no adapter). `weights`: one matrix per slot, [slots, out, in] or
    [slots, 1, out, in]. Instead of a gathered copy of the weights per token, one matmul against
    every slot at once: for LoRA's shrink (in = hidden size, out = rank) the products with all
    slots are computed and each token keeps its own slot's; for the expand (in = rank) each
    token's input is placed in its slot's columns of a [tokens, slots·rank] matrix, zeros
    elsewhere. Either way the extra work is slots·rank wide, and nothing waits on the indices."""
    if weights.dim() == 4:
        weights = weights.squeeze(dim=1)
    slots, out_dim, in_dim = weights.shape
    inputs = inputs.to(dtype=dtype)
    weights = weights.to(dtype=dtype)
    tokens = torch.arange(inputs.shape[0], device=inputs.device)
    none = (indices < 0)[:, None]
    own = indices.clamp(min=0)
    if out_dim <= in_dim:  # shrink: every slot's product, then each token's own
        every = (inputs @ weights.reshape(slots * out_dim, in_dim).T).view(-1, slots, out_dim)
        return every[tokens, own].masked_fill(none, 0)
    placed = inputs.new_zeros(inputs.shape[0], slots, in_dim)
    placed[tokens, own] = inputs.masked_fill(none, 0)
    return placed.view(-1, slots * in_dim) @ weights.permute(0, 2, 1).reshape(
        slots * in_dim, out_dim
    )


def bgmv_shrink(inputs, lora_b_weights, output_tensor, lora_indices_tensor, scaling=1.0):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    output_tensor[:, : outputs.shape[1]] = scaling * outputs[:]


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs=True):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    limit = output_tensor.shape[0]
    if outputs.shape[0] == 1 and output_tensor.shape[0] != 1:
        limit = 1
    # LoRA adapter and model may add different amounts of padding to output
    common_len = min(outputs.shape[1], output_tensor.shape[1])
    if add_inputs:
        output_tensor[:, :common_len] += outputs[:limit, :common_len]
    else:
        output_tensor[:, :common_len] = outputs[:limit, :common_len]


def bgmv_expand_slice(
    inputs,
    lora_b_weights,
    output_tensor,
    lora_indices_tensor,
    slice_offset,
    slice_size,
    add_inputs=True,
):
    outputs = lora_products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    if add_inputs:
        output_tensor[:, slice_offset : slice_offset + slice_size] += outputs[:]
    else:
        output_tensor[:, slice_offset : slice_offset + slice_size] = outputs[:]


OURS = {
    "bgmv_shrink": bgmv_shrink,
    "bgmv_expand": bgmv_expand,
    "bgmv_expand_slice": bgmv_expand_slice,
}


# The whole layer at once. vLLM's CPU punica wrapper calls the ops above once per slice (q, k and
# v of the fused projection are three) through its prefill path (V1 always takes it), which
# builds each token's index again for every call; and each call converts or transposes every
# slot's weights before it multiplies: at batch 1 a trained agent decoded far slower than the
# base model (bench/serving.py --lora). The wrapper's add_shrink, add_expand and add_lora_linear
# are replaced by the functions below: every slice of a layer in one matmul each way, against
# weights laid out once (`prepared`) and laid out again only after vLLM has written an adapter
# into a slot (LoRAModelManager.activate_adapter, the one writer), and only against the slots
# the step's tokens use (`step_of`, worked out once a step).

GENERATION = [0]  # bumped each time vLLM writes adapter weights into a slot
_PREPARED: dict = {}


@dataclass(frozen=True)
class Step:
    """What every LoRA layer of a step needs to know of its tokens' adapters, worked out once a
    step (`step_of`): the one slot they all use (`slot` >= 0), none (-1), or several (-2): then
    the slots in use (`active`) and `own`, [tokens, active], 1 where a token uses that slot (a
    row of zeros for a token without an adapter)."""

    tokens: int
    slot: int
    active: tuple[int, ...] = ()
    own: torch.Tensor | None = None
    widths: dict = field(default_factory=dict, compare=False)

    def mask(self, width: int) -> torch.Tensor:
        """[tokens, active·width]: `own` with each slot's column repeated `width` times, the
        layout of a layer's products with every active slot side by side."""
        if width not in self.widths:
            self.widths[width] = self.own.repeat_interleave(width, dim=1)
        return self.widths[width]


def step_of(indices: torch.Tensor) -> Step:
    """A step's `Step` from its per-token slot indices (-1: no adapter)."""
    tokens = indices.shape[0]
    low, high = (int(indices.min()), int(indices.max())) if tokens else (-1, -1)
    if low == high or high < 0:
        return Step(tokens, low if low == high and low >= 0 else -1)
    active = torch.unique(indices[indices >= 0])  # sorted
    own = (indices[:, None] == active[None, :]).float()
    return Step(tokens, -2, tuple(active.tolist()), own)


def prepared(stacked: tuple, slices: tuple | None = None, active: tuple = ()) -> torch.Tensor:
    """The weights of every slice, per slot, in float32, laid out for one matmul: LoRA A (`slices` None;
    each slice [slots, 1, rank, in]) as [slots, in, n·rank]; LoRA B (each slice
    [slots, 1, out_i, rank]) as [slots, n·rank, Σ out_i], each slice's rank rows feeding only
    its own columns. With `active`, those slots' side by side: A as [in, active·n·rank], B as
    [active·n·rank, Σ out_i]. Cached until an adapter is written into a slot."""
    key = (id(stacked[0]), slices is None, active)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] == GENERATION[0] and hit[1] is stacked[0]:
        return hit[2]
    if active:
        every = prepared(stacked, slices)[list(active)]
        if slices is None:
            matrix = every.permute(1, 0, 2).reshape(every.shape[1], -1).contiguous()
        else:
            matrix = every.reshape(-1, every.shape[2])
    else:
        mats = [w.squeeze(1) if w.dim() == 4 else w for w in stacked]
        slots, n = mats[0].shape[0], len(mats)
        if slices is None:
            rank = mats[0].shape[1]
            both = torch.stack(mats, dim=1).float().reshape(slots, n * rank, -1)
            matrix = both.transpose(1, 2).contiguous()
        else:
            rank = mats[0].shape[2]
            matrix = torch.zeros(slots, n, rank, sum(slices))
            start = 0
            for i, (w, size) in enumerate(zip(mats, slices, strict=True)):
                matrix[:, i, :, start : start + size] = w[:, :size].transpose(1, 2).float()
                start += size
            matrix = matrix.reshape(slots, n * rank, -1)
    _PREPARED[key] = (GENERATION[0], stacked[0], matrix)
    return matrix


# The products are taken in float32, not the model's bf16 as vLLM's ops take the expand: on a
# CPU a bf16 matmul this small costs several times a float32 one (docs/runs/training-log.md,
# "LoRA decoding"); vLLM's buffer between the two products is float32 already, and the delta is
# added to the bf16 output as vLLM adds it.


def _scaled(h: torch.Tensor, scale: float) -> torch.Tensor:
    return h.mul_(scale) if scale != 1.0 else h  # vLLM's layers pass 1.0


def _shrunk_by_slot(x, lora_a_stacked, scale, step: Step) -> torch.Tensor:
    """[tokens, active·n·rank], float32: each token's x times the A of every slice of each
    active slot, zero but in its own slot's columns."""
    n, rank = len(lora_a_stacked), lora_a_stacked[0].shape[-2]
    h = x.float() @ prepared(lora_a_stacked, active=step.active)
    return _scaled(h.mul_(step.mask(n * rank)), scale)


def fused_shrink(x, lora_a_stacked, scale, step: Step) -> torch.Tensor:
    """[tokens, n, rank], float32: each token's x times its own slot's A of every slice, times
    `scale`; zero for a token without an adapter (a row-parallel layer's first half)."""
    n, rank = len(lora_a_stacked), lora_a_stacked[0].shape[-2]
    if step.slot == -1:
        return torch.zeros(x.shape[0], n, rank, device=x.device)
    if step.slot >= 0:
        h = x.float() @ prepared(lora_a_stacked)[step.slot]
        return _scaled(h, scale).view(-1, n, rank)
    h = _shrunk_by_slot(x, lora_a_stacked, scale, step)
    return h.view(-1, len(step.active), n, rank).sum(dim=1)


def fused_expand(h, lora_b_stacked, slices, step: Step) -> torch.Tensor:
    """[tokens, Σ slices], float32: each token's h ([tokens, n, rank]) times its own slot's B
    of every slice, side by side; zero for a token without an adapter (the second half)."""
    tokens, n, rank = h.shape
    if step.slot == -1:
        return torch.zeros(tokens, sum(slices), device=h.device)
    h = h.float().reshape(tokens, n * rank)
    if step.slot >= 0:
        return h @ prepared(lora_b_stacked, tuple(slices))[step.slot]
    placed = h.repeat(1, len(step.active)).mul_(step.mask(n * rank))
    return placed @ prepared(lora_b_stacked, tuple(slices), step.active)


def fused_linear(x, lora_a_stacked, lora_b_stacked, slices, scale, step: Step) -> torch.Tensor:
    """[tokens, Σ slices], float32: each token's x times its own slot's A then B, every slice
    side by side, times `scale`; zero for a token without an adapter. Two matmuls, whether the
    step's tokens use one slot or several (the products with every active slot, masked, go
    straight into their B, not summed per token first as `fused_shrink` must)."""
    if step.slot != -2:
        return fused_expand(
            fused_shrink(x, lora_a_stacked, scale, step), lora_b_stacked, slices, step
        )
    h = _shrunk_by_slot(x, lora_a_stacked, scale, step)
    return h @ prepared(lora_b_stacked, tuple(slices), step.active)


def _fits(wrapper, x: torch.Tensor) -> bool:
    """Whether this step's tokens are known (`update_metadata` ran) and match `x`'s rows."""
    step = getattr(wrapper, "_coteam_step", None)
    return step is not None and step.tokens == x.reshape(-1, x.shape[-1]).shape[0]


def patch_wrapper(wrapper_class) -> None:
    """Replace the CPU punica wrapper's add_shrink, add_expand and add_lora_linear by fused
    ones, and work out each step's `Step` in update_metadata. A call the fused path does not fit
    (indices not matching the rows) goes to vLLM's own method."""
    if getattr(wrapper_class, "_coteam_fused", False):
        return
    update, shrink, expand, linear = (
        wrapper_class.update_metadata, wrapper_class.add_shrink,
        wrapper_class.add_expand, wrapper_class.add_lora_linear,
    )  # fmt: skip

    def update_metadata(self, *args, **kwargs):
        update(self, *args, **kwargs)
        self._coteam_step = step_of(self.token_lora_indices)

    def add_shrink(self, y, x, lora_a_stacked, scale, **kwargs):
        if not _fits(self, x):
            return shrink(self, y, x, lora_a_stacked, scale, **kwargs)
        if self.no_lora:
            return None
        out = fused_shrink(x.reshape(-1, x.shape[-1]), lora_a_stacked, scale, self._coteam_step)
        rank = out.shape[2]
        for i in range(out.shape[1]):
            y[i][:, :rank].copy_(out[:, i])
        return None

    def add_expand(self, y, x, lora_b_stacked, output_slices, offset_start=0, add_inputs=True,
                   **kwargs):  # fmt: skip
        rows = y.reshape(-1, y.shape[-1])
        if not _fits(self, rows):
            return expand(
                self, y, x, lora_b_stacked, output_slices, offset_start, add_inputs, **kwargs
            )
        if self.no_lora:
            return None
        h = x.transpose(0, 1) if isinstance(x, torch.Tensor) else torch.stack(tuple(x), dim=1)
        delta = fused_expand(h, lora_b_stacked, output_slices, self._coteam_step)
        cols = rows[:, offset_start : offset_start + delta.shape[1]]
        cols.add_(delta) if add_inputs else cols.copy_(delta)
        return None

    def add_lora_linear(self, y, x, lora_a_stacked, lora_b_stacked, scale, output_slices,
                        *, buffer=None, **kwargs):  # fmt: skip
        if buffer is not None or not _fits(self, x):
            return linear(
                self, y, x, lora_a_stacked, lora_b_stacked, scale, output_slices,
                buffer=buffer, **kwargs,
            )  # fmt: skip
        if self.no_lora:
            return None
        x = x.reshape(-1, x.shape[-1])
        delta = fused_linear(
            x, lora_a_stacked, lora_b_stacked, output_slices, scale, self._coteam_step
        )
        rows = y.reshape(-1, y.shape[-1])
        cols = rows[:, : delta.shape[1]]
        cols.add_(delta) if kwargs.get("add_inputs", True) else cols.copy_(delta)
        return None

    wrapper_class.update_metadata = update_metadata
    wrapper_class.add_shrink = add_shrink
    wrapper_class.add_expand = add_expand
    wrapper_class.add_lora_linear = add_lora_linear
    wrapper_class._coteam_fused = True


def count_slot_writes(manager_class) -> None:
    """Bump GENERATION after vLLM writes an adapter's weights into a slot, so `prepared` lays
    the weights out again."""
    if getattr(manager_class, "_coteam_counts", False):
        return
    activate = manager_class.activate_adapter

    def activate_adapter(self, *args, **kwargs):
        written = True  # vLLM returns False when the adapter is already in a slot (every step)
        try:
            written = activate(self, *args, **kwargs)
            return written
        finally:
            if written is not False:
                GENERATION[0] += 1

    manager_class.activate_adapter = activate_adapter
    manager_class._coteam_counts = True


# the line of vLLM 0.32's GPUModelRunner._bookkeeping_sync that fails on a CPU generator
REWIND = "gen.set_offset(gen.get_offset() - 4)"


def keep_seeded_requests_alive() -> bool:
    """Make CPUModelRunner rewind a seeded request's generator after a discarded sample (a prefill
    chunk that does not end the prompt) by restoring its state, where vLLM moves a CUDA
    generator's offset back. Returns whether it patched (not when vLLM's code has changed)."""
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if not hasattr(GPUModelRunner, "_sample") or REWIND not in inspect.getsource(
        GPUModelRunner._bookkeeping_sync
    ):
        log.warning(
            "coteam plugin: vLLM's model runner is not the one this patch knows; seeded requests "
            "whose prefill is chunked may stop the CPU engine"
        )
        return False
    if getattr(CPUModelRunner, "_coteam_rewinds", False):
        return True
    sample, bookkeeping = CPUModelRunner._sample, CPUModelRunner._bookkeeping_sync

    def _sample(self, *args, **kwargs):
        """Notes, before sampling, the generator state of each request whose token this step
        throws away (vLLM marks them in discard_request_mask before the forward pass)."""
        generators = self.input_batch.generators
        discarded = self.discard_request_mask.np[: self.input_batch.num_reqs].nonzero()[0]
        self._coteam_states = {
            int(i): generators[int(i)].get_state() for i in discarded if int(i) in generators
        }
        return sample(self, *args, **kwargs)

    def _bookkeeping_sync(self, *args, **kwargs):
        """Puts those states back, and keeps the generators out of vLLM's offset rewind."""
        generators = self.input_batch.generators
        rewound = {}
        for i, state in getattr(self, "_coteam_states", {}).items():
            generators[i].set_state(state)
            rewound[i] = generators.pop(i)
        self._coteam_states = {}
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            generators.update(rewound)

    CPUModelRunner._sample = _sample
    CPUModelRunner._bookkeeping_sync = _bookkeeping_sync
    CPUModelRunner._coteam_rewinds = True
    return True


def register() -> None:
    """vLLM's entry point (group `vllm.general_plugins`): on the CPU platform, replace the torch
    LoRA ops where vLLM looks them up (the ops module, whose sgmv_* prefill ops call them, and
    the CPU punica wrapper, which imported them by name); and, in a process that can run the
    model (one that has imported vLLM's worker base: the engine core and its workers, not the
    API server, which would only pay the import), the seeded-request rewind. Safe to call more
    than once."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return  # the GPU kernels skip index -1 and multiply per adapter already
    if "vllm.v1.worker.worker_base" in sys.modules and keep_seeded_requests_alive():
        log.info("coteam plugin: seeded requests rewind their CPU generator by its state")
    from vllm.lora.ops.torch_ops import lora_ops
    from vllm.lora.punica_wrapper import punica_cpu

    for name, expected in SIGNATURES.items():
        theirs = getattr(lora_ops, name, None)
        if theirs is None or list(inspect.signature(theirs).parameters) != expected:
            log.warning(
                "coteam plugin: vLLM's %s is not the one these ops replace; LoRA ops left as "
                "they are (base-model answers batched with adapter requests may be wrong)",
                name,
            )
            return
    for name, op in OURS.items():
        setattr(lora_ops, name, op)
        setattr(punica_cpu, name, op)
    log.info("coteam plugin: CPU LoRA ops replaced (index -1 skipped, one matmul for all slots)")
    from vllm.lora.model_manager import LoRAModelManager

    wrapper = punica_cpu.PunicaWrapperCPU
    for name, expected in WRAPPER_SIGNATURES.items():
        if list(inspect.signature(getattr(wrapper, name)).parameters) != expected:
            log.warning("coteam plugin: vLLM's PunicaWrapperCPU.%s has changed; not fused", name)
            return
    count_slot_writes(LoRAModelManager)
    patch_wrapper(wrapper)
    log.info("coteam plugin: CPU LoRA fused (every slice and slot of a layer in one matmul)")
