"""One MAGRPO update of a small model's LoRA, run by tests/test_magrpo.py under `torchrun` with one
process and with two (gloo): `torchrun ... tests/ddp_update.py MODEL_FOLDER OUT`. Every rank builds
the same samples and LoRA weights; rank 0 saves the weights after the step, the loss and the
gradient norm to OUT, with the weights before it."""

import sys

import torch
import torch.distributed as dist

from learner.config import MAGRPOConfig
from learner.magrpo import AgentPolicies, Sample

model_folder, out = sys.argv[1:3]
dist.init_process_group("gloo")
config = MAGRPOConfig(
    learning_rate=1e-2, target_modules=("q_proj", "v_proj"), micro_batch=2, dtype="float32"
)
policies = AgentPolicies(model_folder, n_agents=1, config=config)
generator = torch.Generator().manual_seed(0)
with torch.no_grad():  # a trained-looking adapter: LoRA B at zero would hide half the gradient
    for p in policies.parameters(0):
        p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
before = [p.detach().clone() for p in policies.parameters(0)]


def tokens(n: int) -> list[int]:
    return torch.randint(0, 500, (n,), generator=generator).tolist()


# two groups sharing a prompt (each one batch) and three lone samples (micro-batches of 2)
samples = []
for prompt_length in (12, 9):
    prompt = tokens(prompt_length)
    samples += [Sample(prompt, tokens(n)) for n in (5, 8, 3)]
samples += [Sample(tokens(7), tokens(n)) for n in (4, 6, 2)]
advantages = torch.tensor([0.5, -0.25, -0.25, 0.1, 0.3, -0.4, 0.2, -0.1, 0.05])
stats = policies.update(0, samples, advantages)
if dist.get_rank() == 0:
    torch.save(
        {
            "before": before,
            "weights": [p.detach().clone() for p in policies.parameters(0)],
            "loss": stats["loss"],
            "grad_norm": stats["grad_norm"],
            "world": dist.get_world_size(),
        },
        out,
    )
dist.destroy_process_group()
