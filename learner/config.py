"""The configs of training and evaluation: a run's (`TrainArgs`), the update's (`MAGRPOConfig`),
the promotion gate's (`GateSettings`) and an evaluation's (`EvalConfig`), each field with its
default and, where it is one, the command-line flag it is, its help beside it (`coteam train`,
`coteam learner` and `coteam eval` make their flags from these: learner/flags.py). Nothing here
loads a model, so the CLI reads them at once."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from agents.serving.policy import LORA_MODULES
from agents.tasks import TaskError, TaskSet, fold_label
from agents.team.roles import DEFAULT_MAX_TOKENS, MAX_TURNS, SHAPES, size_from_setting
from learner.flags import flag
from learner.reward_config import RewardWeights, SpeedBudget
from store import parse_adapter_name

if TYPE_CHECKING:
    from agents.team.graph import Sampling

JOINT_MODES = ("aligned", "cross")
UPDATE_DTYPES = ("auto", "float32", "bfloat16")
FOLD_HELP = (
    "split HumanEval by fold F/K instead of the fixed split: the problems whose number mod K is "
    "F-1 held out (1/2: 0, 2, 4, ...), every third of the rest the gate's, the others trained on"
)
# what a run trains on: a curated task set (agents/tasks.py), or "class": the ClassEval classes'
# train split (agents/kinds/classes.py), the class team (learner/class_train.py)
TrainSet = Literal["coding", "summary", "expansion", "longform", "class"]
MAX_CROSS_JOINT = 64  # joint actions a crossed group may score (G = 4: 2 or 3 agents; G = 8: 2)
CROSS_WORKERS = 4  # recombined joint actions judged at once (each program's tests: a subprocess)


@dataclass
class MAGRPOConfig:
    """Every knob of a MAGRPO run, with its default."""

    # G joint samples per task (>= 2: the advantage needs a group)
    group_size: int = field(default=4, metadata=flag("G joint samples per task"))
    tasks_per_step: int = field(default=2, metadata=flag("tasks per step"))
    # LoRA; the authors' full fine-tuning used 2e-5 (code)
    learning_rate: float = field(default=1e-4, metadata=flag("LoRA learning rate", "lr"))
    lora_rank: int = 8  # must equal the server's --max-lora-rank
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_MODULES  # the modules the server applies LoRA to
    temperature: float = 0.8
    top_p: float = 0.95
    max_new_tokens: int = field(default=192, metadata=flag("new tokens per agent", "max-tokens"))
    # Dr. GRPO: no std scaling
    scale_advantages_by_std: bool = field(
        default=False, metadata=flag("divide advantages by the std", "std-scale")
    )
    # e.g. 0.2 for PPO-style clipping; None: plain policy gradient
    clip_eps: float | None = field(
        default=None, metadata=flag("PPO-style ratio clip, e.g. 0.2", shown="none")
    )
    kl_coef: float = field(default=0.0, metadata=flag("KL penalty to the base model"))
    max_grad_norm: float = 1.0
    micro_batch: int = 2  # samples of different prompts per forward/backward; bounds memory
    gamma: float = field(
        default=0.9,
        metadata=flag("several turns: a call's return is gamma^(turns after it) x R"),
    )
    # "aligned": sample g of every agent forms joint action g; "cross": every sample of each agent
    # with every sample of the others (G^agents joint rewards, at most MAX_CROSS_JOINT; one turn)
    joint_mode: str = field(
        default="aligned",
        metadata=flag(
            "aligned: sample g of every agent is joint action g; cross: every agent's samples "
            "with every teammate's (G^agents joint rewards, one turn), each sample's return the "
            "mean over the joint actions it is part of",
            choices=("aligned", "cross"),
        ),
    )
    seed: int = field(default=0, metadata=flag("the run's seed (task order, LoRA init)"))
    # the base model's weights in the update; the LoRA weights and Adam's state stay float32
    dtype: str = field(
        default="auto",
        metadata=flag(
            "the base model's weights in the update: auto is bfloat16 on a GPU or on a CPU that "
            "computes in bf16 natively (AVX512-BF16 or AMX), float32 on other CPUs (bf16 is slow "
            "there); the LoRA weights stay float32",
            choices=UPDATE_DTYPES,
        ),
    )

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class GateSettings:
    """How the gate decides."""

    # validation tasks (the first N of the split)
    tasks: int = field(
        default=32, metadata=flag("validation tasks the gate scores on", "gate-tasks")
    )
    # the candidate's mean joint reward must beat the serving one's by more than this; a
    # negative value is a tolerance (the reward may be that much lower, no significance asked):
    # for trying the loop end to end, never for deciding
    min_gain: float = field(
        default=0.0,
        metadata=flag(
            "the joint-reward gain a candidate needs (negative: a tolerance, for trials)",
            "gate-min-gain",
        ),
    )
    reward_alpha: float = 0.1  # the reward gain must have one-sided p below this
    # a pass-rate drop with one-sided p below this rejects the candidate
    alpha: float = field(
        default=0.05, metadata=flag("a pass-rate drop with p below this rejects", "gate-alpha")
    )
    # non-inferiority on tests: the candidate's pass rate may be at most this much below the
    # serving team's (3 of 32 validation problems), however its reward compares
    pass_margin: float = 0.1
    # answers per validation task and team: 1 greedy; more sampled as the app samples (T = 0.8)
    samples: int = field(
        default=1,
        metadata=flag("answers per gate task and team (1: greedy; more: sampled)", "gate-samples"),
    )
    max_tokens: int = 256
    concurrency: int = 4  # episodes in flight at once (both teams together)

    def check(self) -> None:
        if self.tasks < 1:
            raise ValueError(f"gate.tasks must be at least 1, not {self.tasks}")
        if not 0 <= self.pass_margin < 1:
            raise ValueError(f"gate.pass_margin must be in [0, 1), not {self.pass_margin}")
        for name in ("alpha", "reward_alpha"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"gate.{name} must be between 0 and 1, not {getattr(self, name)}")
        if min(self.concurrency, self.max_tokens, self.samples) < 1:
            raise ValueError(
                "gate.concurrency, gate.max_tokens and gate.samples must be at least 1"
            )


@dataclass
class TrainArgs:
    """The one config of a training run (CleanRL's `Args` up front): what to train on, the
    update's knobs (`magrpo`), the reward's weights and budgets, and the promotion gate's
    settings. The admin form and `coteam train` start from these defaults; `check()` validates."""

    task: TrainSet = field(default="coding", metadata=flag("the curated task set to train on"))
    steps: int = field(default=10, metadata=flag("MAGRPO steps"))
    agents: int = field(
        default=2,
        metadata=flag(
            "team size (1 on classes: one agent writes every method, GRPO, the team's control)",
            choices=range(1, 5),
        ),
    )
    turns: int = field(
        default=1,
        metadata=flag(
            "turns per episode, with the tests' feedback between them (1-4); every turn's calls "
            "are trained with their discounted return (--gamma)"
        ),
    )
    task_limit: int | None = field(
        default=None, metadata=flag("cycle over the first N training tasks", shown="all")
    )
    fold: str | None = field(default=None, metadata=flag(FOLD_HELP, shown="the fixed split"))
    with_calls: bool = field(
        default=False,
        metadata=flag(
            "classes: train only on the classes whose methods, as dealt to the team, imply a call "
            "to a teammate's method (a curriculum for calls between teammates)",
            "with-calls",
        ),
    )
    incremental: bool = field(
        default=False,
        metadata=flag(
            "classes: each agent sees the methods it wrote before, its own only (the shape "
            "parallel_incremental; one agent: single_incremental), in training and in the gate"
        ),
    )
    start_from: str | None = field(
        default=None,
        metadata=flag(
            "start from these versions instead of the serving ones (any state, e.g. a rejected "
            "candidate to train further): agentK-vN, comma-separated, as `coteam adapters list` "
            "names them; an agent not named starts from its serving version",
            "from",
            shown="the serving versions",
            metavar="VERSIONS",
        ),
    )
    magrpo: MAGRPOConfig = field(default_factory=MAGRPOConfig)
    weights: RewardWeights = field(default_factory=RewardWeights)
    budget: SpeedBudget = field(default_factory=SpeedBudget)
    gate: GateSettings = field(default_factory=GateSettings)
    publish: bool = True  # register the final adapters as candidate versions

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TrainArgs:
        """The config `to_json` wrote (a stored run's), validated."""
        data = dict(data)
        magrpo = dict(data.pop("magrpo", {}))
        if "target_modules" in magrpo:
            magrpo["target_modules"] = tuple(magrpo["target_modules"])
        args = cls(
            **data
            | {
                "magrpo": MAGRPOConfig(**magrpo),
                "weights": RewardWeights(**data.get("weights", {})),
                "budget": SpeedBudget(**data.get("budget", {})),
                "gate": GateSettings(**data.get("gate", {})),
            }
        )
        args.check()
        return args

    def check(self) -> None:
        """Refuse a run the learner cannot do, before any model is loaded; the message says why."""
        c = self.magrpo
        if self.task not in get_args(TrainSet):
            raise ValueError(f"unknown task {self.task!r}: {', '.join(get_args(TrainSet))}")
        if self.steps < 1:
            raise ValueError(f"a run needs at least 1 step, not {self.steps}")
        if not (1 if self.task == "class" else 2) <= self.agents <= 4:
            raise ValueError(
                f"a team has 2 to 4 agents (1 on classes: the single agent), not {self.agents}"
            )
        if c.group_size < 2:
            raise ValueError("MAGRPO needs a group of at least 2 samples per task")
        if not 1 <= self.turns <= MAX_TURNS:
            raise ValueError(f"an episode has 1 to {MAX_TURNS} turns, not {self.turns}")
        if not 0 < c.gamma <= 1:
            raise ValueError(f"the discount gamma must be in (0, 1], not {c.gamma}")
        if c.tasks_per_step < 1 or c.micro_batch < 1 or c.max_new_tokens < 1:
            raise ValueError("tasks_per_step, micro_batch and max_new_tokens must be at least 1")
        if not c.learning_rate > 0:
            raise ValueError(f"the learning rate must be positive, not {c.learning_rate}")
        if c.joint_mode not in JOINT_MODES:
            raise ValueError(f"unknown joint mode {c.joint_mode!r}: {' or '.join(JOINT_MODES)}")
        if c.joint_mode == "cross" and self.turns != 1:
            raise ValueError(
                "cross pairing trains one-turn episodes: a second turn's observations depend on "
                "the first turn's joint output, which crossing changes (use --turns 1 or aligned)"
            )
        if c.joint_mode == "cross" and c.group_size**self.agents > MAX_CROSS_JOINT:
            raise ValueError(
                f"cross pairing scores G^agents = {c.group_size}^{self.agents} = "
                f"{c.group_size**self.agents} joint actions a task, more than {MAX_CROSS_JOINT}: "
                "use fewer agents, a smaller group, or aligned"
            )
        if self.with_calls and (self.task != "class" or self.agents < 2):
            raise ValueError(
                "--with-calls picks classes by the calls between teammates: a class team of 2 "
                "to 4 agents only (--task class --agents 2)"
            )
        if self.incremental and self.task != "class":
            raise ValueError("--incremental is a class team's view: --task class only")
        if self.task_limit is not None and self.task_limit < 1:
            raise ValueError(f"task_limit must be at least 1, not {self.task_limit}")
        self.fold = checked_fold(self.fold, self.task)
        self.start_versions()
        self.gate.check()

    def start_versions(self) -> dict[int, int]:
        """{agent: version} of `start_from` ({} without it); refused unless each name is a
        version's name (`agentK-vN`) of an agent of the team, one per agent (whether that version
        exists, the run asks the store: `learner.registry.start_versions`)."""
        versions: dict[int, int] = {}
        for name in filter(None, (n.strip() for n in (self.start_from or "").split(","))):
            parsed = parse_adapter_name(name)
            if parsed is None:
                raise ValueError(f"--from: {name!r} is not a version's name (agentK-vN)")
            agent, version = parsed
            if agent in versions:
                raise ValueError(f"--from names agent {agent + 1} twice")
            if agent >= self.agents:
                raise ValueError(
                    f"--from: {name} is agent {agent + 1}'s, of a team of {self.agents}"
                )
            versions[agent] = version
        return versions


def checked_fold(fold: str | None, task_set: str) -> str | None:
    """A run's fold as it is recorded ("1/2"), or None; refused unless valid and on coding or
    classes."""
    try:
        label = fold_label(fold)
    except TaskError as e:
        raise ValueError(f"--fold: {e}") from e
    if label and task_set not in ("coding", "class"):
        raise ValueError(
            f"--fold splits HumanEval and the classes only; the {task_set} set has a fixed split"
        )
    return label


# -- evaluation --------------------------------------------------------------------------------

SPLITS = {"heldout": "held_out", "held_out": "held_out", "train": "train", "all": "all"}
# the evaluation's names for the writing sets -> the task sets of agents/tasks.py (splits there)
WRITING_SETS: dict[str, TaskSet] = {
    "xsum": "summary",
    "abstracts": "expansion",
    "longform": "longform",
}
BASE_VARIANT = "base"


def shape_list(text: str) -> tuple[str, ...]:
    """`--shapes`: comma-separated shape names."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


class EvalError(ValueError):
    """The evaluation cannot run as asked; the message says what to change."""


def checked_temperature(samples: int, temperature: float) -> float:
    """The temperature an evaluation's K > 1 samples are drawn at (above 0, at most 2; an
    EvalError otherwise); one answer per task is greedy: 0."""
    if samples > 1 and not 0.0 < temperature <= 2.0:
        raise EvalError(
            f"--temperature samples K > 1 answers: above 0, at most 2, not {temperature}"
        )
    return temperature if samples > 1 else 0.0


@dataclass
class EvalConfig:
    """Every knob of an evaluation run, with its default."""

    task: str = field(
        default="coding",
        metadata=flag(
            "kind of task (class: ClassEval classes, agents/kinds/classes.py)",
            choices=("coding", "writing", "class"),
            required=True,
        ),
    )
    split: str = field(
        default="heldout",
        metadata=flag(
            "HumanEval 0-31 held out, 32-131 train (132-163 are the gate's validation problems; "
            "or --fold's); "
            "writing: items 0-29 held out, 30-61 validation, the rest train; longform: every "
            "fourth held out",
            choices=("heldout", "train", "all"),
        ),
    )
    writing_set: str = field(
        default="xsum",
        metadata=flag(
            "writing tasks: XSum summaries, abstracts from titles, or long-form 4-section articles",
            choices=tuple(WRITING_SETS),
        ),
    )
    limit: int | None = field(
        default=None, metadata=flag("only the first M tasks of the split", shown="all")
    )
    fold: str | None = field(default=None, metadata=flag(FOLD_HELP, shown="the fixed split"))
    shapes: tuple[str, ...] = field(
        default=SHAPES,
        metadata=flag("comma-separated team shapes", parse=shape_list, shown=",".join(SHAPES)),
    )
    agents: int = field(
        default=2, metadata=flag("team size of every shape but single", choices=range(2, 5))
    )
    samples: int = field(
        default=1,
        metadata=flag("K samples per task: 1 is greedy, more sample at T=0.8, top_p=0.95"),
    )
    turns: int = field(default=1, metadata=flag("turn limit"))
    variants: dict[str, tuple[str | None, ...]] = field(
        default_factory=lambda: {BASE_VARIANT: ()}
    )  # name -> adapter of agent 0, 1, ... (missing or None: the base model); `--adapters`
    max_tokens: int = field(default=DEFAULT_MAX_TOKENS, metadata=flag("tokens per agent call"))
    temperature: float = field(
        default=0.8,
        metadata=flag(
            "sampling temperature for K > 1 (0.8: the reference baselines'; Co-code samples code "
            "at 0.2 by default)"
        ),
    )
    top_p: float = 0.95
    repetition_penalty: float = field(
        default=1.0,
        metadata=flag(
            "vLLM's repetition penalty, 1 (none) to 2; the model card suggests 1.1 "
            "(greedy and sampled decoding alike)"
        ),
    )
    # per-request seeds for K > 1 (None: unseeded). On vLLM-CPU, CoTeam's vLLM plugin keeps a
    # seeded request whose prefill is chunked from stopping the engine (tests/test_serving.py).
    seed: int | None = field(
        default=None,
        metadata=flag(
            "per-request sampling seeds for K > 1; on a CPU a seeded answer is the same again "
            "for the same batches, not across loads",
            shown="none",
        ),
    )
    concurrency: int = field(
        default=1,
        metadata=flag(
            "how many model requests are kept in flight, counting a group of a team whose agents "
            "work side by side as one request per agent: 4 runs four groups of single or two of "
            "a team of 2, so every shape is timed under the same load (1: one group at a time, "
            "each episode's time measured alone; more batches more but slows each one)"
        ),
    )
    ks: tuple[int, ...] = (1, 3, 5, 10)

    def __post_init__(self):
        self.shapes = tuple(self.shapes)
        self.variants = {k: tuple(v) for k, v in self.variants.items()}
        if self.task not in ("coding", "writing"):
            raise EvalError(f"unknown task kind {self.task!r}: coding or writing")
        if self.split not in SPLITS:
            raise EvalError(f"unknown split {self.split!r}: heldout, train or all")
        if self.writing_set not in WRITING_SETS:
            raise EvalError(f"unknown writing set {self.writing_set!r}: {', '.join(WRITING_SETS)}")
        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown or not self.shapes:
            raise EvalError(f"unknown shapes {unknown}: choose from {', '.join(SHAPES)}")
        if not 2 <= self.agents <= 4:
            raise EvalError(f"a team has 2 to 4 agents, not {self.agents}")
        if self.samples < 1 or self.turns < 1 or self.concurrency < 1:
            raise EvalError("samples, turns and concurrency are at least 1")
        if not self.variants:
            raise EvalError("give at least one variant")
        checked_temperature(self.samples, self.temperature)
        if not 1.0 <= self.repetition_penalty <= 2.0:
            raise EvalError(f"--repetition-penalty is 1 (none) to 2, not {self.repetition_penalty}")
        if self.limit is not None and self.limit < 1:
            raise EvalError(f"--limit must be at least 1, not {self.limit}")
        try:
            self.fold = checked_fold(self.fold, self.task)
        except ValueError as e:
            raise EvalError(str(e)) from e

    @property
    def sampling(self) -> Sampling:
        """Greedy for one sample per task; the baselines' sampling for more."""
        from agents.team.graph import judged_sampling

        return judged_sampling(
            self.samples,
            self.max_tokens,
            self.seed,
            self.temperature,
            self.top_p,
            self.repetition_penalty,
        )

    def episode_settings(self) -> dict:
        """What an episode's meaning depends on: a folder's episodes must all share it."""
        keys = ("task", "split", "writing_set", "agents", "samples", "turns", "max_tokens")
        if self.samples > 1:  # greedy decoding ignores them
            keys += ("temperature", "top_p", "seed")
        if self.repetition_penalty != 1.0:  # folders from before the option have none
            keys += ("repetition_penalty",)
        if self.fold:  # nor from before folds
            keys += ("fold",)
        return {k: getattr(self, k) for k in keys}

    def episode_count(self, tasks: int) -> int:
        """The episodes a whole run over `tasks` tasks holds: each variant, shape and sample."""
        return tasks * len(self.variants) * len(self.shapes) * self.samples

    def team_size(self, shape: str) -> int:
        return size_from_setting(shape, self.agents)
