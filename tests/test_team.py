"""The team graphs' logic with a scripted policy: every shape and team size, both kinds of task,
multi-turn feedback, streaming events and recording in the store."""

import json
import threading

import pytest

import store
from agents.kinds import role_names, team_roles
from agents.serving.policy import PolicyError
from agents.tasks import humaneval_task, writing_prompt_task, xsum_tasks
from agents.team.episode import make_team, run_episode, run_group
from agents.team.feedback import CodeCheck, parse_check
from agents.team.graph import GREEDY, Sampling, TeamSettings, build_graph
from agents.team.roles import SHAPES, frame_echo, load_prompts
from agents.team.writer import earliest
from tests.scripted import ScriptedPolicy, adapters, agent_of

CODING = humaneval_task(0)
WRITING = xsum_tasks()[0]
SIZES = [(shape, n) for shape in SHAPES for n in ([1] if shape == "single" else [2, 3, 4])]


def code_reply(request) -> str:
    """Each role writes what it owns (after the function's head the environment began its reply
    with, where it did); the entry author solves the problem."""
    system = request.messages[0]["content"]
    if request.messages[-1]["role"] == "assistant" and "only the helper function" in system:
        return "    return numbers\n```"
    for name in ("aux2", "aux", "test_has_close_elements"):
        if f"only the helper function `{name}`" in system or f"test function `{name}()`" in system:
            return f"```python\ndef {name}(x):\n    return x\n```"
    solution = " any(abs(a - b) < threshold for a in numbers for b in numbers if a is not b)\n```"
    begun = request.messages[-1]
    if begun["role"] == "assistant":  # begun: the function's head (scaffolded: then `return`)
        return solution if begun["content"].endswith("return") else "    return" + solution
    return "```python\ndef has_close_elements(numbers, threshold):\n    return" + solution


def prose_reply(request) -> str:
    agent = agent_of(request)
    low, high = 30, 40  # inside most roles' bounds, so a writing team usually finishes in one turn
    return " ".join(f"w{agent}x{k}" for k in range((low + high) // 2)) + "."


def run(task, shape, size, tmp_path, respond=None, checker=parse_check, **team):
    events = []
    policy = ScriptedPolicy(respond or (code_reply if task.kind == "coding" else prose_reply))
    result = run_episode(
        task,
        policy,
        TeamSettings(shape, size, adapters=adapters(size), **team),
        checker=checker,
        db=tmp_path / "coteam.db",
        on_event=events.append,
    )
    return result, policy, events


@pytest.mark.parametrize("task", [CODING, WRITING], ids=["coding", "writing"])
@pytest.mark.parametrize(("shape", "size"), SIZES)
def test_every_shape_and_size_runs_and_is_recorded(task, shape, size, tmp_path):
    result, policy, events = run(task, shape, size, tmp_path)
    rounds = 2 if shape == "one_round_discussion" else 1
    assert len(result.steps) == len(policy.requests) == size * rounds
    assert [r.name for r in result.roles] == role_names(task, shape, size)
    assert [s["agent"] for s in result.steps] == list(range(size)) * rounds
    assert [step["adapter"] for step in result.final_steps()] == adapters(size)
    assert {r.adapter for r in policy.requests} == set(adapters(size))
    assert result.turns == 1 and result.output

    with store.open_db(tmp_path / "coteam.db") as db:
        episode = store.get_episode(db, result.episode_id)
    assert episode["status"] == "ok" and episode["shape"] == shape
    assert episode["team_size"] == size and episode["roles"] == [r.name for r in result.roles]
    assert episode["adapter_versions"] == [1] * size
    assert episode["final_output"] == result.output
    assert episode["task"]["source_id"] == task.source_id
    assert len(episode["turns"]) == size * rounds
    for row, step in zip(episode["turns"], result.steps, strict=True):
        assert (row["turn"], row["agent"]) == (step["round"], step["agent"])
        assert (
            json.loads(row["observation"]) == step["messages"]
        )  # the exact prompt, for the learner
        assert row["completion"] == step["text"]

    # events: every agent's streamed tokens add up to its text; one agent_done per call
    for step in result.steps:
        where = (step["agent"], step["turn"], step["round"])
        streamed = "".join(
            e["text"]
            for e in events
            if e["event"] == "token" and (e["agent"], e["turn"], e["round"]) == where
        )
        assert streamed == step["text"]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "episode_start" and kinds[-1] == "episode_end"
    assert kinds.count("agent_done") == kinds.count("agent_start") == size * rounds
    assert kinds.count("turn_end") == 1


def test_code_parts_are_combined_in_role_order(tmp_path):
    result, _, _ = run(CODING, "parallel", 4, tmp_path)
    code = result.output
    assert code.startswith("from typing import List")
    order = ["def aux(", "def aux2(", "def has_close_elements(", "def test_has_close_elements("]
    assert sorted(order, key=code.index) == order
    assert result.success


def test_writing_sections_are_joined_in_role_order(tmp_path):
    result, _, _ = run(WRITING, "parallel", 3, tmp_path)
    assert result.output == "\n\n".join(step["text"] for step in result.final_steps())


def test_parallel_agents_act_at_once_and_pipeline_agents_in_turn(tmp_path):
    # Every parallel agent must be inside generate() at the same time to pass the barrier.
    barrier = threading.Barrier(4, timeout=30)

    def wait_for_all(request):
        barrier.wait()
        return code_reply(request)

    result, _, _ = run(CODING, "parallel", 4, tmp_path, respond=wait_for_all)
    assert len(result.steps) == 4

    active, most = [0], [0]
    lock = threading.Lock()

    def count(request):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        reply = code_reply(request)
        with lock:
            active[0] -= 1
        return reply

    run(CODING, "sequential_pipeline", 4, tmp_path, respond=count)
    assert most[0] == 1


def test_feedback_reaches_the_next_turn_and_success_stops_the_episode(tmp_path):
    calls = {}

    def broken_then_fixed(request):
        agent = agent_of(request)
        calls[agent] = calls.get(agent, 0) + 1
        if agent == 1 and calls[agent] == 1:  # its reply is begun with the function's head
            return "    return (\n```"
        return code_reply(request)

    result, policy, events = run(
        CODING, "parallel", 2, tmp_path, respond=broken_then_fixed, turns=3
    )
    assert result.turns == 2 and result.success  # fixed in turn 2; turn 3 never runs
    assert len(result.steps) == 4
    second_entry = [r for r in policy.requests if agent_of(r) == 1][1].messages[1]["content"]
    assert "Your answer last turn:" in second_entry and "return (" in second_entry
    assert "syntax error" in second_entry
    assert "does not define `has_close_elements`" in second_entry
    verdicts = [e for e in events if e["event"] == "turn_end"]
    assert [v["success"] for v in verdicts] == [False, True]
    with store.open_db(tmp_path / "coteam.db") as db:
        episode = store.get_episode(db, result.episode_id)
    assert episode["turn_count"] == 2 and [t["turn"] for t in episode["turns"]] == [0, 0, 1, 1]


@pytest.mark.parametrize("shape", ["parallel", "sequential_pipeline", "one_round_discussion"])
def test_an_unfinished_episode_runs_to_the_turn_limit(shape, tmp_path):
    def never(code, task):
        return CodeCheck(passed=False, tests_run=True, tests_total=2, messages=["assert f(1) == 2"])

    result, policy, _ = run(CODING, shape, 2, tmp_path, turns=3, checker=never)
    rounds = 2 if shape == "one_round_discussion" else 1
    assert result.turns == 3 and not result.success
    assert len(policy.requests) == 2 * rounds * 3
    last_turn = policy.requests[-2 * rounds].messages[1]["content"]  # feedback comes with round 0
    assert "Tests: 0 of 2 passed." in last_turn and "assert f(1) == 2" in last_turn
    with store.open_db(tmp_path / "coteam.db") as db:
        episode = store.get_episode(db, result.episode_id)
    assert episode["status"] == "ok" and episode["turn_count"] == 3 * rounds


def test_writing_feedback_notes_length(tmp_path):
    result, policy, _ = run(
        writing_prompt_task("Write about tea."), "parallel", 2, tmp_path, turns=2
    )
    # 35 words: too short for the body (60-200), fine for the introduction (20-100)
    assert result.turns == 2 and not result.success
    body_second = policy.requests[3].messages[1]["content"]
    assert "Your section has 35 words; aim for 60-200." in body_second
    intro_second = policy.requests[2].messages[1]["content"]
    assert "Nothing to fix in your part" in intro_second


def test_a_reply_that_copies_its_views_frames_ends_where_the_copy_begins(tmp_path):
    """A small model that goes on past its rewritten section into a copy of the feedback it was
    shown (seen in 14 of 44 second-turn long-form replies) has its reply cut there."""
    echo = "\n\nFeedback on the team's result:\nYour section has 35 words; aim for 60-200."

    def respond(request):
        if "Feedback on the team's result" in request.messages[1]["content"]:
            return "Tea is a drink." + echo
        return prose_reply(request)

    result, policy, _ = run(
        writing_prompt_task("Write about tea."), "parallel", 2, tmp_path, respond=respond, turns=2
    )
    assert result.turns == 2 and len(policy.requests) == 4
    for step in result.final_steps():
        assert step["turn"] == 1 and "Feedback" not in step["text"]
        # cut at the last whole piece (a token, for the server) before the copy
        assert step["text"].startswith("Tea is a drink") and "Your section" not in step["text"]
        assert step["finish_reason"] == "stop"
    assert "Feedback" not in result.output


def test_frame_echo_and_earliest_stop():
    assert frame_echo("Tea is good.\nYour answer last turn:\nTea.") == len("Tea is good.\n")
    assert frame_echo("Your first draft: is what I keep.") is None  # a header ends with its line
    assert frame_echo("A section with no copy.") is None
    at_five = lambda text: 5 if len(text) > 5 else None  # noqa: E731
    stop = earliest(None, at_five, frame_echo)
    assert stop("abc") is None and stop("abcdefgh") == 5
    assert stop("ab\nYour first draft:\nx") == 3
    assert earliest(None, None) is None and earliest(None, frame_echo) is frame_echo


def test_sampling_settings_reach_the_requests(tmp_path):
    _, policy, _ = run(CODING, "parallel", 2, tmp_path, sampling=Sampling(0.7, 0.9, 99, seed=5))
    got = sorted((r.temperature, r.top_p, r.max_tokens, r.seed) for r in policy.requests)
    assert got == [(0.7, 0.9, 99, 5), (0.7, 0.9, 99, 6)]
    _, policy, _ = run(CODING, "single", 1, tmp_path, sampling=GREEDY)
    assert (policy.requests[0].temperature, policy.requests[0].seed) == (0.0, None)


def test_adapters_by_agent_and_the_base_model(tmp_path):
    policy = ScriptedPolicy(code_reply)
    result = run_episode(
        CODING, policy, TeamSettings(agents=3, adapters={2: "agent3-v7"}), db=tmp_path / "c.db"
    )
    assert [s["adapter"] for s in result.final_steps()] == [None, None, "agent3-v7"]
    with store.open_db(tmp_path / "c.db") as db:
        assert store.get_episode(db, result.episode_id)["adapter_versions"] == [0, 0, 7]


def test_a_training_runs_scratch_adapter_is_recorded_as_no_version_not_the_base_model(tmp_path):
    scratch = store.training_adapter_name("run-4-a1b2c3", 2, 0)  # as learner/train.py names it
    result = run_episode(
        CODING,
        ScriptedPolicy(code_reply),
        TeamSettings(agents=2, adapters=[scratch, "agent2-v3"]),
        db=tmp_path / "c.db",
    )
    with store.open_db(tmp_path / "c.db") as db:
        episode = store.get_episode(db, result.episode_id)
        base_of_agent0 = store.EpisodeFilter(adapter=(0, 0))
        assert store.count_episodes(db, base_of_agent0) == 0  # not listed as a base-model episode
    assert episode["adapter_versions"] == [None, 3]
    assert episode["params"]["adapters"] == [scratch, "agent2-v3"]  # which scratch adapter it was
    assert [store.version_label(v) for v in episode["adapter_versions"]] == ["training", "v3"]


def test_adapter_names_are_built_and_read_in_one_place():
    assert store.parse_adapter_name(store.adapter_name(3, 12)) == (3, 12)
    assert store.adapter_name(0, 3) == "agent1-v3"  # agents numbered from 1, as on the page
    for name in (None, "", "base", "agent1-v", "agent1-v2x", "agent0-v1", "run-1-abc-s1-agent1"):
        assert store.parse_adapter_name(name) is None
    assert [store.recorded_version(n) for n in (None, "agent1-v5", "run-1-ab-s3-agent1")] == [
        0,
        5,
        None,
    ]


def test_role_prompts_can_be_overridden(tmp_path):
    custom = {"helper": "CUSTOM for {entry}", "entry/ask": "Go, {entry} with {helpers}!"}
    _, policy, _ = run(CODING, "parallel", 2, tmp_path, prompts=custom)
    systems = {agent_of(r): r.messages[0]["content"] for r in policy.requests}
    users = {agent_of(r): r.messages[1]["content"] for r in policy.requests}
    assert systems[0] == "CUSTOM for has_close_elements"
    assert systems[1].startswith("You are the main-function author")
    # the ask closes the user message, after the task
    assert users[0].endswith("Now write the complete function `aux`.")
    assert users[1].endswith("Go, has_close_elements with `aux`!")
    path = tmp_path / "roles.json"
    path.write_text(json.dumps({"entry": "E {entry}", "summary/ask": "Go."}))
    assert load_prompts(path) == {"entry": "E {entry}", "summary/ask": "Go."}
    path.write_text(json.dumps({"boss": "x"}))
    with pytest.raises(ValueError, match="unknown roles"):
        load_prompts(path)


def test_a_failing_policy_fails_the_recorded_episode(tmp_path):
    def fail(request):
        raise PolicyError("server gone")

    with pytest.raises(PolicyError, match="server gone"):
        run(CODING, "parallel", 2, tmp_path, respond=fail)
    with store.open_db(tmp_path / "coteam.db") as db:
        [episode] = store.list_episodes(db)
    assert episode["status"] == "failed" and "server gone" in episode["error"]


def test_run_group_shares_a_group_id(tmp_path):
    policy = ScriptedPolicy(code_reply)
    results = run_group(
        CODING, policy, 3, TeamSettings(sampling=Sampling(seed=1), agents=2), db=tmp_path / "g.db"
    )
    assert len(policy.requests) == 6
    assert sorted(r.seed for r in policy.requests) == [1, 2, 101, 102, 201, 202]
    with store.open_db(tmp_path / "g.db") as db:
        episodes = store.get_episodes(db, [r.episode_id for r in results])
    assert len({e["group_id"] for e in episodes}) == 1 and episodes[0]["group_id"]
    assert [e["sample_index"] for e in episodes] == [0, 1, 2]
    assert all(e["status"] == "ok" for e in episodes)


def test_graphs_have_the_nodes_of_their_shape():
    policy = ScriptedPolicy(code_reply)

    def nodes(shape, size):
        team = make_team(CODING, policy, TeamSettings(shape=shape, agents=size))
        return set(build_graph(team).get_graph().nodes) - {"__start__", "__end__"}

    assert nodes("parallel", 3) == nodes("naive_concat", 3) == {"agent", "combine", "environment"}
    assert nodes("single", 1) == {"agent", "combine", "environment"}
    assert nodes("sequential_pipeline", 3) == {
        "agent_0",
        "agent_1",
        "agent_2",
        "combine",
        "environment",
    }
    assert nodes("one_round_discussion", 2) == {
        "draft",
        "share_drafts",
        "revise",
        "combine",
        "environment",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"shape": "single", "agents": 2}, "one agent"),
        ({"shape": "parallel", "agents": 1}, "2 to 4"),
        ({"shape": "parallel", "agents": 5}, "2 to 4"),
        ({"shape": "star"}, "unknown team shape"),
        ({"turns": 0}, "at least one turn"),
        ({"agents": 2, "adapters": ["a"]}, "1 adapters for a team of 2"),
        ({"agents": 2, "adapters": {3: "a"}}, "an adapter for agent 4, but the team has 2"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(settings, message, tmp_path):
    policy = ScriptedPolicy(code_reply)
    with pytest.raises(ValueError, match=message):
        run_episode(CODING, policy, TeamSettings(**settings), db=tmp_path / "x.db")
    assert policy.requests == []


@pytest.mark.parametrize("shape", ["parallel", "scaffolded"])
def test_each_coding_view_holds_the_contract_and_its_own_part_but_no_teammates_text(
    shape, tmp_path
):
    helper_text = "```python\ndef aux(numbers, threshold):\n    return SECRET_HELPER\n```"
    _, policy, _ = run(
        CODING,
        shape,
        2,
        tmp_path,
        turns=2,
        respond=lambda r: helper_text if agent_of(r) == 0 else "def has_close_elements(): pass",
    )
    users = [(agent_of(r), r.messages[1]["content"]) for r in policy.requests]
    for agent, user in users:
        assert "interface contract" in user and "`def aux(numbers, threshold)`" in user
        assert "SECRET_HELPER" not in user or agent == 0  # only its own text, never a teammate's
    helper_view = next(u for a, u in users if a == 0)
    entry_view = next(u for a, u in users if a == 1)
    assert "Your part: helper aux" in helper_view
    assert "Complete your function:\n```python\ndef has_close_elements(" in entry_view
    assert "Your part: main function has_close_elements" in entry_view
    # the entry author sees the helper's stub (what it calls); the helper no stub of the entry
    assert "Your teammates' functions" in entry_view and "Your teammates'" not in helper_view
    assert entry_view.rstrip().endswith("do not define `aux`.")
    header = 'def {}(numbers: List[float], threshold: float) -> bool:\n    """ Check'
    if shape == "parallel":
        # every agent sees the problem as posed; no call of the helper is written for anyone
        assert header.format("has_close_elements") in helper_view
        assert header.format("has_close_elements") in entry_view
        assert "return aux(" not in entry_view
    else:
        assert "    return aux(numbers, threshold)\n```" in entry_view  # the call in its stub
        # the helper author is shown the problem posed for `aux`, the entry author not at all
        assert header.format("aux") in helper_view
        assert header.format("has_close_elements") not in entry_view


def test_each_coding_reply_is_begun_with_its_own_functions_head_and_no_code(tmp_path):
    result, policy, events = run(CODING, "parallel", 2, tmp_path)
    helper, entry = (next(r for r in policy.requests if agent_of(r) == i) for i in (0, 1))
    assert [m["role"] for m in helper.messages] == ["system", "user", "assistant"]
    assert [m["role"] for m in entry.messages] == ["system", "user", "assistant"]
    head = '```python\ndef {}(numbers: List[float], threshold: float) -> bool:\n    """'
    helper_begun, begun = helper.messages[-1]["content"], entry.messages[-1]["content"]
    assert helper_begun.startswith(head.format("aux"))
    assert begun.startswith(head.format("has_close_elements"))
    # each ends with its one-line docstring: what follows is the model's
    for opening in (helper_begun, begun):
        assert opening.endswith('"""\n') and opening.count("\n") == 3
    # the agent's answer is the begun reply and what its model wrote after it, streamed as one
    step = next(s for s in result.steps if s["agent"] == 1)
    assert step["text"] == begun + code_reply(entry)
    streamed = "".join(e["text"] for e in events if e["event"] == "token" and e["agent"] == 1)
    assert streamed == step["text"]
    # an agent that writes the whole answer alone starts with its function's head too: the
    # problem as posed (its signature and docstring), the same start for every shape
    for shape, size in (("single", 1), ("naive_concat", 2)):
        _, other, _ = run(CODING, shape, size, tmp_path / shape)
        openings = [r.messages[-1] for r in other.requests]
        assert all(m["role"] == "assistant" for m in openings)
        assert {m["content"] for m in openings} == {
            "```python\n" + CODING.prompt.strip("\n") + "\n"
        }


def test_the_scaffolded_shape_writes_the_helpers_call_and_the_helpers_problem(tmp_path):
    """The named option the default team does not use: the environment begins the helper
    author's reply with the problem posed for `aux` and the entry author's with the call."""
    result, policy, _ = run(CODING, "scaffolded", 2, tmp_path)
    helper, entry = (next(r for r in policy.requests if agent_of(r) == i) for i in (0, 1))
    assert (
        helper.messages[-1]["content"]
        == "```python\n"
        + CODING.prompt.strip("\n")
        .replace("def has_close_elements(", "def aux(")
        .replace(">>> has_close_elements(", ">>> aux(")
        + "\n"
    )
    begun = entry.messages[-1]["content"]
    assert begun.startswith("```python\ndef has_close_elements(numbers: List[float], threshold")
    assert begun.endswith('"""\n    result = aux(numbers, threshold)\n    return')
    assert "result = aux(numbers, threshold)" in result.output  # the combined module calls aux


def test_a_helper_reply_begins_with_its_problem_only_where_the_function_is_still_to_write():
    from agents.tasks import user_coding_task

    def helper_start(prompt, shape="scaffolded"):
        return team_roles(user_coding_task(prompt), shape, 2)[0].reply_start

    bare = "# rotate a list by k places\ndef rotate(items, k):\n"
    assert helper_start(bare) == "```python\n# rotate a list by k places\ndef aux(items, k):\n"
    documented = 'import math\n\ndef area(r):\n    """Area of a circle."""\n'
    assert helper_start(documented) == "```python\n" + documented.replace("area(", "aux(")
    # a problem that already has a body is not continued: the contract's stub head instead,
    # which is where the default team's helper author always begins
    written = 'def rotate(items, k):\n    """Rotate."""\n    return items\n'
    stub = '```python\ndef aux(items, k):\n    """The core computation of `rotate`: Rotate."""\n'
    assert helper_start(written) == helper_start(written, "parallel") == stub
    assert helper_start(documented, "parallel").startswith("```python\ndef aux(r):\n")


def test_the_scaffolded_helper_sees_the_problem_posed_for_aux_with_its_prose_unchanged():
    """HumanEval/12's entry point is a word ("longest"): only its definition and calls are
    renamed, not "return the longest one" in the docstring."""
    assert team_roles(humaneval_task(12), "parallel", 2)[0].problem is None  # as posed
    helper = team_roles(humaneval_task(12), "scaffolded", 2)[0]
    assert "def aux(strings: List[str]) -> Optional[str]:" in helper.problem
    assert (
        "return the longest one" in helper.problem
        and ">>> aux(['a', 'bb', 'ccc'])" in helper.problem
    )
    assert "longest(" not in helper.problem


def test_only_the_kinds_of_work_branch_on_a_tasks_kind_and_form():
    """A kind of work answers for itself (agents/kinds/): the graph, the roles, `play`, the
    learner, the page and the store ask `work_of(task)` instead of reading a task's kind or form
    to decide what to do (the outline's guard that a task has one is the one exception)."""
    import pathlib
    import re

    from agents.kinds import DOCUMENT, FUNCTION, WRITING, work_of
    from agents.tasks import humaneval_task, longform_tasks, xsum_tasks

    root = pathlib.Path(__file__).resolve().parents[1]
    branch = re.compile(r"\b[a-z_]+\.(kind|form) (==|!=|in|not in) ")
    branching = [
        f"{path.relative_to(root)}: {line.strip()}"
        for folder in ("agents", "learner", "app", "store")
        for path in sorted((root / folder).rglob("*.py"))
        if "kinds" not in path.parts
        for line in path.read_text().splitlines()
        if branch.search(line)
    ]
    assert branching == ['agents/team/outline.py: if task.form != "longform":']
    assert work_of(humaneval_task(0)) is FUNCTION
    assert work_of(longform_tasks()[0]) is DOCUMENT
    assert work_of(xsum_tasks()[0]) is WRITING
