"""The web app's event functions without a browser or a server: a scripted policy stands in for
vLLM, a real SQLite file in a temp folder is the store. (tests/test_browser.py drives the same
page in Chromium against the real server.)"""

import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

import store
from agents.serving.policy import PolicyError
from agents.tasks import MAX_PROMPT_CHARS, TaskError, longform_tasks
from agents.team.graph import Sampling, TeamSettings
from app import rating
from app.admin import AdminTab
from app.admin_training import learner_status
from app.context import AppContext, admin_password_from
from app.cowork import CoworkTab
from app.cowork_choices import AB, ONE_TEAM, adapter_choices, chosen_task, role_layout
from app.cowork_results import display_code
from app.history import HistoryTab, episode_filters, episode_markdown, fenced
from app.live import run_live
from app.web import build_app
from learner.episode import EpisodeSetup
from learner.worker import LearnerWorker
from tests.scripted import ScriptedPolicy

# what the helper and the entry author write after the function heads that begin their replies
HELPER = "    s = sorted(numbers)\n    return any(b - a < threshold for a, b in zip(s, s[1:]))\n```"
ENTRY = (
    "    return aux(numbers, threshold) if len(numbers) > 1 else False  # with fewer than two"
    " numbers there is no pair\n```"
)
SOLO = (
    "```python\ndef has_close_elements(numbers, threshold):\n    s = sorted(numbers)\n"
    "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n```"
)


def reply(request) -> str:
    system = request.messages[0]["content"]
    last = request.messages[-1]
    begun = last["content"] if last["role"] == "assistant" else ""
    if "helper function `aux`" in system:
        return HELPER
    if "Python" in system:
        if "main-function author" in system:  # after its function's head: it calls `aux`
            return ENTRY
        return HELPER if begun else SOLO  # one agent, after the problem as posed: the body
    return " ".join(f"w{k}" for k in range(45)) + "."


class FakeClient(ScriptedPolicy):
    """The scripted policy with the bits of PolicyClient the app calls besides generate()."""

    def __init__(self, respond=reply, up=True):
        super().__init__(respond)
        self.base_url, self.up, self.loaded, self.out = "http://fake", up, {}, {}

    def healthy(self):
        return self.up

    def taken_out(self):
        return self.out

    def list_adapters(self):
        return list(self.loaded)

    def models(self):
        return [{"id": name, "root": path} for name, path in self.loaded.items()]

    def load_adapter(self, name, path):
        self.loaded[name] = path

    def serves(self, name, path):
        return self.loaded.get(name) == path


@pytest.fixture
def ctx(tmp_path):
    return AppContext(FakeClient(), db_path=tmp_path / "coteam.db", admin_password="s3cret")


def built(ctx, tab):
    with gr.Blocks():
        tab.build()
    return tab


def form(tab: CoworkTab, **values) -> dict:
    """The run button's inputs as Gradio passes them (component -> value), with defaults."""
    defaults = {
        "source": "humaneval", "problem": "0", "prompt": "", "tests": "", "mode": ONE_TEAM,
        "shape": "parallel", "size": 2, "turns": 1, "max_tokens": 64, "temperature": 0.0,
        "adapters": "serving", "shape_b": "single", "adapters_b": "base",
    }  # fmt: skip
    defaults.update(values)
    data = {getattr(tab, name): value for name, value in defaults.items()}
    data[tab.role_names] = role_layout(tab.kind, defaults["source"], defaults["shape"], 2)
    data.update({box: "" for box in tab.role_texts})
    return data


def last(updates):
    """The page after a generator's last update: each component's latest value."""
    page = {}
    for update in updates:
        page.update(update)
    return page


# -- tasks from the form -----------------------------------------------------------------------


def test_the_form_refuses_an_empty_or_oversized_prompt():
    with pytest.raises(TaskError, match="empty"):
        chosen_task("writing", "free", None, "   ", "")
    with pytest.raises(TaskError, match="limit"):
        chosen_task("writing", "free", None, "x" * (MAX_PROMPT_CHARS + 1), "")
    with pytest.raises(TaskError, match="pick a problem"):
        chosen_task("coding", "humaneval", None, "", "")
    with pytest.raises(TaskError, match="not valid Python"):
        chosen_task("coding", "user", None, "def f(:", "")


def test_the_form_accepts_comments_and_a_bare_signature():
    prompt = "# Rotate a list right by k places.\ndef rotate(items, k):\n"
    task = chosen_task("coding", "user", None, prompt, "assert rotate([1, 2], 1) == [2, 1]")
    assert task.entry_point == "rotate" and task.prompt == prompt


def test_the_same_own_prompt_is_the_same_task():
    one = chosen_task("coding", "user", None, "def f(x):\n    '''Double.'''\n", "assert f(2) == 4")
    two = chosen_task("coding", "user", None, "def f(x):\n    '''Double.'''\n", "assert f(2) == 4")
    other = chosen_task(
        "coding", "user", None, "def f(x):\n    '''Double.'''\n", "assert f(1) == 2"
    )
    assert one.source_id == two.source_id != other.source_id
    assert one.tests.strip() == "assert f(2) == 4" and one.entry_point == "f"
    assert chosen_task("coding", "humaneval", "7", "", "").source_id == "HumanEval/7"


def test_roles_follow_the_task_shape_and_size():
    assert role_layout("coding", "humaneval", "parallel", 3) == ["helper", "helper2", "entry"]
    assert role_layout("writing", "xsum", "parallel", 2) == ["summary", "elaboration"]
    assert role_layout("writing", "free", "single", 3) == ["writer"]
    assert role_layout("coding", "user", "naive_concat", 4) == ["coder"]
    assert display_code("```python\ndef f():\n    pass\n```") == "def f():\n    pass"


# -- live episodes ---------------------------------------------------------------------------


def test_a_live_episode_streams_then_is_scored_and_recorded(ctx):
    task = chosen_task("coding", "humaneval", "0", "", "")
    views = []
    for [episode] in run_live(
        [EpisodeSetup(task, TeamSettings(agents=2))], ctx.client, ctx.db_path, interval=0
    ):
        views.append((episode.panes[0].text, episode.result is not None))
    assert episode.finished and episode.error is None and episode.result.success
    assert episode.tests.passed == episode.tests.total == 7
    assert episode.reward is not None and episode.tokens > 0
    assert any(text and not done for text, done in views), "tokens were shown before the end"
    assert "✓ finished, passed" in episode.status() and "tests 7/7 passed" in episode.status()
    with store.open_db(ctx.db_path) as db:
        saved = store.get_episode(db, episode.episode_id)
    assert saved["status"] == "ok" and saved["reward"] == pytest.approx(episode.reward)
    assert saved["rewards"]["asserts_passed"] == 7


FACTS = [
    "The name goes back to a Greek word for grief.",
    "His mother dipped him in a river to make him immortal.",
    "At Troy he killed Hector outside the city walls.",
    "His friendship with Patroclus is a theme of later poetry.",
]


def test_a_sentence_two_writers_wrote_is_in_the_document_once_and_the_page_says_so(ctx):
    task = longform_tasks("held_out")[0]
    opening = f"{task.extra['title']} was the greatest hero of the Trojan War."
    headings = [section["heading"] for section in task.extra["outline"]]

    def writer(request):  # every writer opens each of its sections with the same sentence
        own = re.findall(r'"## ([^"]+)"', request.messages[1]["content"].split("Now write")[-1])
        text = "\n\n".join(f"## {h}\n{opening} {FACTS[headings.index(h)]}" for h in own)
        return text.removeprefix(f"## {own[0]}\n")

    client = FakeClient(writer)
    *_, [episode] = run_live(
        [EpisodeSetup(task, TeamSettings(agents=4))], client, ctx.db_path, interval=0
    )
    assert episode.error is None and all(fact in episode.output for fact in FACTS)
    assert episode.output.count(opening) == 1
    assert opening in episode.panes[3].text  # the writer's own text keeps it
    assert "38% of the writers' sentences left out as repeats" in episode.status()


def test_an_agent_cut_off_at_the_token_limit_is_named_with_the_fix(ctx):
    task = chosen_task("coding", "humaneval", "0", "", "")
    run = EpisodeSetup(
        task, TeamSettings(agents=2, sampling=Sampling(temperature=0.0, max_tokens=16))
    )
    *_, [episode] = run_live([run], ctx.client, ctx.db_path, interval=0)
    # the helper's reply is 13 pieces long, the entry author's 17: only agent 2 is cut off
    assert [pane.cut_off for pane in episode.panes] == [False, True]
    assert "agent 2 stopped at the token limit (16): raise “Tokens per agent call”" in (
        episode.status()
    )
    *_, [episode] = run_live(
        [EpisodeSetup(task, TeamSettings(agents=2))], ctx.client, ctx.db_path, interval=0
    )
    assert "token limit" not in episode.status()


def test_a_writer_stopped_at_its_share_is_not_sent_to_raise_the_token_limit(ctx):
    """A long-form writer's call is capped at its share (the upper end of its words), below the
    run's limit: one that loops stops there, and the page says so, not "raise the limit"."""
    from agents.kinds import team_roles
    from agents.team.roles import LONGFORM_MAX_TOKENS, token_share

    task = longform_tasks("held_out")[0]

    def writer(request):  # agent 2 runs on; the others write one short line a section
        own = re.findall(r'"## ([^"]+)"', request.messages[1]["content"].split("Now write")[-1])
        if request.agent == 1:
            return " ".join(f"tide{i}" for i in range(2000))  # no loop a stop rule sees
        return "\n\n".join(f"## {h}\nA short part." for h in own).removeprefix(f"## {own[0]}\n")

    run = EpisodeSetup(
        task, TeamSettings(agents=4, sampling=Sampling(max_tokens=LONGFORM_MAX_TOKENS))
    )
    *_, [episode] = run_live([run], FakeClient(writer), ctx.db_path, interval=0)
    share = token_share(team_roles(task, "parallel", 4, None)[1])
    assert [pane.cut_off for pane in episode.panes] == [False, True, False, False]
    assert share < run.team.sampling.max_tokens and episode.panes[1].tokens == share
    assert f"agent 2 ran past its word target and stopped at its share ({share} tokens)" in (
        episode.status()
    )
    assert "token limit" not in episode.status()


def test_a_failing_server_is_shown_and_the_episode_is_kept_as_failed(ctx):
    def broken(request):
        raise PolicyError("connection refused")

    task = chosen_task("coding", "humaneval", "0", "", "")
    *_, [episode] = run_live([EpisodeSetup(task)], FakeClient(broken), ctx.db_path)
    assert episode.finished and "model server failed" in episode.error
    assert episode.status().startswith("✗")
    with store.open_db(ctx.db_path) as db:
        assert store.get_episode(db, episode.episode_id)["status"] == "failed"


# -- the co-work tabs ------------------------------------------------------------------------


def test_running_the_co_code_tab_fills_panes_result_tests_and_rating_panel(ctx):
    tab = built(ctx, CoworkTab(ctx, "coding"))
    view = tab.results
    page = last(tab.run(form(tab)))
    episode_id = page[view.episode_id]
    assert isinstance(episode_id, int)
    assert "def aux" in page[view.panes[0]]["value"] and "```" not in page[view.panes[0]]["value"]
    assert "helper aux" in page[view.panes[0]]["label"]
    assert "def has_close_elements" in page[view.result]
    assert "Tests: 7 of 7 passed" in page[view.tests_view]
    assert page[view.tests_view].count("| ✓ |") == 7  # a row for each test
    assert page[view.rating_panel]["visible"] is True
    assert "episode" in page[view.status] and "tokens" in page[view.status]
    # the reward explained where it is shown: its terms add up to it
    reward = float(re.search(r"reward (\d\.\d\d)", page[view.status]).group(1))
    log = page[view.turn_log]
    assert "Turn 1: ✓ passed** (passed: every test passed)" in log
    terms = re.findall(r"^- ([+−-]\d\.\d\d)", log, flags=re.M)
    assert len(terms) >= 3 and abs(sum(float(t.replace("−", "-")) for t in terms) - reward) < 0.02
    with store.open_db(ctx.db_path) as db:  # what the page showed is kept with the episode
        kept = store.get_episode(db, episode_id)
    assert kept["passed"] is True and len(kept["checks"]) == 7
    assert all(check["passed"] for check in kept["checks"])
    shown = episode_markdown(kept)
    assert "finished, passed" in shown and shown.count("| ✓ |") == 7 and "the sum of:" in shown

    # ratings: thumbs on an agent and on the result, a score with a comment, an edit
    saved, up, down = view.thumbs(1, agent=1)(episode_id, None)
    assert "Saved rating #1" in saved
    assert (up["variant"], down["variant"]) == ("primary", "secondary")  # the pressed thumb
    assert "Saved rating #2" in view.thumbs(-1)(episode_id, None)[0]
    saved = view.rate_score(episode_id, "4", "uses the helper well", None)
    assert "#3" in saved and "#4" in saved
    assert "same as the team's" in view.rate_edit(episode_id, page[view.result], None)
    edited = view.rate_edit(episode_id, page[view.result] + "\n# mine\n", None)
    assert "Saved rating #5" in edited and "Your version: 7 of 7 passed" in edited
    # an edit that breaks the module is saved, and the page says what its tests now make of it
    broken = page[view.result].replace("def has_close_elements", "def _gone") + "\n"
    edited = view.rate_edit(episode_id, broken, None)
    assert "Saved rating #6" in edited and "Your version: 0 of 7 passed" in edited
    with store.open_db(ctx.db_path) as db:
        ratings = store.get_episode(db, episode_id)["ratings"]
    got = [(r["kind"], r["agent"], r["value"], r["text"]) for r in ratings]
    assert got[:4] == [
        ("thumbs", 1, 1.0, None),
        ("thumbs", None, -1.0, None),
        ("score", None, 4.0, None),
        ("comment", None, None, "uses the helper well"),
    ]
    assert got[4][0] == "edit" and got[4][3].endswith("# mine\n")
    assert got[5][0] == "edit" and "_gone" in got[5][3]


def test_a_rating_without_an_episode_is_refused_clearly(ctx):
    assert "run one first" in rating.save_rating(ctx, None, "thumbs", "x", value=1)
    assert "choose a score" in rating.save_score_and_comment(ctx, 3, None, "  ", None)
    assert "no episode 99" in rating.save_rating(ctx, 99, "thumbs", "x", value=1)


def test_form_and_server_problems_are_shown_and_nothing_runs(ctx):
    tab = built(ctx, CoworkTab(ctx, "writing"))
    view = tab.results
    [page] = tab.run(form(tab, source="free", prompt=""))
    assert "empty" in page[view.status]
    [page] = tab.run(form(tab, source="free", prompt="y" * (MAX_PROMPT_CHARS + 5)))
    assert "limit" in page[view.status]
    ctx.client.up = False
    [page] = tab.run(form(tab, source="free", prompt="A haiku about tea"))
    assert "not answering" in page[view.status]
    assert ctx.client.requests == []


def test_co_write_with_an_edited_role_prompt(ctx):
    tab = built(ctx, CoworkTab(ctx, "writing"))
    view = tab.results
    data = form(tab, source="free", prompt="A note on tea", shape="parallel", size=2)
    data[tab.role_texts[0]] = "Write the introduction. Be brief. {words}"
    page = last(tab.run(data))
    assert page[view.episode_id] and page[view.result].startswith("w0")
    systems = [r.messages[0]["content"] for r in ctx.client.requests]
    assert "Write the introduction. Be brief. 20-100" in systems


def test_ab_mode_runs_two_teams_on_one_task_and_records_the_vote(ctx):
    tab = built(ctx, CoworkTab(ctx, "coding"))
    view = tab.results
    page = last(tab.run(form(tab, mode=AB, shape="parallel", shape_b="single")))
    left, right = page[view.ab_pair]
    assert page[view.vote_row]["visible"] is True and "Both teams are done" in page[view.status]
    assert "def has_close_elements" in page[view.ab_views[1]]
    assert "parallel" in page[view.ab_status[0]] and "single" in page[view.ab_status[1]]
    assert "Saved rating #1" in view.vote("both_bad")((left, right), None)
    assert "run an A/B comparison first" in view.vote("left")(None, None)
    with store.open_db(ctx.db_path) as db:
        [vote] = store.get_episode(db, left)["ratings"]
    assert (vote["kind"], vote["choice"], vote["other_episode_id"]) == (
        "pairwise",
        "both_bad",
        right,
    )


def test_a_promoted_adapter_serves_the_next_episode(ctx, tmp_path):
    with store.open_db(ctx.db_path) as db:
        for agent in (0, 1):
            store.register_adapter(db, agent, str(tmp_path / f"a{agent}"))
            store.activate_adapter(db, agent, 1)
    tab = built(ctx, CoworkTab(ctx, "coding"))
    view = tab.results
    page = last(tab.run(form(tab)))
    assert {r.adapter for r in ctx.client.requests} == {"agent1-v1", "agent2-v1"}
    assert "agent1-v1" in page[view.panes[0]]["label"]
    assert "stopped answering" not in page[view.status]
    ctx.client.out = {"http://b:8000": "Connection error."}  # one of several servers died
    page = last(tab.run(form(tab)))
    assert (
        "⚠ The model server at http://b:8000 stopped answering (Connection error.)"
        in (page[view.status])
    )
    assert "version 1" in str(tab.refresh_adapters()[0])
    with store.open_db(ctx.db_path) as db:
        assert store.get_episode(db, page[view.episode_id])["adapter_versions"] == [1, 1]


def test_co_code_and_co_write_are_each_answered_by_the_versions_trained_on_their_work(
    ctx, tmp_path
):
    """Agent 1 has a coding version and a writing version, both active; agent 2 only a coding
    one: Co-code runs both coders, Co-write agent 1's writer and the base model for agent 2, and
    each page's adapter list names what serves it and offers only its own kind's versions."""
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, str(tmp_path / "c0"))
        store.register_adapter(db, 1, str(tmp_path / "c1"))
        store.register_adapter(db, 0, str(tmp_path / "w0"), kind="writing")
        for agent, version in ((0, 1), (1, 1), (0, 2)):
            store.activate_adapter(db, agent, version)
    code = built(ctx, CoworkTab(ctx, "coding"))
    last(code.run(form(code)))
    assert {r.adapter for r in ctx.client.requests} == {"agent1-v1", "agent2-v1"}
    ctx.client.requests.clear()
    write = built(ctx, CoworkTab(ctx, "writing"))
    page = last(write.run(form(write, source="free", prompt="A note on tea", size=2)))
    assert {r.adapter for r in ctx.client.requests} == {"agent1-v2", None}
    said = page[write.results.status]
    assert "agent 1: agent1-v2" in said and "agent 2: base model (no writing version" in said
    labels = [label for label, _ in adapter_choices(ctx, "writing")]
    assert labels[0] == "serving writing versions (agent1-v2)" and labels[2:] == [
        "version 2: agent1-v2 active"
    ]
    assert adapter_choices(ctx, "coding")[0][0] == "serving coding versions (agent1-v1, agent2-v1)"


# -- history ---------------------------------------------------------------------------------


def test_history_filters_and_the_full_episode(ctx):
    tab = built(ctx, CoworkTab(ctx, "coding"))
    view = tab.results
    episode_id = last(tab.run(form(tab)))[view.episode_id]
    view.rate_score(episode_id, "5", "", None)
    history = built(ctx, HistoryTab(ctx))
    table, info, page = history.first_page("coding", "parallel", "score ≥ 4", "any", "ok", 0)
    assert [row[0] for row in table["data"]] == [episode_id] and "1 episode" in info
    table, *_ = history.first_page("writing", "any", "any", "any", "any", 0)
    assert table["data"] == []
    assert episode_filters("any", "any", "not rated", "agent2-v3", "any", 0) == store.EpisodeFilter(
        rated=False, adapter=(1, 3)
    )
    assert episode_filters("any", "any", "any", "agent1-base", "any", 5) == store.EpisodeFilter(
        adapter=(0, 0), task_id=5
    )
    text = history.open_episode(episode_id)
    assert f"Episode {episode_id}" in text and "What the agent saw" in text
    assert "helper-function author" in text  # agent 0's observation
    assert "sorted(numbers)" in text and "score 5/5" in text
    assert "\n```python\n```python" not in text  # an agent's code shows without its own fences
    assert "| finished |" not in text and "· finished" in text  # the live page's words
    assert "no episode 999" in history.open_episode(999)
    # numbers a store cannot hold get a message, not an OverflowError
    assert "between 1 and" in history.open_episode(2**63)
    assert "whole number" in history.open_episode(float("nan"))
    assert "whole number" in history.open_episode(1.5)
    with pytest.raises(gr.Error, match="task number must be between 1 and"):
        episode_filters("any", "any", "any", "any", "any", 10**400)
    with store.open_db(ctx.db_path) as db:
        assert episode_markdown(store.get_episode(db, episode_id)) == text


def test_fences_are_never_closed_by_the_text_inside():
    block = fenced("a\n```python\nx\n```\n", "python")
    assert block.startswith("````python\n") and block.endswith("\n````")


# -- admin -----------------------------------------------------------------------------------


def test_admin_is_refused_without_a_configured_password(tmp_path):
    ctx = AppContext(FakeClient(), db_path=tmp_path / "c.db", admin_password=None)
    admin = built(ctx, AdminTab(ctx))
    ok, message, panel, *_ = admin.login.log_in("anything")
    assert ok is False and "no admin password is configured" in message
    assert panel["visible"] is False


def test_admin_needs_the_right_password_and_checks_it_on_every_action(ctx, monkeypatch):
    monkeypatch.setattr("app.admin_login.WRONG_PASSWORD_DELAY_S", 0)
    admin = built(ctx, AdminTab(ctx))
    ok, message, panel, *_ = admin.login.log_in("")
    assert ok is False and "type the admin password" in message and panel["visible"] is False
    ok, message, panel, *_ = admin.login.log_in("wrong")
    assert ok is False and "wrong password" in message and panel["visible"] is False
    ok, message, panel, *_ = admin.login.log_in("s3cret")
    assert ok is True and panel["visible"] is True
    with pytest.raises(gr.Error, match="Unlock"):
        admin.training.retrain_now(False, "coding", 2, 1, 2, 1, 64, 0, 1, 0.0, 1, "aligned")
    with pytest.raises(gr.Error, match="Unlock"):
        admin.export.export_data(False, "jsonl")
    assert "cannot train" in admin.training.retrain_now(
        True, "coding", 2, 1, 2, 1, 64, 0, 1, 0.0, 1, "aligned"
    )
    text, bar = learner_status(ctx)
    assert "no training run yet" in text and "admin-progress-bar" in bar


def test_the_admin_form_sets_the_joint_mode_and_refuses_a_cross_run_too_large(tmp_path):
    worker = LearnerWorker(client=None, base_model="unused", db_path=tmp_path / "c.db")
    ctx = AppContext(
        FakeClient(), db_path=tmp_path / "c.db", admin_password="s3cret", learner=worker
    )
    training = built(ctx, AdminTab(ctx)).training
    assert training.joint_mode.value == worker.args.magrpo.joint_mode == "aligned"
    form = ["coding", 2, 1, 4, 1, 64, 0, 1, 0.0, 1]  # task, agents, steps, G, tasks, tokens, ...
    assert training.train_args(*form, "cross").magrpo.joint_mode == "cross"
    assert training.train_args(*form[:-1], 4, "cross").gate.samples == 4
    with pytest.raises(ValueError, match="gate.samples"):
        training.train_args(*form[:-1], 0, "cross")
    assert training.train_args(*form, "aligned").magrpo.joint_mode == "aligned"
    form[1] = 4  # 4 agents at G = 4: 256 mixes a task, past the cap: said, and nothing starts
    message = training.retrain_now(True, *form, "cross")
    assert message.startswith("⚠ Not started") and "4^4 = 256 joint actions" in message
    with store.open_db(ctx.db_path) as db:
        assert store.list_training_runs(db) == []


def test_admin_export_registry_and_eval_report(ctx, tmp_path):
    tab = built(ctx, CoworkTab(ctx, "coding"))
    last(tab.run(form(tab)))
    admin = built(ctx, AdminTab(ctx))
    message, files = admin.export.export_data(True, "jsonl")
    assert "1 episode(s)" in message and all(f.endswith(".jsonl") for f in files)
    folder = Path(files[0]).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(Path(f).stat().st_mode & 0o777 == 0o600 for f in files)
    _, again = admin.export.export_data(True, "jsonl")
    assert not folder.exists() and Path(again[0]).exists()  # one export on disk at a time
    shutil.rmtree(Path(again[0]).parent)
    assert "Choose a version" in admin.registry.promote_version(True, None)[0]
    assert admin.registry.rollback_pick.value == "0:coding"
    said = admin.registry.rollback_agent(True, "1:writing")[0]
    assert "agent2 has no active writing adapter to roll back" in said
    ctx.eval_dir = tmp_path / "eval"
    evaluation = admin.evaluation
    started = evaluation.start_eval(True, "coding", "xsum", 2, 1, 64, ["parallel", "single"], True)
    assert "Evaluation running" in started or "done" in started
    evaluation.worker.job.thread.join(120)
    assert "done: 4 episodes" in evaluation.eval_status()
    report, plots = evaluation.open_report(True, evaluation.reports()["value"])
    assert report.startswith("# Evaluation") and plots


def test_the_version_plot_says_when_it_has_nothing_to_draw(ctx, tmp_path):
    """No versions, or versions without a gate's or a run's figures (the shipped team's, whose
    figures are on its card): a title that says so, never bare axes."""
    from app.admin_adapters import version_curve

    def title():
        return version_curve(ctx).axes[0].get_title()

    assert title() == "No adapter versions yet"
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, str(tmp_path / "a0"), metrics={"source": "shipped"})
    assert title().startswith("No scores yet")
    with store.open_db(ctx.db_path) as db:
        store.register_adapter(db, 0, str(tmp_path / "a1"), metrics={"train_reward": 0.4})
    assert title() == "Score by adapter version"


def test_admin_password_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COTEAM_ADMIN_PASSWORD", "from-env")
    assert admin_password_from(None) == "from-env"
    (tmp_path / "pw").write_text("from-file\n")
    assert admin_password_from(tmp_path / "pw") == "from-file"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        admin_password_from(tmp_path / "empty")
    monkeypatch.delenv("COTEAM_ADMIN_PASSWORD")
    assert admin_password_from(None) is None


def test_the_whole_page_builds_with_a_queue_for_episodes(ctx):
    demo = build_app(ctx)
    runs = [d for d in demo.fns.values() if d.concurrency_id == "episodes"]
    # the two Run buttons and Co-write's planning call: model calls, four at a time
    assert len(runs) == 3 and all(d.concurrency_limit == 4 for d in runs)


def test_running_and_rating_are_named_in_the_http_api_and_admin_is_not(ctx):
    """Scripts and `bench/load.py` drive the page through these names (gradio_client)."""
    endpoints = build_app(ctx).get_api_info()["named_endpoints"]
    for tab in ("cowrite", "cocode"):
        run = {p["label"] for p in endpoints[f"/{tab}_run"]["parameters"]}
        assert {"Task", "Team shape", "Team size", "Tokens per agent call"} <= run
        score = endpoints[f"/{tab}_score"]["parameters"]
        assert [p["parameter_name"] for p in score] == ["score", "comment"]  # episode: session
        for name in ("thumbs_up", "thumbs_down", "agent1_thumbs_up", "edit", "vote_left"):
            assert f"/{tab}_{name}" in endpoints
    admin = ["/log_in", "/retrain_now", "/promote_version", "/rollback_agent", "/export_data"]
    admin += ["/show", "/show_pairs", "/show_when_unlocked"]  # the ratings panel
    assert not [name for name in admin if name in endpoints]  # admin events are private


def test_the_page_warns_everyone_when_the_sandbox_is_weak(ctx, monkeypatch):
    from agents.judge import sandbox

    def warnings(demo):
        return [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sandbox-warning"]

    assert warnings(build_app(ctx)) == [] or os.geteuid() != 0
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    (banner,) = warnings(build_app(ctx))
    assert "Weak sandbox" in banner.value and "generated code is refused" in banner.value


def test_wrong_admin_passwords_back_off_then_lock_the_address_out(ctx, monkeypatch, caplog):
    import app.admin_login

    monkeypatch.setattr("app.admin_login.WRONG_PASSWORD_DELAY_S", 0.01)
    admin = built(ctx, AdminTab(ctx))
    clock = [1000.0]
    admin.login.throttle = app.admin_login.LoginThrottle(clock=lambda: clock[0])
    attacker = SimpleNamespace(client=SimpleNamespace(host="10.0.0.9"))
    owner = SimpleNamespace(client=SimpleNamespace(host="10.0.0.1"))
    ok, message, *_ = admin.login.log_in("guess1", attacker)
    assert "wrong password" in message
    ok, message, *_ = admin.login.log_in("s3cret", attacker)  # even the right one waits its turn
    assert ok is False and "too many wrong passwords" in message
    for n in range(2, app.admin_login.MAX_LOGIN_FAILURES + 1):
        clock[0] += app.admin_login.MAX_BACKOFF_S
        assert "wrong password" in admin.login.log_in(f"guess{n}", attacker)[1]
    clock[0] += app.admin_login.MAX_BACKOFF_S * 2
    ok, message, *_ = admin.login.log_in("s3cret", attacker)
    assert ok is False and "too many wrong passwords" in message  # locked out
    assert admin.login.log_in("s3cret", owner)[0] is True  # another address is not
    clock[0] += app.admin_login.LOCKOUT_S
    assert admin.login.log_in("s3cret", attacker)[0] is True
    failures = [r for r in caplog.records if "admin login failed from 10.0.0.9" in r.getMessage()]
    assert len(failures) == app.admin_login.MAX_LOGIN_FAILURES


def test_a_plain_request_is_written_a_section_per_writer_with_tokens_to_finish():
    """The Co-write page's first choice is a person's own request written as sections, a
    writer's each (the default outline when the sections box is empty); free-form parts are a
    named option; a sectioned document starts with tokens enough for every writer's share."""
    from agents.kinds import team_roles
    from agents.tasks import DEFAULT_OUTLINE
    from agents.team.roles import LONGFORM_MAX_TOKENS, token_share
    from app.cowork_choices import SOURCES, source_max_tokens

    assert SOURCES["writing"][0][1] == "own_longform"
    task = chosen_task("writing", "own_longform", None, "How ocean tides work", "", "")
    assert task.form == "longform"
    assert [s["heading"] for s in task.extra["outline"]] == [h for h, _, _ in DEFAULT_OUTLINE]
    assert chosen_task("writing", "free", None, "How ocean tides work", "").form == "free"
    assert source_max_tokens("writing", "own_longform") == LONGFORM_MAX_TOKENS
    assert source_max_tokens("coding", "humaneval") == source_max_tokens("writing", "xsum") == 256
    for shape, size in (("single", 1), ("parallel", 2), ("parallel", 4)):
        shares = [token_share(r) for r in team_roles(task, shape, size, None)]
        assert max(shares) <= LONGFORM_MAX_TOKENS  # no writer is cut off before its share


def test_co_code_serves_one_agent_unless_held_out_figures_show_the_team_is_as_good(tmp_path):
    from app.cowork_choices import served_shape

    shape, size, why = served_shape("coding")  # the shipped card: HumanEval 0-31 held out
    assert (
        (shape, size) == ("single", 1)
        and "0.906" in why
        and "0.750" in why
        and "EVALUATION.md" in why
    )
    card = tmp_path / "card.json"
    figures = {"problems": "P", "judge": "J", "source": "S", "count": 9}
    for team, single, served, agents in (
        (0.7, 0.6, "parallel", 4),
        (0.6, 0.6, "parallel", 2),
        (0.6, 0.6, "parallel_incremental", 2),  # the shape the figures are for
        (0.5, 0.6, "single", 1),
    ):
        figured = served if served != "single" else "parallel"
        held_out = figures | {
            "team": {"shape": figured, "agents": max(agents, 2), "pass_at_1": team}
        }
        held_out["single"] = {"pass_at_1": single}
        card.write_text(json.dumps({"held_out": {"coding": held_out}}))
        shape, size, why = served_shape("coding", card)
        assert (shape, size) == (served, agents)
        assert f"{team:.3f}" in why and f"{single:.3f}" in why
    card.write_text(json.dumps({"versions": {}}))  # a team shipped without held-out figures
    assert served_shape("coding", card)[0] == "single"
    assert served_shape("writing") == ("parallel", 2, "")


def class_reply(request) -> str:
    """Each method of a vendored class as its canonical solution has it (graph logic only)."""
    from tests.test_classes import ScriptedClasses

    global _CLASSES
    _CLASSES = globals().get("_CLASSES") or ScriptedClasses()
    [completion] = _CLASSES.generate([request])
    return completion.text


def test_co_code_offers_classes_and_runs_a_class_team_with_a_verdict_per_test_class(tmp_path):
    from app.cowork_choices import CLASS_SHAPE_LABELS, EXAMPLE_CLASS, EXAMPLE_CLASS_TESTS

    ctx = AppContext(FakeClient(class_reply), db_path=tmp_path / "coteam.db")
    tab = built(ctx, CoworkTab(ctx, "coding"))
    view = tab.results
    # choosing a class: the classes to pick, the class shapes, the served one and why, no roles
    [problem, preview, prompt, tests, tokens, shape, shape_b, size, served, roles, *versions] = (
        tab.choose_source("classeval", "", "")
    )
    assert ("ClassEval_0 · AccessGatewayFilter · 4 methods (held out)", "ClassEval_0") in problem[
        "choices"
    ]
    assert [value for _, value in shape["choices"]] == list(CLASS_SHAPE_LABELS)
    # the card's figures: the team of 4 passes at least as much as one agent's better form
    assert shape["value"] == "parallel" and size["value"] == 4
    assert "0.260" in served["value"] and "0.249" in served["value"]
    assert "whole classes passed: the team 0.031, one agent 0.062" in served["value"]
    assert roles["visible"] is False and tokens["value"] == 256
    assert "serving class versions" in versions[0]["choices"][0][0]
    # your own class: the example class and its tests fill the boxes
    own = tab.choose_source("own_class", "", "")
    assert own[2]["value"] == EXAMPLE_CLASS and own[3]["value"] == EXAMPLE_CLASS_TESTS
    mine = tab.choose_source("own_class", "class Mine:\n    pass\n", "")
    assert mine[2]["value"].startswith("class Mine")  # a person's own text is kept

    page = last(tab.run(form(tab, source="classeval", problem="ClassEval_4", max_tokens=256)))
    episode_id = page[view.episode_id]
    assert isinstance(episode_id, int), page[view.status]
    assert "✓ finished, passed" in page[view.status] and "test classes 7/7" in page[view.status]
    assert "writes " in page[view.panes[0]]["label"] and "def " in page[view.panes[0]]["value"]
    assert "class AssessmentSystem" in page[view.result]
    table = page[view.tests_view]
    assert "7 of 7 test classes passed" in table and "| agent 2 |" in table
    assert "CoTeam wrote those" in table
    log = page[view.turn_log]  # one verdict word, what it means, and the reward a term a line
    assert "Turn 1: ✓ passed** (passed: every test class passed" in log
    assert "**Reward" in log and "share of the test classes passed" in log
    assert page[view.rating_panel]["visible"] is True
    with store.open_db(ctx.db_path) as db:
        stored = store.get_episode(db, episode_id)
    assert stored["task"]["kind"] == "class" and stored["shape"] == "class_parallel"
    assert stored["task"]["source_id"] == "ClassEval_4" and stored["reward"] is not None
    assert stored["passed"] is True and len(stored["checks"]) == 7  # the verdict, kept
    assert all(c["passed"] and "tests passed" in c["message"] for c in stored["checks"])
    shown = episode_markdown(stored)  # History opens it
    assert "finished, passed" in shown and "#### Verdict: passed" in shown
    assert "· class · class_parallel ·" in shown and "```python\nclass AssessmentSystem" in shown
    assert "Its methods `add_student`" in shown
    # an edit is judged by the class judge
    broken = page[view.result].replace("return top_student", "return None")
    judged = view.rate_edit(episode_id, broken, None)
    assert re.search(r"Your version: [0-6] of 7 test classes passed", judged), judged

    # A/B: the team and one agent on the same class, side by side, and the vote
    ab = form(
        tab, source="classeval", problem="ClassEval_46", mode=AB, shape_b="single_incremental"
    )
    page = last(tab.run(ab))
    pair = page[view.ab_pair]
    assert pair is not None and len(set(pair)) == 2, page[view.status]
    assert "parallel" in page[view.ab_status[0]] and "single_incremental" in page[view.ab_status[1]]
    assert "interpolate_1d" in page[view.ab_views[1]]
    assert "Saved" in view.vote("left")(pair, None)

    # a person's own class, and what the form refuses before anything runs
    for values, message in (
        (dict(source="own_class", prompt=EXAMPLE_CLASS, tests=""), "needs its tests"),
        (dict(source="own_class", prompt="", tests="x"), "the skeleton is empty"),
        (dict(source="classeval", problem="ClassEval_4", turns=2, shape="one_round_discussion"),
         "one turn"),
        (dict(source="classeval", problem="ClassEval_4", shape="naive_concat"), "not a class"),
    ):  # fmt: skip
        status = last(tab.run(form(tab, **values)))[view.status]
        assert message in status, status


def test_co_write_plans_the_sections_from_a_plain_request_for_the_person_to_edit(tmp_path):
    from agents.serving.policy import _options

    plan = {"headings": ["What vaccines are", "Antigens", "Memory cells", "Boosters"]}

    def respond(request):
        return json.dumps(plan) if request.json_schema else reply(request)

    ctx = AppContext(FakeClient(respond), db_path=tmp_path / "coteam.db")
    tab = built(ctx, CoworkTab(ctx, "writing"))
    lines = tab.plan_sections("How vaccines train the immune system")
    assert [line.partition(":")[0] for line in lines.splitlines()] == plan["headings"]
    assert lines.splitlines()[2].endswith("| begins: As for memory cells,")
    [asked] = ctx.client.requests  # one call, held to the plan's JSON by the server
    assert asked.json_schema["properties"]["headings"]["minItems"] == 4
    assert "How vaccines train the immune system" in asked.messages[-1]["content"]
    assert _options(asked)["response_format"]["json_schema"]["schema"] == asked.json_schema
    plan["headings"][1] = "what vaccines ARE"  # two sections alike: the box is kept
    assert tab.plan_sections("How vaccines train the immune system") == gr.skip()
    assert tab.plan_sections("   ") == gr.skip() and len(ctx.client.requests) == 2
    task = chosen_task("writing", "own_longform", None, "How vaccines work", "", lines)
    headings = ["What vaccines are", "Antigens", "Memory cells", "Boosters"]
    assert [s["heading"] for s in task.extra["outline"]] == headings
