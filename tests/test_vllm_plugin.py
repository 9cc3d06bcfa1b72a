"""CoTeam's vLLM plugin (agents/serving/vllm_plugin): its LoRA ops give what vLLM's CPU torch ops give
for every token with an adapter, and no delta to a token without one (index -1), which vLLM's
own ops give the last slot's. The reference below is vLLM 0.32's op, token by token; the
plugin's effect on a real server is tested in tests/test_serving.py."""

import pytest
import torch

from agents.serving.vllm_plugin import coteam_vllm_plugin as plugin

SLOTS, RANK, HIDDEN, KV = 4, 8, 896, 128


def reference(inputs, weights, indices):
    """vLLM's torch op: each token's slot's matrix gathered and applied; -1 gives zero here."""
    if weights.dim() == 4:
        weights = weights.squeeze(dim=1)
    rows = [
        weights[i] @ x if i >= 0 else torch.zeros(weights.shape[1])
        for x, i in zip(inputs, indices.tolist(), strict=True)
    ]
    return torch.stack(rows)


@pytest.fixture(params=[1, 16, 300], ids=lambda n: f"{n}-tokens")
def batch(request):
    g = torch.Generator().manual_seed(request.param)
    tokens = request.param
    indices = torch.randint(0, SLOTS, (tokens,), generator=g)
    indices[::3] = -1  # base-model tokens beside adapter tokens, as in a mixed batch
    return tokens, indices, g


def test_shrink_matches_vllm_and_gives_no_delta_without_an_adapter(batch):
    tokens, indices, g = batch
    x = torch.randn(tokens, HIDDEN, generator=g)
    a = torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g)  # vLLM stacks [slots, 1, rank, hidden]
    out = torch.full((tokens, RANK), 7.0)
    plugin.bgmv_shrink(x, a, out, indices, 0.5)
    torch.testing.assert_close(out, 0.5 * reference(x, a, indices), rtol=1e-5, atol=1e-4)
    assert (out[indices < 0] == 0).all()


@pytest.mark.parametrize("add_inputs", [True, False])
def test_expand_matches_vllm_and_leaves_base_tokens_alone(batch, add_inputs):
    tokens, indices, g = batch
    y = torch.randn(tokens, RANK, generator=g)
    b = torch.randn(SLOTS, 1, HIDDEN, RANK, generator=g)
    start = torch.randn(tokens, HIDDEN, generator=g)
    out = start.clone()
    plugin.bgmv_expand(y, b, out, indices, add_inputs)
    expected = reference(y, b, indices) + (start if add_inputs else 0)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    if add_inputs:
        assert torch.equal(out[indices < 0], start[indices < 0])


def test_expand_slice_writes_its_slice_only(batch):
    tokens, indices, g = batch
    y = torch.randn(tokens, RANK, generator=g)
    b = torch.randn(SLOTS, KV, RANK, generator=g)  # a k or v slice of the fused qkv projection
    start = torch.randn(tokens, HIDDEN + 2 * KV, generator=g)
    out = start.clone()
    plugin.bgmv_expand_slice(y, b, out, indices, HIDDEN, KV, True)
    expected = start.clone()
    expected[:, HIDDEN : HIDDEN + KV] += reference(y, b, indices)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_the_replaced_ops_keep_vllms_signatures():
    """`register` patches only ops whose parameters are these; the plugin's own agree."""
    import inspect

    for name, params in plugin.SIGNATURES.items():
        assert list(inspect.signature(plugin.OURS[name]).parameters) == params


QKV = (HIDDEN, KV, KV)  # the fused q, k and v projection's slices


def slice_by_slice(x, a, b, indices, scale):
    """What vLLM's wrapper does with the ops above: a float32 shrink and an expand per slice."""
    y = torch.zeros(x.shape[0], sum(QKV), dtype=torch.bfloat16)
    start = 0
    for a_i, b_i, size in zip(a, b, QKV, strict=True):
        h = torch.zeros(x.shape[0], RANK)
        plugin.bgmv_shrink(x, a_i, h, indices, scale)
        plugin.bgmv_expand_slice(h, b_i, y, indices, start, size, True)
        start += size
    return y


def close_to_vllms(ours, theirs):
    """The fused expand multiplies in float32 where vLLM's ops round the shrunk values to bf16
    first: the same within bf16's rounding of the output's scale."""
    torch.testing.assert_close(
        ours.float(), theirs.float(), rtol=0.02, atol=0.01 * float(theirs.abs().max()) + 1e-6
    )


@pytest.mark.parametrize(
    "indices",
    [[2], [1, 1, 1], [0, 1, -1, 3, 2, -1], [-1, -1]],
    ids=["one", "same", "mixed", "none"],
)
def test_a_whole_layer_in_one_matmul_gives_what_the_ops_give_slice_by_slice(indices):
    g = torch.Generator().manual_seed(len(indices))
    indices = torch.tensor(indices)
    a = tuple(torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g).bfloat16() for _ in QKV)
    b = tuple(torch.randn(SLOTS, 1, size, RANK, generator=g).bfloat16() for size in QKV)
    x = torch.randn(indices.shape[0], HIDDEN, generator=g).bfloat16()
    step = plugin.step_of(indices)
    fused = plugin.fused_linear(x, a, b, QKV, 0.5, step).bfloat16()
    halves = plugin.fused_expand(plugin.fused_shrink(x, a, 0.5, step), b, QKV, step).bfloat16()
    torch.testing.assert_close(halves, fused)
    close_to_vllms(fused, slice_by_slice(x, a, b, indices, 0.5))
    assert (fused[indices < 0] == 0).all()


def test_a_step_names_the_one_slot_its_tokens_use_or_the_slots_in_use():
    assert plugin.step_of(torch.tensor([3, 3])).slot == 3
    assert plugin.step_of(torch.tensor([-1, -1])).slot == -1
    step = plugin.step_of(torch.tensor([2, -1, 0, 2]))
    assert (step.slot, step.active) == (-2, (0, 2))
    assert step.own.tolist() == [[0, 1], [0, 0], [1, 0], [0, 1]]
    assert step.mask(2).tolist()[0] == [0, 0, 1, 1]


def test_weights_are_laid_out_again_only_after_an_adapter_is_written_into_a_slot():
    """The layout is cached; vLLM writes slots only in activate_adapter, which returns False
    (and writes nothing) when the adapter is already in one, as it does every step."""

    class Manager:
        def activate_adapter(self, lora_id):
            return lora_id != "already in a slot"

    plugin.count_slot_writes(Manager)
    a = (torch.randn(SLOTS, 1, RANK, HIDDEN),)
    x, one = torch.randn(1, HIDDEN), plugin.step_of(torch.tensor([1]))
    before = plugin.fused_shrink(x, a, 1.0, one).clone()
    a[0][1] = 0  # vLLM's set_lora, in place
    Manager().activate_adapter("already in a slot")
    assert torch.equal(plugin.fused_shrink(x, a, 1.0, one), before)
    Manager().activate_adapter("new")
    assert (plugin.fused_shrink(x, a, 1.0, one) == 0).all()


def test_the_fused_wrapper_hands_vllm_a_call_whose_rows_it_cannot_place():
    """Before a step's indices are known, or when they do not match the rows, vLLM's own
    methods run; after, the fused ones write the same as the ops slice by slice."""
    calls = []

    class Wrapper:
        no_lora = False
        token_lora_indices = torch.tensor([0, -1, 2])

        def update_metadata(self, mapping, lora_index_to_id, max_loras, vocab_size, **kwargs):
            calls.append("update")

        def add_shrink(self, y, x, lora_a_stacked, scale, **kwargs):
            calls.append("vllm shrink")

        def add_expand(self, y, x, lora_b_stacked, output_slices, offset_start=0,
                       add_inputs=True, **kwargs):  # fmt: skip
            calls.append("vllm expand")

        def add_lora_linear(self, y, x, lora_a_stacked, lora_b_stacked, scale, output_slices,
                            *, buffer=None, **kwargs):  # fmt: skip
            calls.append("vllm linear")

    plugin.patch_wrapper(Wrapper)
    wrapper, g = Wrapper(), torch.Generator().manual_seed(7)
    a = tuple(torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g).bfloat16() for _ in QKV)
    b = tuple(torch.randn(SLOTS, 1, size, RANK, generator=g).bfloat16() for size in QKV)
    x = torch.randn(3, HIDDEN, generator=g).bfloat16()
    y = torch.zeros(3, sum(QKV), dtype=torch.bfloat16)
    wrapper.add_lora_linear(y, x, a, b, 1.0, QKV)  # no step's indices yet
    wrapper.update_metadata(None, [], SLOTS, 0)
    wrapper.add_lora_linear(y[:2], x[:2], a, b, 1.0, QKV)  # 2 rows, 3 indices
    assert calls == ["vllm linear", "update", "vllm linear"]
    wrapper.add_lora_linear(y, x, a, b, 1.0, QKV)
    buffer = torch.full((len(QKV), 3, RANK), 9.0)  # a row-parallel layer's two halves
    wrapper.add_shrink(buffer, x, a, 1.0)
    twice = y.clone()
    wrapper.add_expand(twice, buffer, b, QKV)
    assert len(calls) == 3
    expected = slice_by_slice(x, a, b, wrapper.token_lora_indices, 1.0)
    close_to_vllms(y, expected)
    close_to_vllms(twice, 2 * expected)
