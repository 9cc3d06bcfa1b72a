"""Episodes as the page sees them: run in a thread, watched a few times a second.

`run_live(runs, policy, db_path)` starts one thread per team (an A/B comparison is two), each
playing it (`learner.episode.play`: run, checked, scored and recorded) with an `on_event` that
puts the events on one queue; the generator drains the queue into a `LiveEpisode` per team and
yields the list whenever something changed, at most every `interval` seconds. A coding task's
tests run in the sandbox each turn, and the same thread scores the episode, so the page stays
responsive. The store records the episode as it runs: a page closed mid-episode loses nothing,
the thread finishes and the episode is there in the history.

A class (a `ClassRun`: the class team of agents/kinds/class_team.py) plays the same way with its
own view, `LiveClass`: a pane per agent with the methods dealt to it, each begun with the
skeleton's head of it (the environment's, not counted as the agent's tokens); the class is judged
per test class, then scored by the one class reward and recorded (learner/class_train.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import store
from agents.judge.testrun import TestReport
from agents.kinds.class_team import (
    ClassEpisode,
    check_class_team,
    class_adapters,
    class_reward,
    run_class_episode,
    team_size,
)
from agents.kinds.classes import ClassProblem, deal
from agents.serving.policy import PolicyError
from agents.tasks import TaskError
from agents.team.graph import Policy, TeamSettings
from agents.team.result import EpisodeResult
from agents.team.roles import Role, token_share
from learner.episode import EpisodeSetup, ScoringError, play

log = logging.getLogger(__name__)


# One vocabulary for an episode on the live page and in History: its state as stored (was it run
# to the end and recorded), and whether the team's result passed the environment's check (the
# tests; a writing team's length and structure checks).
EPISODE_STATES = {"ok": "finished", "failed": "failed", "running": "running"}
# what "passed" means for each kind of work: the environment's verdict on the final result
PASSED_MEANS = {
    "coding": "every test passed",
    "class": "every test class passed (each of its tests)",
    "writing": "every section written, within its length, not cut off and not repeating another",
}


def verdict_words(status: str, passed: bool | None) -> str:
    """An episode's state and verdict, in the words the page, History and the CLI share:
    "finished, passed", "finished, not passed", "finished" (not judged), "failed", "running"."""
    state = EPISODE_STATES.get(status, status)
    if status != "ok" or passed is None:
        return state
    return f"{state}, {'passed' if passed else 'not passed'}"


@dataclass
class Pane:
    """One agent's live view: what it is writing now and what it has cost so far."""

    role: Role
    adapter: str | None
    text: str = ""
    call: str = ""  # e.g. "turn 2" or "turn 1, revision"
    writing: bool = False
    done_tokens: int = 0  # completion tokens of its finished calls
    live_tokens: int = 0  # streamed pieces of the call in progress
    feedback: str = ""  # the environment's last note to it
    cut_off: bool = False  # its last call stopped at the token limit

    @property
    def tokens(self) -> int:
        return self.done_tokens + self.live_tokens

    @property
    def title(self) -> str:
        return self.role.title


class LiveView:
    """What the page reads of any episode as it runs (`LiveEpisode`, `LiveClass`): its tokens so
    far, its seconds, its latest verdict."""

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.panes)

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    @property
    def success(self) -> bool | None:
        return self.verdicts[-1]["success"] if self.verdicts else None

    def ended_by(self, event: dict) -> bool:
        """Fold the events every kind of episode ends with (`failed`, then `closed`); False for
        any other."""
        if event["event"] == "failed":
            self.error = event["error"]
        elif event["event"] == "closed":
            self.finished = True
        else:
            return False
        self.ended = self.ended or time.monotonic()
        return True

    def status_head(self, unnamed: str) -> tuple[str, bool]:
        """The status line's head and whether the team is done: the whole line while it runs
        or after it failed; once done, the verdict in words, who, the turns and the cost."""
        who = f"episode {self.episode_id}" if self.episode_id else unnamed
        team = f"{self.run.team.shape}, {len(self.panes)} agent{'s' * (len(self.panes) > 1)}"
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        cost = f"{self.seconds:.1f} s · {self.tokens} tokens ({rate:.0f} tok/s)"
        if self.error:
            return f"✗ {who} failed after {cost}: {self.error}", False
        if self.result is None:
            turn = f"turn {self.turn + 1} of {self.run.team.turns}"
            return f"Running: {who} ({team}) · {turn} · {cost}", False
        mark = "✓" if self.result.success else "⚠"
        turns = f"{self.result.turns} turn{'s' * (self.result.turns > 1)}"
        verdict = verdict_words("ok", self.result.success)
        return f"{mark} {verdict}: {who} ({team}) · {turns} · {cost}", True


@dataclass
class LiveEpisode(LiveView):
    """A team's episode as far as it has got. `finished` once the thread is done with it."""

    run: EpisodeSetup
    panes: list[Pane]
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    episode_id: int | None = None
    turn: int = 0  # turns completed
    output: str = ""  # the combined result of the latest turn
    verdicts: list[dict] = field(default_factory=list)  # turn_end events
    result: EpisodeResult | None = None
    reward: float | None = None
    components: dict = field(default_factory=dict)  # the reward's parts, and its weights
    weights: dict = field(default_factory=dict)
    tests: TestReport | None = None
    repeats: float | None = None  # long-form: share of the writers' sentences left out as repeats
    error: str | None = None  # the episode failed: why
    note: str | None = None  # the episode is fine but something after it was not (scoring)
    finished: bool = False

    @classmethod
    def start(cls, run: EpisodeSetup) -> LiveEpisode:
        panes = zip(run.roles(), run.adapter_names(), strict=True)
        return cls(run, [Pane(role, adapter) for role, adapter in panes])

    @property
    def kind(self) -> str:
        return self.run.task.kind

    def apply(self, event: dict) -> None:
        """Fold one event from `run_episode` (or from the scoring after it) into the view."""
        if self.ended_by(event):
            return
        kind = event["event"]
        pane = self.panes[event["agent"]] if "agent" in event else None
        if kind == "episode_start":
            self.episode_id = event["episode_id"]
        elif kind == "agent_start":
            pane.text, pane.live_tokens, pane.writing, pane.cut_off = "", 0, True, False
            pane.call = f"turn {event['turn'] + 1}" + (", revision" if event["round"] else "")
        elif kind == "token":
            pane.text += event["text"]
            pane.live_tokens += 1
        elif kind == "agent_done":
            pane.text, pane.writing = event["text"], False
            pane.cut_off = event.get("finish_reason") == "length"
            pane.done_tokens += event["completion_tokens"]
            pane.live_tokens = 0
        elif kind == "turn_end":
            self.verdicts.append(event)
            self.output = event["output"]
            self.turn = event["turn"] + 1
            for pane, note in zip(self.panes, event["feedback"], strict=False):
                pane.feedback = "" if event["done"] else note
        elif kind == "episode_end":
            self.result = event["result"]
            self.output = self.result.output
            self.ended = time.monotonic()
        elif kind == "scored":
            self.reward, self.tests, self.note = event["reward"], event["tests"], event["note"]
            self.repeats = event["repeats"]
            self.components, self.weights = event["components"], event["weights"]

    def cut_notes(self) -> list[str]:
        """Who stopped at a token cap: the run's (a person can raise it) or, for a long-form
        writer, its own share (the upper end of its words: it ran past its target, often a loop)."""
        cap = self.run.team.sampling.max_tokens
        shares = [token_share(pane.role) for pane in self.panes]
        at_cap = [i for i, p in enumerate(self.panes) if p.cut_off and (shares[i] or cap) >= cap]
        at_share = [i for i, p in enumerate(self.panes) if p.cut_off and i not in at_cap]
        notes = []
        if at_cap:
            notes.append(
                f"{_agents(at_cap)} stopped at the token limit ({cap}): "
                "raise “Tokens per agent call”"
            )
        if at_share:
            sizes = ", ".join(str(shares[i]) for i in at_share)
            notes.append(
                f"{_agents(at_share)} ran past {'their' if len(at_share) > 1 else 'its'} word "
                f"target and stopped at {'their shares' if len(at_share) > 1 else 'its share'} "
                f"({sizes} tokens)"
            )
        return notes

    def status(self) -> str:
        """One line for the page: where the episode is, its time and tokens."""
        head, done = self.status_head("starting")
        if not done:
            return head
        parts = [head]
        if self.tests is not None:
            parts.append(f"tests {self.tests.passed}/{self.tests.total} passed")
        if self.reward is not None:
            parts.append(f"reward {self.reward:.2f}")
        elif not self.finished:
            parts.append("scoring…")
        if self.repeats:
            parts.append(f"{self.repeats:.0%} of the writers' sentences left out as repeats")
        parts += self.cut_notes()
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def _agents(indices: list[int]) -> str:
    return f"agent{'s' * (len(indices) > 1)} {', '.join(str(i + 1) for i in indices)}"


# -- class episodes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassRun:
    """A class team as the form describes it: the class and the team (agents/team/graph.py
    `TeamSettings`: shape, how many agents, turns, adapters, sampling), as `EpisodeSetup` is for
    one function or a document."""

    problem: ClassProblem
    team: TeamSettings

    def check(self) -> ClassRun:
        """The run as it will be played, its team no larger than the class's methods; raises
        with what to change."""
        check_class_team(self.team.shape, self.team.turns)
        size = team_size(self.problem, self.team.shape, self.team.agents)
        return replace(self, team=replace(self.team, agents=size))

    @property
    def dealt(self) -> list[list[str]]:
        return deal(self.problem, self.team.agents)

    def adapter_names(self) -> list[str | None]:
        return class_adapters(self.team, self.team.agents)


@dataclass
class ClassPane:
    """One agent of a class team: the methods dealt to it, what it has written so far (each
    method begun with the skeleton's head of it, which is the environment's, not the agent's)."""

    methods: list[str]
    adapter: str | None
    text: str = ""
    writing: bool = False
    tokens: int = 0  # the agent's own tokens (the heads are not counted)
    feedback: str = ""
    turn: int = 0

    @property
    def title(self) -> str:
        return f"writes {', '.join(self.methods)}"


@dataclass
class LiveClass(LiveView):
    """A class team's episode as far as it has got (the page's view, as `LiveEpisode` for one
    function or a document)."""

    run: ClassRun
    panes: list[ClassPane]
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    episode_id: int | None = None
    turn: int = 0
    output: str = ""
    verdicts: list[dict] = field(default_factory=list)
    result: ClassEpisode | None = None
    reward: float | None = None
    components: dict = field(default_factory=dict)  # the reward's parts, and its weights
    weights: dict = field(default_factory=dict)
    error: str | None = None
    note: str | None = None
    finished: bool = False

    kind = "class"

    @classmethod
    def start(cls, run: ClassRun) -> LiveClass:
        panes = zip(run.dealt, run.adapter_names(), strict=True)
        return cls(run, [ClassPane(methods, adapter) for methods, adapter in panes])

    def apply(self, event: dict) -> None:
        """Fold one event of `run_class_episode` (or of the scoring after it) into the view."""
        if self.ended_by(event):
            return
        kind = event["event"]
        pane = self.panes[event["agent"]] if "agent" in event else None
        if kind == "agent_start":
            if event["turn"] > pane.turn:  # a later turn: its methods written again, below
                pane.text += f"\n# ── turn {event['turn'] + 1}\n"
                pane.turn = event["turn"]
            pane.text += ("\n" if pane.text else "") + event["opening"]
            pane.writing = True
        elif kind == "token":
            pane.text += event["text"]
            pane.tokens += 1
        elif kind == "turn_end":
            self.turn = event["turn"] + 1
            notes = [
                f"its {', '.join(failing)} failed their tests: it writes them again"
                if failing and not event["done"] else ""
                for failing in event["failing"]
            ]  # fmt: skip
            self.verdicts.append({**event, "feedback": notes})
            for pane, note in zip(self.panes, notes, strict=False):
                pane.writing, pane.feedback = False, note
        elif kind == "episode_end":
            self.result = event["episode"]
            self.output = self.result.output
            self.ended = time.monotonic()
            for pane, tokens in zip(self.panes, self.result.agent_tokens, strict=True):
                pane.tokens, pane.writing = tokens, False
        elif kind == "scored":
            self.reward, self.episode_id = event["reward"], event["episode_id"]
            self.components, self.weights = event["components"], event["weights"]

    def status(self) -> str:
        """One line for the page: where the episode is; at the end, the verdict in the words
        of every other episode ("passed": every test class of the class passed), the critical
        path and the reward."""
        head, done = self.status_head("class episode")
        if not done:
            return head
        verdict = self.result.verdict
        parts = [
            head,
            f"test classes {verdict.classes_passed}/{len(verdict.test_classes)} passed",
            f"critical path {self.result.critical_path_tokens} tokens",
        ]
        if self.reward is not None:
            parts.append(f"reward {self.reward:.2f}")
        elif not self.finished:
            parts.append("scoring…")
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def play_class_live(run: ClassRun, policy: Policy, db_path, put) -> None:
    """A class episode for the page: played with its events on the queue, then scored by the
    one class reward and recorded (learner/class_train.py)."""
    from learner.class_train import (
        CLASS_WEIGHTS,
        class_weights_used,
        record_class_episode,
        reward_parts,
    )

    sampling = run.team.sampling
    episode = run_class_episode(run.problem, policy, run.team, on_event=put)
    put({"event": "episode_end", "episode": episode})
    scored = class_reward(episode, CLASS_WEIGHTS)
    episode_id = record_class_episode(
        db_path, episode, scored, run.adapter_names(), None, 0, sampling
    )
    put(
        {
            "event": "scored", "reward": scored["reward"], "episode_id": episode_id,
            "components": reward_parts(scored), "weights": class_weights_used(scored),
        }
    )  # fmt: skip


def start_view(run: EpisodeSetup | ClassRun) -> LiveEpisode | LiveClass:
    return LiveClass.start(run) if isinstance(run, ClassRun) else LiveEpisode.start(run)


def run_live(
    runs: list[EpisodeSetup],
    policy: Policy,
    db_path: str | Path | None = None,
    interval: float = 0.25,
) -> Iterator[list[LiveEpisode]]:
    """Run each team's episode in its own thread (all at once, so the server batches them) and
    yield their views as they change, at most every `interval` seconds, and once at the end."""
    episodes = [start_view(run) for run in runs]  # bad settings raise here, in the caller
    events: queue.Queue = queue.Queue()
    for index, run in enumerate(runs):
        threading.Thread(
            target=_run_one,
            args=(index, run, policy, db_path, events),
            name=f"episode-{index}",
            daemon=True,
        ).start()
    open_threads, last_yield, changed = len(runs), 0.0, True
    while open_threads:
        try:
            index, event = events.get(timeout=interval)
            episodes[index].apply(event)
            open_threads -= event["event"] == "closed"
            changed = True
        except queue.Empty:
            changed = changed or any(e.result is None for e in episodes)  # the clock moves
        if changed and time.monotonic() - last_yield >= interval:
            yield episodes
            last_yield, changed = time.monotonic(), False
    yield episodes


def _run_one(
    index: int, run: EpisodeSetup, policy: Policy, db_path: str | Path | None, events: queue.Queue
) -> None:
    """The thread of one team: the episode, then its scoring; every outcome is an event."""

    def put(event: dict) -> None:
        events.put((index, event))

    try:
        if isinstance(run, ClassRun):
            play_class_live(run, policy, db_path, put)
            return
        # a coding task's tests run in the sandbox each turn; the score is recorded beside it
        [played] = play(run, policy, db=db_path, on_event=put)
        scored = played.scored
        put(
            {
                "event": "scored",
                "reward": scored.reward,
                "components": scored.components,
                "weights": scored.weights,
                "tests": scored.report,
                "note": None,
                "repeats": scored.components.get("repeats_dropped"),
            }
        )
    except ScoringError as e:  # a note: the episode itself is saved and fine
        log.exception("scoring episode of team %d failed", index)
        report = e.results[0].test_report
        note = f"reward not computed ({e})"
        put(
            {
                "event": "scored", "reward": None, "components": {}, "weights": {},
                "tests": report, "note": note, "repeats": None,
            }
        )  # fmt: skip
    except Exception as e:  # the page shows it; the store has already marked the episode failed
        log.exception("episode of team %d failed", index)
        put({"event": "failed", "error": describe_error(e)})
    finally:
        put({"event": "closed"})


def describe_error(error: Exception) -> str:
    """A sentence a person can act on, for the errors an episode meets."""
    if isinstance(error, PolicyError):
        return f"the model server failed ({error}). Check that it is running and try again"
    if isinstance(error, TaskError | ValueError | store.StoreError):
        return str(error)
    return f"{type(error).__name__}: {error}"
