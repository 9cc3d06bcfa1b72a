"""The `coteam` command: help, doctor (both ways), and `serve` answering on 127.0.0.1."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agents.serving.server import free_port
from agents.tasks import humaneval_tasks


def coteam(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def test_help_lists_the_commands():
    result = coteam("--help")
    assert result.returncode == 0
    for command in ("setup", "serve", "doctor"):
        assert command in result.stdout


def test_doctor_on_an_empty_data_directory_names_each_problem(tmp_path):
    result = coteam(
        "doctor", env={"COTEAM_HOME": str(tmp_path), "COTEAM_VLLM_PYTHON": str(tmp_path / "nope")}
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("FAIL") and "no vLLM environment" in line for line in lines)
    assert any(line.startswith("FAIL") and "not converted yet" in line for line in lines)
    assert any(line.startswith("ok") and "writable" in line for line in lines)
    assert "problem(s) found" in lines[-1]


def test_doctor_names_a_vllm_environment_without_coteams_plugin(tmp_path):
    """A vLLM environment that lacks CoTeam's plugin (agents/serving/vllm_plugin) fails the check: on a
    CPU, base answers batched with adapter requests would take an adapter's weights. The
    environment is a real one whose only package is a vLLM distribution record."""
    venv = tmp_path / "vllm-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    record = Path(purelib) / "vllm-0.32.0.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    result = coteam("doctor", env={"COTEAM_HOME": str(tmp_path), "COTEAM_VLLM_PYTHON": str(python)})
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if "vLLM 0.32.0" in line]
    assert line.startswith("FAIL") and "lacks CoTeam's plugin" in line, line


def test_doctor_reports_an_unreachable_server():
    result = coteam("doctor", "--vllm-url", f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert "no healthy vLLM server at http://127.0.0.1:" in result.stdout


def test_unknown_model_is_a_clear_error():
    result = coteam("setup", "--model", "no-such-model")
    assert result.returncode == 1
    assert "unknown model 'no-such-model'" in result.stderr


def test_an_error_prints_its_notes_after_it(monkeypatch, capsys):
    """A failed training run's error carries how to go on (learner.run.execute_run adds it)."""
    from app import cli

    def fails(args):
        error = ValueError("the server refused")
        error.add_note("training run 3 failed after step 2; `coteam train --resume 3` continues")
        raise error

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: argparse.Namespace(
        command="train", verbose=False, func=fails))  # fmt: skip
    assert cli.main(["train"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "coteam train: error: the server refused",
        "training run 3 failed after step 2; `coteam train --resume 3` continues",
    ]


def test_a_resumed_run_refuses_config_flags_but_steps(tmp_path):
    """`--resume` keeps the run's config: a flag that would change it is an error, not ignored
    (the run is not touched: nothing is started)."""
    result = coteam("train", "--resume", "3", "--lr", "1e-5", "--seed", "2", "--steps", "9",
                    "--db", str(tmp_path / "coteam.db"))  # fmt: skip
    assert result.returncode == 1
    assert "only --steps can change: leave out --lr, --seed" in result.stderr, result.stderr
    assert not (tmp_path / "coteam.db").exists()


@pytest.mark.integration
def test_doctor_passes_with_the_real_server(vllm_server):
    result = coteam("doctor", "--vllm-url", vllm_server.url)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "all checks passed"


@pytest.mark.integration
def test_serve_answers_on_localhost_with_the_tabs(vllm_server, model_path, tmp_path):
    port = free_port()
    app = subprocess.Popen(
        [
            sys.executable, "-m", "app.cli", "serve", "--vllm-url", vllm_server.url,
            "--model", str(model_path), "--port", str(port), "--db", str(tmp_path / "c.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "COTEAM_ADMIN_PASSWORD"}
        | {"COTEAM_HOME": str(tmp_path)},
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert app.poll() is None, app.stdout.read()
            assert time.monotonic() < deadline, "the app did not answer"
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        config = httpx.get(f"{url}/config", timeout=10).text
        for tab in ("Co-write", "Co-code", "History", "Admin"):
            assert tab in config
    finally:
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=30)
    assert "admin tab stays locked" in app.stdout.read()  # no password configured
    assert vllm_server.healthy(), "stopping the app must not stop a server it did not start"


def test_check_runs_a_module_through_the_runner_and_reports_each_test(tmp_path):
    from tests.test_testrun import ATTACKS, KNOWS_THE_ANSWERS, TESTS

    (tmp_path / "tests.py").write_text(TESTS)
    (tmp_path / "good.py").write_text(KNOWS_THE_ANSWERS)
    (tmp_path / "forger.py").write_text(ATTACKS["forged_lines_then_exit"])
    result = coteam(
        "check",
        "--code",
        str(tmp_path / "good.py"),
        "--tests",
        str(tmp_path / "tests.py"),
        "--entry-point",
        "add",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["passed"], report["total"], report["entry_point"]) == (3, 3, "add")
    assert [t["passed"] for t in report["tests"]] == [True] * 3
    # the tests' check(candidate) names no function: the program may not choose one
    result = coteam(
        "check", "--code", str(tmp_path / "good.py"), "--tests", str(tmp_path / "tests.py")
    )
    assert result.returncode != 0 and "name it with --entry-point" in result.stderr
    (tmp_path / "tests.py").write_text(TESTS + "\ncheck(add)\n")
    result = coteam(
        "check", "--code", str(tmp_path / "forger.py"), "--tests", str(tmp_path / "tests.py")
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0 of 3 tests passed (add)"
    assert result.stdout.count("FAIL assert") == 3


@pytest.mark.parametrize("name", ["object_whose_sub_is_zero", "math_isclose_patched"])
def test_check_scores_a_program_that_forges_wrapped_tests_nothing(tmp_path, name):
    from tests.test_testrun import FORGERS, WRAPPED

    form, program = FORGERS[name]
    (tmp_path / "tests.py").write_text(WRAPPED[form])
    (tmp_path / "forger.py").write_text(program)
    result = coteam(
        "check", "--code", str(tmp_path / "forger.py"), "--tests", str(tmp_path / "tests.py"),
        "--entry-point", "add", "--json",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["passed"], report["total"]) == (0, 3), report


def test_check_takes_the_entry_point_from_the_tests_and_the_given_code_from_the_problem(
    tmp_path, capsys
):
    """A program that defines `abs` first cannot become the function under test (HumanEval/2),
    and with --given a stub of the problem's own encode_cyclic is not the one the tests call
    (HumanEval/38)."""
    from app.cli import main

    tasks = humaneval_tasks()
    (tmp_path / "tests.py").write_text(tasks[2].tests + "\ncheck(truncate_number)\n")
    (tmp_path / "abs.py").write_text(
        "def abs(x):\n    return x % 1 if x > 1 else 0.0\n\n"
        "def truncate_number(number):\n    return 0\n"
    )
    args = ["check", "--code", str(tmp_path / "abs.py"), "--tests", str(tmp_path / "tests.py")]
    assert main([*args, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["entry_point"], report["passed"], report["total"]) == ("truncate_number", 0, 3)
    assert main([*args, "--entry-point", "abs"]) == 1
    assert "is a builtin's name" in capsys.readouterr().err
    task = tasks[38]
    (tmp_path / "tests38.py").write_text(task.tests)
    (tmp_path / "given.py").write_text(task.preamble)
    (tmp_path / "stub.py").write_text(
        "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    )
    args = ["check", "--code", str(tmp_path / "stub.py"), "--tests", str(tmp_path / "tests38.py")]
    assert (
        main([*args, "--entry-point", "decode_cyclic", "--given", str(tmp_path / "given.py")]) == 1
    )
    assert capsys.readouterr().out.splitlines()[-1] == "0 of 1 tests passed (decode_cyclic)"


def test_check_refuses_unreadable_input_with_a_clear_message(tmp_path, capsys):
    from app.cli import main

    (tmp_path / "latin1.py").write_bytes(b"def f():\n    return '\xe9'\n")
    (tmp_path / "tests.py").write_text("assert f() == 1\n")
    assert (
        main(
            ["check", "--code", str(tmp_path / "latin1.py"), "--tests", str(tmp_path / "tests.py")]
        )
        == 1
    )
    assert "cannot read the code file" in capsys.readouterr().err
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert (
        main(
            ["check", "--code", str(tmp_path / "broken.py"), "--tests", str(tmp_path / "tests.py")]
        )
        == 1
    )
    assert "the code does not parse: line 1" in capsys.readouterr().err


def test_each_vllm_server_gets_a_fresh_api_key_and_no_admin_password(monkeypatch):
    from agents.serving.server import ServerConfig, VLLMServer

    monkeypatch.setenv("COTEAM_ADMIN_PASSWORD", "hunter2")
    first, second = VLLMServer(ServerConfig(model="m")), VLLMServer(ServerConfig(model="m"))
    environment = first.environment()
    assert "COTEAM_ADMIN_PASSWORD" not in environment
    assert environment["VLLM_API_KEY"] == first.api_key != second.api_key
    assert len(first.api_key) >= 32


def test_a_server_without_coteams_plugin_is_asked_for_by_name(monkeypatch):
    """Benchmarks measure CoTeam's vLLM plugin against vLLM's own ops: `coteam_plugin=False`
    starts vLLM with no plugins; by default the environment leaves vLLM to load them all."""
    from agents.serving.server import ServerConfig, VLLMServer

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert "VLLM_PLUGINS" not in VLLMServer(ServerConfig(model="m")).environment()
    without = VLLMServer(ServerConfig(model="m", coteam_plugin=False)).environment()
    assert without["VLLM_PLUGINS"] == "none"


def test_the_server_computes_in_float32_on_a_cpu_without_native_bf16(monkeypatch, tmp_path):
    """vLLM's CPU backend is slow on a bf16 model without AVX512-BF16/AMX: the server is then
    told float32; on a GPU or a bf16 CPU the model's own type, and an explicit dtype wins."""
    import agents.serving.server as server
    from agents.serving.server import ServerConfig, VLLMServer

    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setattr(server, "has_nvidia_gpu", lambda: False)

    def dtype(config: ServerConfig) -> str | None:
        cmd = VLLMServer(config).command()
        return cmd[cmd.index("--dtype") + 1] if "--dtype" in cmd else None

    monkeypatch.setattr(server, "cpu_has_bf16", lambda: False)
    assert dtype(ServerConfig(model="m", python=python)) == "float32"
    assert dtype(ServerConfig(model="m", python=python, dtype="bfloat16")) == "bfloat16"
    monkeypatch.setattr(server, "cpu_has_bf16", lambda: True)
    assert dtype(ServerConfig(model="m", python=python)) is None
    monkeypatch.setattr(server, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(server, "cpu_has_bf16", lambda: False)
    assert dtype(ServerConfig(model="m", python=python)) is None


def test_the_server_applies_lora_to_the_learners_modules_and_refuses_an_adapter_of_others(
    tmp_path,
):
    """Every module the server applies LoRA to costs every adapter request time, so it applies
    it to the modules the learner trains; a PEFT folder trained on another is refused before
    the server is asked (which would serve it without those weights)."""
    from agents.serving.policy import PolicyClient, PolicyError
    from agents.serving.server import ServerConfig, VLLMServer
    from learner.config import MAGRPOConfig

    python = tmp_path / "python"
    python.write_text("")
    cmd = VLLMServer(ServerConfig(model="m", python=python)).command()
    at = cmd.index("--lora-target-modules") + 1
    assert tuple(cmd[at : at + 4]) == MAGRPOConfig().target_modules
    folder = tmp_path / "mlp-lora"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"target_modules": ["q_proj", "up_proj"]})
    )
    client = PolicyClient("http://127.0.0.1:9", api_key="k")  # nothing listens: never asked
    with pytest.raises(PolicyError, match="trains up_proj: the server applies LoRA to q_proj"):
        client.load_adapter("agent1-v9", str(folder))
    assert client.loaded == {}


def test_adapters_list_json_gives_each_version_its_server_name_and_source(tmp_path):
    import store
    from store import register_adapter

    db_path = tmp_path / "c.db"
    empty = coteam("adapters", "list", "--json", "--db", str(db_path))
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout) == []
    with store.open_db(db_path) as db:
        run_id = store.start_training_run(db, "manual")
        register_adapter(db, 0, str(tmp_path / "a0"), training_run_id=run_id)
        register_adapter(db, 0, str(tmp_path / "a0v2"), parent=1)
        register_adapter(db, 1, str(tmp_path / "a1"))
        store.activate_adapter(db, 0, 2)
    result = coteam("adapters", "list", "--json", "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    assert [(v["agent"], v["version"], v["state"], v["name"], v["source"]) for v in listed] == [
        (1, 1, "candidate", "agent1-v1", "trained here"),
        (1, 2, "active", "agent1-v2", "registered"),
        (2, 1, "candidate", "agent2-v1", "registered"),
    ]
    assert listed[0]["training_run"] == run_id and listed[1]["parent_version"] == 1


def test_adapters_add_registers_a_kept_folder_as_a_candidate_and_refuses_what_cannot_serve(
    tmp_path,
):
    """A candidate kept with a run's record (or another installation's version) comes back as the
    agent's next version of its kind, a candidate, copied into the database's own folder; a
    folder of another rank or of modules the server does not adapt is refused, nothing added."""
    db_path = tmp_path / "c.db"

    def folder(name: str, config: dict) -> str:
        path = tmp_path / name
        path.mkdir()
        (path / "adapter_config.json").write_text(json.dumps(config))
        (path / "adapter_model.safetensors").write_bytes(b"weights")
        return str(path)

    kept = folder("kept", {"r": 8, "target_modules": ["q_proj", "v_proj"]})
    added = coteam("adapters", "add", "--agent", "2", "--kind", "class", "--path", kept,
                   "--db", str(db_path))  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "agent2-v1 (class) is a candidate" in added.stdout
    for config, says in [
        ({"r": 16, "target_modules": ["q_proj"]}, "has LoRA rank 16: CoTeam serves rank 8"),
        ({"r": 8, "target_modules": ["q_proj", "up_proj"]}, "the server applies LoRA to"),
    ]:
        bad = folder(f"bad{config['r']}{len(config['target_modules'])}", config)
        refused = coteam("adapters", "add", "--agent", "2", "--path", bad, "--db", str(db_path))
        assert refused.returncode == 1 and says in refused.stderr, refused.stderr
    listed = json.loads(coteam("adapters", "list", "--json", "--db", str(db_path)).stdout)
    assert [(v["name"], v["kind"], v["state"], v["source"]) for v in listed] == [
        ("agent2-v1", "class", "candidate", "registered")
    ]
    assert listed[0]["path"] != kept
    assert (Path(listed[0]["path"]) / "adapter_model.safetensors").read_bytes() == b"weights"


def test_every_command_the_readme_names_exists_and_the_readme_stays_a_short_guide():
    import re
    from pathlib import Path

    from app.cli import build_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    named = set(re.findall(r"`coteam ([a-z]+)", readme))
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert named and named <= set(commands.choices), named - set(commands.choices)
    assert len(readme.split()) <= 1200  # a user's guide; run records live in docs/


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["check", "--code", "/nope.py", "--tests", "/nope.py"], "cannot read the code file"),
        (["episode", "--task", "coding", "--problem", "999"], "no HumanEval problem"),
        (["episode", "--task", "writing", "--prompt-file", "/nope"], "No such file"),
        (["train", "--task", "coding", "--steps", "-1"], "at least 1 step"),
        (["train", "--from", "agent1"], "'agent1' is not a version's name (agentK-vN)"),
        (["learner", "--every-minutes", "5", "--from", "agent1-v2"], "--from starts one run"),
        (["export", "--format", "jsonl", "--out", "/proc/nope"], "No such file"),
        (["setup", "--model", "/nope"], "unknown model"),
        (
            ["adapters", "promote", "--agent", "4", "--version", "9"],
            "agent4 has no adapter version",
        ),
        (["adapters", "add", "--agent", "1", "--path", "/nope"], "not a PEFT adapter folder"),
        (
            ["adapters", "rollback", "--agent", "1", "--kind", "writing"],
            "no active writing adapter",
        ),
    ],
)
def test_a_users_bad_input_is_one_line_that_says_what_is_wrong(tmp_path, command, says):
    result = coteam(*command, env={"COTEAM_HOME": str(tmp_path)}, timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    assert says in result.stderr.strip().splitlines()[-1], result.stderr


def test_the_managed_servers_key_is_in_a_file_only_its_user_reads_while_it_runs(
    tmp_path, monkeypatch, capsys
):
    from types import SimpleNamespace

    from app.commands_serve import key_file

    monkeypatch.setenv("COTEAM_HOME", str(tmp_path))
    client = SimpleNamespace(base_url="http://127.0.0.1:8123", api_key="secret-key")
    with key_file(client, vllm_url=None):
        path = tmp_path / "vllm-8123.key"
        assert path.read_text() == "secret-key"
        assert path.stat().st_mode & 0o777 == 0o600
        said = capsys.readouterr().out
        assert f"COTEAM_VLLM_API_KEY=$(cat {path}) coteam episode --vllm-url" in said
        assert "secret-key" not in said
    assert not path.exists()
    with key_file(client, vllm_url="http://elsewhere:8000"):  # your own server: nothing written
        assert list(tmp_path.iterdir()) == []
