"""Load and fault test of the whole app: simulated users at once run episodes and rate them
through the HTTP API of a real `coteam serve` (Gradio's API, called with gradio_client, loopback
only), while the managed vLLM server is killed once in the middle; then the store is read back.

Each user is its own browser session. It runs one Co-code or Co-write episode (users alternate)
on a curated task, and when the page says the episode finished it rates it twice (thumbs up on
the result, a 1-5 score with a comment). When the page refuses a run (the model server is down,
say), the user waits and tries again, up to --attempts times, as a person would.

Reported, from the users' side and from the SQLite file:
  completed   episodes that finished and were rated
  failed      runs the page refused or episodes that failed, each with the page's explanation
  lost        a confirmed rating missing from the store, an episode left 'running', a run the
              page neither finished nor explained
  unexplained an exception from the API, or a page answer that is neither a result nor a warning

Usage: python bench/load.py [--users 20] [--max-tokens 48] [--kill-after 15] [--no-kill]
                            [--attempts 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import psutil  # noqa: E402
from gradio_client import Client  # noqa: E402

import store  # noqa: E402
from agents.serving.server import free_port  # noqa: E402

SAVED = re.compile(r"✓ Saved rating #(\d+): .* \(episode (\d+)\)")
PROBLEMS = ["0", "2", "4", "7", "12"]  # Co-code: curated HumanEval problems
REQUESTS = [  # Co-write: one's own article, section by section (the default outline)
    "A short guide to brewing good coffee at home",
    "Why every program deserves tests",
    "How bicycles stay upright",
    "What a city needs to be walkable",
]


def start_app(db_path: Path, port: int, log_path: Path, agents: int) -> subprocess.Popen:
    """`coteam serve` with its own database, in its own process group; returns once the page
    answers."""
    command = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db", str(db_path)]
    command += ["--agents", str(agents)]
    with open(log_path, "wb") as log:
        app = subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parent.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if app.poll() is not None:
            raise SystemExit(f"coteam serve exited with {app.returncode}; see {log_path}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                return app
        except httpx.HTTPError:
            pass
        time.sleep(2)
    os.killpg(app.pid, signal.SIGTERM)
    raise SystemExit(f"the app did not answer in 900 s; see {log_path}")


def vllm_leader(app_pid: int) -> psutil.Process | None:
    """The managed vLLM server's group leader: the app's child that runs `agents/serving/guard.py`."""
    for child in psutil.Process(app_pid).children(recursive=True):
        if any(part.endswith("serving/guard.py") for part in child.cmdline()):
            return child
    return None


def kill_vllm_later(app_pid: int, after_s: float, events: dict) -> None:
    """Kill the model server once, `after_s` seconds into the load, as a crash would."""
    time.sleep(after_s)
    leader = vllm_leader(app_pid)
    if leader is None:
        events["kill"] = "no vLLM process found"
        return
    leader.kill()
    events["killed_at_s"] = round(time.monotonic() - events["t0"], 1)
    events["kill"] = f"SIGKILL to vLLM pid {leader.pid}"


def form(client: Client, tab: str, user: int, max_tokens: int) -> dict:
    """The run's form as the page would send it (a curated problem on Co-code, one's own article
    on Co-write; a team of 2, greedy), keyed by the API's parameter names, found from the boxes'
    labels; the rest keep their defaults."""
    if tab == "cocode":
        task = {"Task": "humaneval", "Problem": PROBLEMS[user % len(PROBLEMS)]}
    else:
        task = {"Task": "own_longform", "Your request": REQUESTS[user % len(REQUESTS)]}
    by_label = task | {
        "Team shape": "parallel",
        "Team size": 2,
        "Tokens per agent call": max_tokens,
        "Temperature (0: greedy)": 0.0,
    }
    endpoint = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    return {
        p["parameter_name"]: by_label.get(
            p["label"], p["parameter_default"] if p["parameter_has_default"] else None
        )  # a box without a default is empty in the page too (the item list of another source)
        for p in endpoint[f"/{tab}_run"]["parameters"]
    }


def warning_in(outputs) -> str | None:
    """The page's explanation among a run's final outputs: a refusal ("⚠ …") or a failed
    episode ("✗ episode N failed …"), if it shows one."""
    for value in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        if isinstance(value, str) and ("⚠" in value or "✗" in value):
            return value.strip()
    return None


def user(url: str, index: int, args, t0: float) -> dict:
    """One simulated person: run an episode, retry when the page refuses, rate what finished."""
    tab = ("cocode", "cowrite")[index % 2]
    record = {"user": index, "tab": tab, "attempts": [], "ratings": [], "unexplained": []}
    try:
        client = Client(url, verbose=False)
        record["session"] = client.session_hash
        run_form = form(client, tab, index, args.max_tokens)
        for _ in range(args.attempts):
            start = time.monotonic()
            outputs = client.predict(**run_form, api_name=f"/{tab}_run")
            attempt = {"at_s": round(start - t0, 1), "seconds": round(time.monotonic() - start, 1)}
            thumbs = client.predict(api_name=f"/{tab}_thumbs_up")
            if isinstance(thumbs, tuple | list):  # the message, then the thumbs' pressed states
                thumbs = thumbs[0]
            if SAVED.search(thumbs):  # the page let the user rate: the episode finished
                attempt["outcome"] = "completed"
                record["attempts"].append(attempt)
                record["ratings"].append(thumbs)
                record["ratings"].append(
                    client.predict(
                        score="4", comment=f"load user {index}", api_name=f"/{tab}_score"
                    )
                )
                break
            attempt["outcome"] = "failed"
            attempt["why"] = warning_in(outputs)
            record["attempts"].append(attempt)
            if attempt["why"] is None:
                record["unexplained"].append(f"neither a result nor a warning: {outputs!r:.300}")
                break
            time.sleep(args.retry_wait)
    except Exception as e:  # anything the API raises is an unexplained error
        record["unexplained"].append(f"{type(e).__name__}: {e}")
    return record


def read_back(db_path: Path, records: list[dict]) -> dict:
    """Compare what the users were told with what the store holds."""
    confirmed = {}
    for record in records:
        for message in record["ratings"]:
            matches = list(SAVED.finditer(message or ""))  # a score with a comment is two rows
            confirmed |= {int(m[1]): int(m[2]) for m in matches}
            if not matches:
                record["unexplained"].append(f"rating not confirmed: {message!r:.200}")
    with store.open_db(db_path) as db:
        stored = {r["id"]: r["episode_id"] for r in db.query("select id, episode_id from ratings")}
        statuses = {
            r["status"]: r["n"]
            for r in db.query("select status, count(*) n from episodes group by status")
        }
        errors = [r["error"] for r in db.query("select error from episodes where status='failed'")]
    lost_ratings = [rid for rid, eid in confirmed.items() if stored.get(rid) != eid]
    return {
        "ratings_confirmed": len(confirmed),
        "ratings_stored": len(stored),
        "ratings_lost": len(lost_ratings),
        "episodes_by_status": statuses,
        "episodes_left_running": statuses.get("running", 0),
        "episode_errors": sorted({(e or "")[:160] for e in errors}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=20, help="simulated users at once")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per agent call")
    parser.add_argument("--kill-after", type=float, default=15.0, help="seconds into the load")
    parser.add_argument("--no-kill", action="store_true", help="leave the model server alone")
    parser.add_argument("--attempts", type=int, default=20, help="runs a user tries at most")
    parser.add_argument("--retry-wait", type=float, default=30.0, help="seconds between tries")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.users < 1 or args.attempts < 1:
        parser.error("--users and --attempts must be >= 1")

    with tempfile.TemporaryDirectory(prefix="coteam-bench-load-") as tmp:
        db_path, log_path, port = Path(tmp) / "coteam.db", Path(tmp) / "serve.log", free_port()
        print(f"starting coteam serve on 127.0.0.1:{port} (log {log_path})", flush=True)
        app = start_app(db_path, port, log_path, agents=2)
        try:
            url, events = f"http://127.0.0.1:{port}/", {"t0": time.monotonic()}
            if not args.no_kill:
                threading.Thread(
                    target=kill_vllm_later,
                    args=(app.pid, args.kill_after, events),
                    daemon=True,
                ).start()
            with ThreadPoolExecutor(args.users) as pool:
                futures = [pool.submit(user, url, i, args, events["t0"]) for i in range(args.users)]
                records = [f.result() for f in futures]
            seconds = round(time.monotonic() - events["t0"], 1)
        finally:
            os.killpg(app.pid, signal.SIGTERM)
            app.wait(timeout=60)
            log_text = log_path.read_text(errors="replace")
            tracebacks = log_text.count("Traceback")
            server_lines = [  # the watchdog's account of the kill and the restart
                line[:200]
                for line in log_text.splitlines()
                if re.search(r"vLLM (died|healthy|starting)|restarting vLLM", line)
            ]
        figures = read_back(db_path, records)

    completed = sum(any(a["outcome"] == "completed" for a in r["attempts"]) for r in records)
    refusals = [a["why"] for r in records for a in r["attempts"] if a["outcome"] == "failed"]
    unexplained = [u for r in records for u in r["unexplained"]]
    never = [r["user"] for r in records if not r["attempts"] and not r["unexplained"]]
    figures |= {
        "users": args.users,
        "seconds": seconds,
        "kill": events.get("kill", "none"),
        "killed_at_s": events.get("killed_at_s"),
        "users_completed": completed,
        "failed_attempts": len(refusals),
        "failure_messages": dict(Counter(re.sub(r"\d+(\.\d+)?", "N", m)[:200] for m in refusals)),
        "unexplained": unexplained,
        "users_without_answer": never,
        "tracebacks_in_app_log": tracebacks,
        "server_log": server_lines,
        "attempts": [a | {"user": r["user"]} for r in records for a in r["attempts"]],
    }
    lost = figures["ratings_lost"] + figures["episodes_left_running"] + len(never)
    killed = "" if figures["killed_at_s"] is None else f" at {figures['killed_at_s']} s"
    print(
        f"{args.users} users, {seconds} s, vLLM: {figures['kill']}{killed}\n"
        f"  completed   {completed} users ({figures['episodes_by_status']} episodes in the store)\n"
        f"  failed      {len(refusals)} attempts, each explained by the page:\n"
        + "".join(f"      {n:4d} ×  {m}\n" for m, n in figures["failure_messages"].items())
        + f"  ratings     {figures['ratings_confirmed']} confirmed, "
        f"{figures['ratings_stored']} stored, {figures['ratings_lost']} lost\n"
        f"  lost        {lost} (ratings lost + episodes left running + users with no answer)\n"
        + "".join(f"  server      {line}\n" for line in server_lines)
        + f"  unexplained {len(unexplained)}"
        + "".join(f"\n                {u[:200]}" for u in unexplained)
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(1 if lost or unexplained else 0)


if __name__ == "__main__":
    main()
