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
