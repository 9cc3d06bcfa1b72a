"""The MAGRPO update against hand-computed values, and one real step on the real model."""

import math

import pytest
import torch

import store
from agents.tasks import humaneval_task
from agents.team.crossing import recombine
from agents.team.episode import run_group
from agents.team.feedback import sandbox_check
from agents.team.graph import Sampling, TeamSettings
from learner.config import MAGRPOConfig, TrainArgs
from learner.magrpo import (
    AgentPolicies,
    Sample,
    cross_picks,
    cross_returns,
    group_advantages,
    has_signal,
    policy_loss,
    prefix_groups,
    shared_prefix,
    turn_groups,
    update_dtype,
    update_positions,
)
from learner.report import plot_training_curve, training_curve_figure
from learner.reward_config import RewardWeights
from learner.rewards import score_group
from learner.train import agent_samples, cross_group, steps_per_pass
from tests.scripted import ScriptedPolicy

CODING = humaneval_task(0)


def test_advantage_is_reward_minus_group_mean():
    advantages = group_advantages(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert advantages.tolist() == [-2.0, -1.0, 0.0, 3.0]


def test_advantage_scaled_by_std():
    rewards = torch.tensor([1.0, 2.0, 3.0, 6.0])
    std = math.sqrt((4 + 1 + 0 + 9) / 4)  # population std around the mean 3
    scaled = group_advantages(rewards, scale_by_std=True)
    assert scaled.tolist() == pytest.approx([-2 / std, -1 / std, 0.0, 3 / std], rel=1e-5)


def test_one_turn_is_one_group_of_the_rewards():
    [(turn, members, returns)] = turn_groups([1, 1, 1], torch.tensor([0.2, 0.5, 0.8]), 0.9)
    assert turn == 0 and members == [0, 1, 2]
    assert returns.tolist() == pytest.approx([0.2, 0.5, 0.8])


def test_each_turn_is_a_group_and_a_first_try_that_needed_the_feedback_earns_less():
    # episode 0 passed at once (R 1.0); 1 passed after the feedback turn (R 1.0); 2 failed twice
    rewards = torch.tensor([1.0, 1.0, 0.3])
    first, second = turn_groups([1, 2, 2], rewards, 0.5)
    assert first[0] == 0 and first[1] == [0, 1, 2]
    assert first[2].tolist() == pytest.approx([1.0, 0.5, 0.15])  # γ^(turns after)·R
    assert second[0] == 1 and second[1] == [1, 2]  # only the episodes that reached turn 1
    assert second[2].tolist() == pytest.approx([1.0, 0.3])
    # the team that succeeded at once is the best first try, the failing one the worst
    assert group_advantages(first[2]).argsort().tolist() == [2, 1, 0]
    assert not has_signal(
        group_advantages(turn_groups([2, 2], torch.tensor([0.4, 0.4]), 0.9)[1][2])
    )


def test_crossed_returns_are_each_samples_mean_over_the_joint_actions_it_is_part_of():
    picks = cross_picks(2, 2)
    assert picks == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # R of (helper sample, entry sample): helper sample 0 and entry sample 1 are the better parts
    rewards = torch.tensor([0.2, 1.0, 0.0, 0.4])
    returns = cross_returns(rewards, picks, 2)
    assert torch.allclose(returns, torch.tensor([[0.6, 0.2], [0.1, 0.7]]))
    # three agents, G = 2: each sample is in 4 of the 8 joint actions
    picks3 = cross_picks(2, 3)
    returns3 = cross_returns(torch.tensor([float(a) for a, _, _ in picks3]), picks3, 2)
    assert torch.allclose(returns3, torch.tensor([[0.0, 1.0], [0.5, 0.5], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="every sample"):  # sample 1 of each agent in none
        cross_returns(torch.tensor([1.0, 0.0]), [(0, 0), (0, 0)], 2)


def test_crossing_credits_each_agent_for_its_own_part(tmp_path):
    """Sample 0: a right helper, a wrong entry; sample 1: a wrong helper, a right entry. Aligned,
    both joint actions fail the tests alike: no signal. Crossed, the right helper with the
    right entry passes, and each agent's right sample gets the higher return."""
    results = run_group(
        CODING,
        ScriptedPolicy(mixed_parts),
        2,
        TeamSettings(sampling=Sampling(seed=1), agents=2),
        db=tmp_path / "x.db",
        checker=sandbox_check,
    )
    scores = score_group(results)
    assert not any(r.success for r in results)
    assert not has_signal(group_advantages(torch.tensor([s.reward for s in scores])))
    returns = cross_group(results, TrainArgs(magrpo=MAGRPOConfig(group_size=2, joint_mode="cross")),
                          sandbox_check, None, RewardWeights())  # fmt: skip
    helper, entry = (group_advantages(r) for r in returns)
    assert helper[0] > 0 > helper[1] and entry[1] > 0 > entry[0]
    mixed = recombine(results, (0, 1), sandbox_check)  # the joint action no episode ran
    assert mixed.success and mixed.test_report.passed == mixed.test_report.total == 7
    assert mixed.steps == [results[0].final_steps()[0], results[1].final_steps()[1]]
    with store.open_db(tmp_path / "x.db") as db:  # the crossed joint actions are not stored
        assert len(store.list_episodes(db)) == 2


def mixed_parts(request) -> str:
    """Seeds 1 and 2 are sample 0's helper and entry, 101 and 102 sample 1's: a right helper in
    sample 0, a right entry in sample 1 (each writes its own call of `aux` after its head).
    A wrong part fails every test (a helper returning None, an entry dividing its result by
    zero) and uses the contract as the right one does; the wrong helper is as long as the right
    one (the reward's speed counts the longer agent's tokens)."""
    if "helper-function author" in request.messages[0]["content"]:
        right = (
            "any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])"
        )
        body = right if request.seed == 1 else "None  # " + "x" * (len(right) - 8)
        return f"    return {body}\n```"
    call = "    return aux(numbers, threshold)"
    return f"{call}\n```" if request.seed == 102 else f"{call} / 0\n```"


def test_equal_rewards_give_no_signal():
    assert group_advantages(torch.tensor([0.7, 0.7, 0.7])).abs().max() == 0


def test_policy_loss_is_minus_mean_of_advantage_times_summed_logprobs():
    logprobs = [torch.tensor([-1.0, -2.0]), torch.tensor([-0.5])]
    advantages = torch.tensor([1.0, -1.0])
    # sample 0: −(1 · −3) = 3; sample 1: −(−1 · −0.5) = −0.5; mean = 1.25
    assert policy_loss(logprobs, advantages).item() == pytest.approx(1.25)


def test_clipped_loss_caps_the_ratio():
    old = [torch.tensor([-1.0, -1.0])]
    new = [old[0] + math.log(2.0)]  # ratio 2 on every token
    positive = policy_loss(new, torch.tensor([1.0]), old_logprobs=old, clip_eps=0.2)
    assert positive.item() == pytest.approx(-(1.2 + 1.2))  # min(2A, 1.2A) per token, A = 1
    negative = policy_loss(new, torch.tensor([-1.0]), old_logprobs=old, clip_eps=0.2)
    assert negative.item() == pytest.approx(2 + 2)  # min(−2, −1.2) = −2 per token


def test_kl_penalty_is_zero_at_the_reference_and_positive_elsewhere():
    logp = [torch.tensor([-1.0, -2.0])]
    advantages = torch.tensor([0.0])
    assert policy_loss(logp, advantages, ref_logprobs=logp, kl_coef=0.1).item() == 0
    ref = [torch.tensor([-1.5, -2.0])]
    delta = -0.5  # ref − logp on the first token
    expected = 0.1 * (math.exp(delta) - delta - 1)
    assert policy_loss(logp, advantages, ref_logprobs=ref, kl_coef=0.1).item() == pytest.approx(
        expected
    )


@pytest.mark.integration
def test_prompt_once_per_group_gives_the_per_sample_logprobs_and_no_signal_moves_nothing(
    model_path,
):
    """Real model: the shared-prompt pass (the prompt, or the prefix the prompts share, once;
    the rest of each sample packed in one row) gives each sample's log-probs to 1e-5, and its
    gradients match; a step whose advantages are all zero leaves every LoRA weight and the
    optimizer state bit-identical."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # float32 on any CPU: the comparisons are of the pass forms, to 1e-5
    config = MAGRPOConfig(learning_rate=5e-3, target_modules=("q_proj", "v_proj"), dtype="float32")
    policies = AgentPolicies(str(model_path), n_agents=1, config=config)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a function that adds two numbers."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompt = tokenizer.encode(chat, add_special_tokens=False)
    words = ("def add(a, b):\n    return a + b", "Sure.", "lambda a, b: a + b  # short and sweet")
    completions = [tokenizer.encode(w) for w in words]
    samples = [Sample(prompt, c) for c in completions]
    # a trained-looking adapter: LoRA B is zero at the start, which would hide a wrong prompt pass
    with torch.no_grad():
        for p in policies.parameters(0):
            p.normal_(0, 0.02)

    def grads(logprobs):
        for p in policies.parameters(0):
            p.grad = None
        torch.stack([lp.sum() for lp in logprobs]).sum().backward()
        return [p.grad.clone() for p in policies.parameters(0)]

    # the same prompt, and prompts that share only a prefix (a class's skeleton before each
    # sample's own earlier methods): the prompt itself, and two longer ones that differ
    earlier = (
        "Earlier:\ndef sub(a, b):\n    return a - b\n",
        "Earlier:\ndef neg(a):\n    return -a\n",
    )
    prefixed = [
        samples[0],
        *(Sample(prompt + tokenizer.encode(e), samples[1].completion_ids) for e in earlier),
    ]
    for group in (samples, prefixed):
        shared = policies.group_logprobs(0, group)
        alone = [policies.completion_logprobs(0, [s])[0] for s in group]
        for a, b in zip(shared, alone, strict=True):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
        for a, b in zip(grads(shared), grads(alone), strict=True):
            assert (a - b).norm() <= 1e-3 * b.norm(), ((a - b).norm(), b.norm())

    policies.update(0, samples, torch.tensor([1.0, -0.5, -0.5]))  # Adam now has momentum
    before = [p.detach().clone() for p in policies.parameters(0)]
    state = [v.clone() for s in policies.optimizers[0].state.values() for v in s.values()]
    stats = policies.update(0, samples, group_advantages(torch.tensor([0.3, 0.3, 0.3])))
    assert stats["updated"] is False
    after = policies.parameters(0)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    moved = [v for s in policies.optimizers[0].state.values() for v in s.values()]
    assert len(state) == len(moved) > 0
    assert all(torch.equal(a, b) for a, b in zip(state, moved, strict=True))


@pytest.mark.integration
def test_the_update_scores_tokens_under_the_sampling_temperature(model_path):
    """Real model: the log-probs the loss uses, per sample and per shared-prompt group, are
    log_softmax(logits / T) of the sampled tokens, computed here directly from the model's
    logits; at T = 0.8 they differ from T = 1's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = MAGRPOConfig(temperature=0.8, target_modules=("q_proj", "v_proj"), dtype="float32")
    policies = AgentPolicies(str(model_path), n_agents=1, config=config)
    prompt = tokenizer.encode("Write a function that adds two numbers.\n")
    completions = [tokenizer.encode(w) for w in ("def add(a, b):\n    return a + b", "Sure.")]
    with torch.no_grad():
        for p in policies.parameters(0):
            p.normal_(0, 0.02)
        policies.model.set_adapter(policies.adapter_name(0))
        direct = []
        for ids in completions:
            logits = policies.model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
            step = logits[len(prompt) - 1 : -1]  # the logits that predict each completion token
            for temperature in (0.8, 1.0):
                direct.append(
                    torch.log_softmax(step / temperature, -1)[torch.arange(len(ids)), ids]
                )
        alone = [policies.completion_logprobs(0, [Sample(prompt, ids)])[0] for ids in completions]
        shared = policies.group_logprobs(0, [Sample(prompt, ids) for ids in completions])
    for i in range(len(completions)):
        at_temperature, at_one = direct[2 * i], direct[2 * i + 1]
        assert torch.allclose(alone[i], at_temperature, atol=1e-4)
        assert torch.allclose(shared[i], at_temperature, atol=1e-4)
        assert not torch.allclose(alone[i], at_one, atol=1e-2)


@pytest.mark.integration
def test_a_reply_a_stop_rule_emptied_counts_in_the_mean_and_moves_nothing(model_path):
    """Real model: a sample whose reply a stop rule cut to nothing (an empty section) has no
    tokens to train; the update leaves it out of the passes but keeps it in the 1/G of the loss,
    and a group of only such samples is no signal (no step, no error)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = MAGRPOConfig(learning_rate=0.0, target_modules=("q_proj",))  # measure, move nothing
    policies = AgentPolicies(str(model_path), n_agents=1, config=config)
    prompt = tokenizer.encode("Write one sentence about rivers.")
    said = [Sample(prompt, tokenizer.encode(w)) for w in ("Rivers flow.", "Water runs downhill.")]
    empty = Sample(prompt, [], [])
    whole = policies.update(0, said, torch.tensor([1.0, -1.0]))
    with_empty = policies.update(0, [*said, empty], torch.tensor([1.0, -1.0, 0.5]))
    assert whole["updated"] and with_empty["updated"]
    assert with_empty["loss"] == pytest.approx(whole["loss"] * 2 / 3, rel=1e-4)
    nothing = policies.update(0, [empty, empty], torch.tensor([0.5, -0.5]))
    assert nothing == {"loss": 0.0, "grad_norm": 0.0, "updated": False}


def test_samples_that_share_a_long_prompt_prefix_are_one_pass_and_unrelated_ones_are_not():
    """A class's incremental view: the same skeleton (a long prefix), then each sample's own
    earlier methods; those samples are one group, the prefix computed once. Another task's
    prompt shares only the chat template's first tokens: a group of its own. The packed row's
    size bounds a group."""
    template, skeleton = [1, 2, 3], list(range(100, 160))
    first = Sample(template + skeleton + [7, 8], [9] * 5)  # no earlier method
    later = [Sample(template + skeleton + [6, 40 + g, 41, 7, 8], [9] * 5) for g in range(3)]
    other = Sample(template + list(range(500, 570)), [9] * 5)
    samples = [later[0], other, first, later[1], later[2]]
    assert shared_prefix([s.prompt_ids for s in samples if s is not other]) == 63
    groups = prefix_groups(samples)
    assert sorted(map(sorted, groups)) == [[0, 2, 3, 4], [1]]
    # in prompt order (later 0, 1, 2, then first), each joining its neighbour while what follows
    # their prefix fits: two later samples 9 + 9 do not, later[2] and `first` 10 + 7 do
    assert sorted(map(sorted, prefix_groups(samples, group_tokens=17))) == [[0], [1], [2, 4], [3]]
    assert prefix_groups([first, first]) == [[0, 1]]  # the same prompt: the completions alone
    # what the update's passes compute: the prefix once and each sample's rest, against every
    # prompt whole; a padded batch of unrelated prompts at its longest row's width
    assert update_positions(samples, micro_batch=2) == 63 + (2 + 5) + 3 * (5 + 5) + (73 + 5)
    assert update_positions([first, first], micro_batch=2) == 65 + 2 * 5
    assert update_positions([first, other], micro_batch=2) == 2 * (73 + 5)


def test_no_signal_is_detected():
    assert not has_signal(group_advantages(torch.tensor([0.5, 0.5, 0.5, 0.5])))
    assert has_signal(group_advantages(torch.tensor([0.5, 0.5, 0.5, 0.6])))
    assert not has_signal(torch.tensor([]))


@pytest.mark.integration
def test_one_step_moves_each_agent_toward_its_better_sample(model_path, tmp_path):
    """Real model, two LoRA agents: after one step, the sample with the positive advantage is more
    likely under each agent, and only the agent that was updated changed."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # a step small enough for the first-order move to show (Adam moves every weight by about
    # the learning rate at its first step; 5e-3 overshot once log π was taken at T = 0.8)
    config = MAGRPOConfig(learning_rate=1e-3, target_modules=("q_proj", "v_proj"), dtype="float32")
    policies = AgentPolicies(str(model_path), n_agents=2, config=config)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say a colour."}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer.encode(chat, add_special_tokens=False)
    words = ("Blue.", "Green, of course, like grass.")  # different lengths: padding is exercised
    samples = [Sample(prompt, tokenizer.encode(word)) for word in words]
    advantages = group_advantages(torch.tensor([1.0, 0.0]))  # Blue is better

    def logprob_sums(agent):
        with torch.no_grad():
            return [lp.sum().item() for lp in policies.completion_logprobs(agent, samples)]

    before0, before1 = logprob_sums(0), logprob_sums(1)
    with torch.no_grad():  # left padding in a batch changes nothing
        alone = [policies.completion_logprobs(0, [s])[0].sum().item() for s in samples]
    assert alone == pytest.approx(before0, abs=1e-3)
    stats = policies.update(0, samples, advantages)
    after0, after1 = logprob_sums(0), logprob_sums(1)
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert after0[0] > before0[0]
    assert after0[0] - after0[1] > before0[0] - before0[1]  # Blue gained on Green
    assert after1 == pytest.approx(before1, abs=1e-5)

    saved = policies.save(0, tmp_path / "agent0" / "v1", metadata={"step": 1})
    assert (saved / "adapter_config.json").is_file() and (saved / "coteam-adapter.json").is_file()
    assert not [p for p in saved.parent.iterdir() if p.name.startswith(".")]  # no temp folder left
    with pytest.raises(FileExistsError):
        policies.save(0, saved)
    reloaded = AgentPolicies(str(model_path), n_agents=1, config=config, start_from={0: str(saved)})
    with torch.no_grad():
        again = [lp.sum().item() for lp in reloaded.completion_logprobs(0, samples)]
    assert again == pytest.approx(after0, abs=1e-3)


def test_the_update_weighs_the_base_in_bf16_where_the_machine_computes_in_it(monkeypatch):
    import agents.serving.server as server

    monkeypatch.setattr(server, "cpu_has_bf16", lambda: True)
    assert update_dtype("auto", gpu=False) == torch.bfloat16
    monkeypatch.setattr(server, "cpu_has_bf16", lambda: False)
    assert update_dtype("auto", gpu=False) == torch.float32  # an AVX2-only CPU
    assert update_dtype("auto", gpu=True) == torch.bfloat16
    assert update_dtype("bfloat16", gpu=False) == torch.bfloat16
    assert update_dtype("float32", gpu=True) == torch.float32


@pytest.mark.integration
def test_a_bf16_base_keeps_the_lora_in_float32_and_learns(model_path):
    """Real model with its weights in bf16 (what "auto" picks on a CPU with native bf16): each
    agent's LoRA and Adam's state stay float32, and one step makes the better sample likelier."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = MAGRPOConfig(learning_rate=1e-3, target_modules=("q_proj", "v_proj"), dtype="bfloat16")
    policies = AgentPolicies(str(model_path), n_agents=2, config=config)
    base = [p for n, p in policies.model.named_parameters() if "lora_" not in n]
    assert base and all(p.dtype == torch.bfloat16 for p in base)
    lora = policies.parameters(0) + policies.parameters(1)
    assert lora and all(p.dtype == torch.float32 for p in lora)
    prompt = tokenizer.encode("Say a colour.\n")
    samples = [Sample(prompt, tokenizer.encode(w)) for w in ("Blue.", "Green, like grass.")]

    def blue_over_green():
        with torch.no_grad():
            blue, green = policies.group_logprobs(0, samples)
        return blue.sum().item() - green.sum().item()

    before = blue_over_green()
    assert policies.update(0, samples, group_advantages(torch.tensor([1.0, 0.0])))["updated"]
    assert blue_over_green() > before
    moments = [v for s in policies.optimizers[0].state.values() for v in s.values() if v.dim()]
    assert moments and all(v.dtype == torch.float32 for v in moments)


def test_steps_per_pass_over_a_cycled_task_set():
    assert steps_per_pass(8, 2) == 4
    assert steps_per_pass(9, 2) == 5  # the last step of a pass starts the next
    assert steps_per_pass(1, 2) == 1


def test_training_curve_is_a_png_with_or_without_passes(tmp_path):
    history = [{"step": s, "reward_mean": s / 10, "reward_max": 1.0} for s in range(1, 9)]
    for pass_steps in (None, 4, 5):  # 5: fewer than two passes, the moving mean instead
        path = plot_training_curve(history, tmp_path / f"curve-{pass_steps}.png", "t", pass_steps)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_training_curve_shows_what_the_sampled_answers_did_where_the_steps_recorded_it():
    history = [{"step": s, "reward_mean": s / 10, "reward_max": 1.0} for s in range(1, 9)]
    assert len(training_curve_figure(history).axes) == 1  # a run from before: the reward only
    coding = [h | {"pass_rate": 0.5, "helper_called": s / 8} for s, h in enumerate(history, 1)]
    for pass_steps in (None, 4):
        reward, below = training_curve_figure(coding, "t", pass_steps).axes
        labels = below.get_legend_handles_labels()[1]
        assert labels == ["passed", "entry calls the helper"]
        called = [line for line in below.get_lines() if line.get_label() == labels[1]][0]
        # smoothed: the last pass's mean (steps 5-8), or the moving mean of the last 3 steps
        last = (5 + 6 + 7 + 8) / 8 / 4 if pass_steps else (6 + 7 + 8) / 8 / 3
        assert called.get_ydata()[-1] == pytest.approx(last)


def test_a_steps_shares_are_over_every_sampled_answer_of_its_tasks():
    from types import SimpleNamespace

    from learner.train import Group, sampled_behaviour

    def group(successes, called):
        results = [SimpleNamespace(success=s) for s in successes]
        parts = [{"helper_called": c, "role_violations": 0.0} for c in called]
        return Group(results, torch.zeros(len(results)), torch.zeros(2, len(results)), parts)

    shares = sampled_behaviour([group([True, False], [1.0, 0.0]), group([True, True], [1.0, 1.0])])
    assert shares == {"pass_rate": 0.75, "helper_called": 0.75, "role_violations": 0.0}
    writing = Group([SimpleNamespace(success=False)], torch.zeros(1), torch.zeros(1, 1), [{}])
    assert sampled_behaviour([writing]) == {"pass_rate": 0.0}  # no helper to call


@pytest.mark.integration
def test_a_checkpoint_resumes_the_adapter_and_its_optimizer_exactly(model_path, tmp_path):
    """What `coteam train --resume` relies on: a new AgentPolicies built from a step's checkpoint
    takes the next step exactly as the one that kept running (Adam's moments included)."""
    from learner.train import read_checkpoint, write_checkpoint

    config = MAGRPOConfig(learning_rate=5e-3, target_modules=("q_proj", "v_proj"), dtype="float32")
    running = AgentPolicies(str(model_path), n_agents=1, config=config)
    samples = [Sample([9707, 11, 1879, 0], [5, 6]), Sample([9707, 11, 1879, 0], [7, 8, 9])]
    advantages = torch.tensor([1.0, -1.0])
    running.update(0, samples, advantages)
    folder = tmp_path / "checkpoint"
    write_checkpoint(running, folder, 1, [{"step": 1}], tasks=[])
    assert read_checkpoint(folder)["step"] == 1
    resumed = AgentPolicies(
        str(model_path), n_agents=1, config=config, start_from={0: str(folder / "agent0")}
    )
    resumed.load_optimizers(folder)
    running.update(0, samples, advantages)
    resumed.update(0, samples, advantages)
    pairs = list(zip(running.parameters(0), resumed.parameters(0), strict=True))
    assert pairs and all(torch.allclose(a, b, atol=1e-6) for a, b in pairs)


def test_a_call_whose_reply_was_cut_to_nothing_is_a_sample_with_no_tokens():
    """An empty section (a stop rule kept nothing) is trained as what it is; a server that
    returns no token ids at all is refused."""
    from types import SimpleNamespace

    from agents.serving.policy import Completion

    def result(token_ids):
        done = Completion("", None, 2, 0, 0.1, None, "stop", [1, 2], token_ids, [])
        return SimpleNamespace(calls=lambda agent, turn: [done])

    [sample], owners = agent_samples([result([])], agent=0, turn=0)
    assert owners == [0]
    assert sample.prompt_ids == [1, 2] and sample.completion_ids == []
    with pytest.raises(RuntimeError, match="no token ids"):
        agent_samples([result(None)], agent=0, turn=0)


def test_a_data_parallel_step_on_two_processes_equals_one_process_step(tmp_path):
    """`torchrun --nproc_per_node 2` (gloo, CPU): each rank passes half of the batches and the
    gradients are summed over the ranks; the LoRA after the step is one process's to 1e-5.
    A small Qwen2 of random weights stands in for the model: the property is arithmetic."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "model")
    checkout = Path(__file__).resolve().parents[1]
    steps = {}
    for processes in (1, 2):
        out = tmp_path / f"step-{processes}.pt"
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc_per_node={processes}", str(checkout / "tests" / "ddp_update.py"),
             str(tmp_path / "model"), str(out)],
            capture_output=True, text=True, timeout=300, cwd=checkout,
            env=dict(os.environ, PYTHONPATH=str(checkout), OMP_NUM_THREADS="1"),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        steps[processes] = torch.load(out)
    one, two = steps[1], steps[2]
    assert (one["world"], two["world"]) == (1, 2)
    assert one["loss"] == pytest.approx(two["loss"], abs=1e-6)
    assert one["grad_norm"] == pytest.approx(two["grad_norm"], rel=1e-5)
    assert len(one["weights"]) == 2 * 2 * 2  # A and B of q_proj and v_proj in 2 layers
    for before, a, b in zip(one["before"], one["weights"], two["weights"], strict=True):
        assert (a - before).abs().max() > 1e-4  # the step moved every weight matrix
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
