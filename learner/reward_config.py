"""The one configuration of the reward: every weight (`RewardWeights`) and a single agent's
token budget for the speed term (`SpeedBudget`); the reward functions and `score_episode` take
them."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RewardWeights:
    """Every weight of the reward.

    Joint reward: R = quality·q + coordination·c + speed·s·quality − role_violation·v, where v is
    the share of agents that wrote another agent's part. `human` weighs what people prefer
    (`blend_human`: R + human·(h − the mean h of the samples of its group that the environment
    scored alike: the tests, or the writing's verdict), less where that would reorder samples it
    scored otherwise): 0.8, so inside a set of samples the tests scored alike the preference
    outweighs what a comment or a docstring costs in speed, while it moves no advantage between
    outcomes (when it was a share of R itself, (1 − human)·R + human·h, it outvoted the tests:
    pass@1 −17 to −24 points in retrains, docs/runs/training-log.md); an added term, so it may exceed 1
    (2.0 taught a writing taste no more than 0.8: the cap binds the push in more groups,
    docs/runs/training-log.md, "The writing verdict as the outcome"). Coin-flip votes must not move the
    team, so the weight grows with the evidence: the preference model's cross-validated skill
    (`learner.preference.cross_validate`: 0 chance, 1 every held-out vote predicted) times
    human / `human_full_skill`, capped at `human` (`PreferenceModel.blend_weight`). 0.1: coin
    flips on 50 co-written summaries fit a median of 0.004 and at most 0.061 in 20 vote sets
    (docs/runs/training-log.md, "Coin flips at 50 votes"), while a writing taste of which 50 A/B votes
    carry 13-16 fits 0.06-0.19; at 0.25 such a taste got a quarter to three quarters of the
    weight and taught the team +0.4 to +16 points, at full weight +25 (docs/runs/training-log.md, "Full
    weight from a skill of 0.1").
    Coding points (the MAGRPO authors' levels): `helper_defined`, `entry_defined`, `parses`,
    `tests` (times the fraction of asserts passed); quality = points earned / points possible.
    `cooperation_floor`: the share of its coordination a cooperative answer keeps when no test
    passes (so an all-fail group still ranks a real division of labour above none, while a
    cooperative wrong answer stays below a correct one).
    `verdict`: writing's counterpart of the tests, the share of a writing episode's quality that
    is the environment's verdict (1 when every section is non-empty, inside its bounds, not
    cut off and not repeating another: what `coteam eval` counts as a pass), the rest the
    length and reference scores. Without it a failing summary scored within a few hundredths
    of a passing one (median +0.045 in R over 15 groups of a retrain, and below it in 2), so
    the reward hardly paid for the pass, and the preference, which may move a sample only half
    its distance to a sample of the other verdict, could hardly move (docs/runs/training-log.md, "The
    verdict in the writing reward").
    """

    quality: float = 0.6
    coordination: float = 0.3
    speed: float = 0.1
    role_violation: float = 0.3
    human: float = 0.8
    human_full_skill: float = 0.1
    helper_defined: float = 0.4
    entry_defined: float = 0.6
    parses: float = 0.5
    tests: float = 1.0
    cooperation_floor: float = 0.25
    verdict: float = 1 / 3

    def __post_init__(self):
        if min(asdict(self).values()) < 0 or max(self.cooperation_floor, self.verdict) > 1:
            raise ValueError("weights must be >= 0; the cooperation floor and verdict <= 1")
        if not 0 < self.human_full_skill <= 1:
            raise ValueError("human_full_skill must be in (0, 1]")


@dataclass(frozen=True)
class SpeedBudget:
    """A single agent's output-token budget for the task; None: the episode's own (its per-call
    token limit times its turn limit, as `EpisodeResult.token_budget` records it)."""

    tokens: int | None = None
