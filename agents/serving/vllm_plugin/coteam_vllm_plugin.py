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

The ops below compute the same products with one matmul against every adapter slot at once and
a zero delta for index -1, and `register` (a `vllm.general_plugins` entry point, which vLLM calls
in every one of its processes) puts them in place of vLLM's, on the CPU platform only. They keep
the signatures and output conventions of vLLM 0.32's torch ops; `register` patches nothing (and
says so in the server's log) when those signatures have changed.

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
