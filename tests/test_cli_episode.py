"""`coteam episode`'s console output: one agent's tokens live at a time, none lost or mixed."""

import io
import re

from agents.tasks import humaneval_task
from agents.team.episode import run_episode
from agents.team.graph import TeamSettings
from app.cli import build_parser
from app.commands_episode import EpisodePrinter
from tests.scripted import ScriptedPolicy, adapters, agent_of


def test_printer_shows_each_agents_text_whole_under_its_header(tmp_path):
    def reply(request):
        if request.messages[-1]["role"] == "assistant":  # the entry author's begun reply
            return " (\n```"  # `return (` does not parse: the turn is not done
        agent = agent_of(request)
        return f"```python\ndef f{agent}():\n    return '{'abcdefghij' * (agent + 2)}'\n```"

    out = io.StringIO()
    result = run_episode(
        humaneval_task(0),
        ScriptedPolicy(reply, delay_s=0.05),
        TeamSettings(agents=3, turns=2, adapters=adapters(3)),
        db=tmp_path / "c.db",
        on_event=EpisodePrinter(out),
    )
    text = out.getvalue()
    assert text.startswith(f"episode {result.episode_id}: parallel team (helper, helper2, entry)")
    for step in result.steps:
        header = f"--- agent {step['agent'] + 1} ({step['role']}), turn {step['turn'] + 1}\n"
        assert header + step["text"] + "\n" in text  # streamed pieces arrive whole, in order
    assert len(re.findall(r"^--- agent", text, re.M)) == len(result.steps)
    assert "== turn 1: not passed" in text and "feedback to agent 1:" in text
    assert "== turn 2: not passed" in text


def test_episode_arguments():
    args = build_parser().parse_args(
        ["episode", "--task", "writing", "--prompt", "Hi", "--shape", "sequential_pipeline",
         "--agents", "3", "--adapter", "1=agent1-v2", "--json"]
    )  # fmt: skip
    assert (args.task, args.prompt, args.shape, args.agents) == (
        "writing",
        "Hi",
        "sequential_pipeline",
        3,
    )
    assert args.adapter == ["1=agent1-v2"] and args.json and args.turns == 1


def test_a_bad_task_is_a_clean_error_before_any_server_starts(tmp_path, capsys):
    from app.cli import main

    code = main(["episode", "--task", "coding", "--problem", "999", "--db", str(tmp_path / "x.db")])
    assert code == 1
    assert "coteam episode: error: no HumanEval problem '999'" in capsys.readouterr().err
    tests = tmp_path / "t.py"
    tests.write_text("assert f(1) == 1\n")
    code = main(["episode", "--task", "writing", "--prompt", "Hi", "--tests-file", str(tests)])
    assert code == 1 and "tests go with" in capsys.readouterr().err
    code = main(["episode", "--task", "coding", "--problem", "0", "--shape", "single_incremental"])
    assert code == 1 and "a class team's shape: use --task class" in capsys.readouterr().err
