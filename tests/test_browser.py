"""The app in real Chromium (Playwright, the system's /usr/bin/chromium) against the real vLLM
server: a co-code episode end to end and its ratings in the database, a co-write episode, an A/B
vote, the history, the admin tab refused and allowed, and 50 votes for a taste then a real
"Retrain now" whose new adapter learnt from them, is shown with its change, and serves. Screenshots of each tab go to test-output/screenshots/ at the repository root."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

import store
from agents.serving.models import model_provenance
from agents.serving.server import free_port
from agents.tasks import DEFAULT_OUTLINE
from app.cowork_choices import CLASS_SHAPE_LABELS, SHAPE_LABELS
from learner.registry import CARD, SHIPPED
from tests.conftest import adapters_as_found

pytestmark = pytest.mark.integration

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=30_000)  # a page event on a busy 2-core machine can take seconds

REPO = Path(__file__).resolve().parent.parent
SCREENSHOTS = REPO / "test-output" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip
PASSWORD = "correct horse battery staple"
EPISODE_TIMEOUT_MS = 300_000  # two agents on a shared 2-core CPU
FINISHED = re.compile(r"✓ finished|⚠ finished|✗")

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"no Chromium at {CHROMIUM}: run `scripts/setup.sh --browser`", allow_module_level=True
    )


class App:
    """`coteam serve` in a subprocess on a free port, with its own data folder and database."""

    def __init__(self, vllm_url: str, model: Path, home: Path, password: str | None):
        self.home, self.db = home, home / "coteam.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "app.log"
        env = {**os.environ, "COTEAM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
        env.pop("COTEAM_ADMIN_PASSWORD", None)
        if password:
            env["COTEAM_ADMIN_PASSWORD"] = password
        command = [
            sys.executable, "-m", "app.cli", "serve", "--vllm-url", vllm_url, "--model",
            str(model), "--port", str(self.port), "--db", str(self.db),
        ]  # fmt: skip
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 180
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the app did not answer:\n" + self.log.read_text()
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def app(vllm_server, policy, model_path, tmp_path_factory):
    with adapters_as_found(vllm_server, policy):
        app = App(vllm_server.url, model_path, tmp_path_factory.mktemp("home"), PASSWORD)
        yield app
        app.stop()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(app, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(30_000)
    page.goto(app.url)
    page.locator("#cowrite-run").wait_for()
    yield page
    page.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def set_number(page, elem_id: str, value) -> None:
    """Type into a number box or a slider's number box, as a person would."""
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Tab")


def choose_shape(page, tab: str, shape: str) -> None:
    """Pick a team shape from the tab's dropdown, as a person would."""
    page.locator(f"#{tab}-shape input").click()
    page.get_by_role("option", name=SHAPE_LABELS[shape]).click()


def code_text(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} .cm-content").inner_text()


def wait_for_episode(page, tab: str) -> str:
    """Wait until the tab's status says the episode ended; return that line."""
    status = page.locator(f"#{tab}-status")
    expect(status).to_contain_text(FINISHED, timeout=EPISODE_TIMEOUT_MS)
    expect(status).not_to_contain_text("scoring", timeout=120_000)  # reward and tests come last
    return status.inner_text()


def ratings_of(db: Path, episode_id: int) -> list[dict]:
    with store.open_db(db) as database:
        return store.get_episode(database, episode_id)["ratings"]


def episode_id_in(status: str) -> int:
    return int(re.search(r"episode (\d+)", status).group(1))


# how many lines an element's text takes on screen
LINES = """e => {
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT), tops = new Set();
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (!node.textContent.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const box of range.getClientRects()) tops.add(Math.round(box.top));
    }
    return tops.size;
}"""


# -- the tests -------------------------------------------------------------------------------


def test_co_code_episode_streams_and_its_ratings_land_in_the_database(app, page):
    open_tab(page, "Co-code")
    # one agent is served by default, with the held-out figure it was chosen by
    expect(page.locator("#cocode-served")).to_contain_text("Served by default: one agent")
    expect(page.locator("#cocode-served")).to_contain_text("0.906")
    page.locator("#cocode-roles").get_by_text("Roles: the agents' instructions").click()
    expect(page.locator("#cocode-role-0 textarea")).to_have_value(re.compile("."))
    expect(page.locator("#cocode-role-1 textarea")).to_be_hidden()
    choose_shape(page, "cocode", "parallel")  # the team, one choice away
    expect(page.locator("#cocode-role-0 textarea")).to_have_value(re.compile("helper-function"))
    expect(page.locator("#cocode-role-1 textarea")).to_have_value(re.compile("main-function"))
    set_number(page, "cocode-max-tokens", 256)
    set_number(page, "cocode-temperature", 0)
    page.locator("#cocode-run").click()
    # streaming: an agent's pane shows text while the episode still runs
    expect(page.locator("#cocode-status")).to_contain_text("Running", timeout=60_000)
    expect(page.locator("#cocode-pane-1 .cm-content")).not_to_be_empty(timeout=120_000)
    status = wait_for_episode(page, "cocode")
    assert "✗" not in status, status
    assert re.search(r"\d+\.\d s · \d+ tokens", status), status  # time and tokens shown
    episode_id = episode_id_in(status)
    assert "def has_close_elements" in code_text(page, "cocode-result")
    expect(page.locator("#cocode-tests-view")).to_contain_text(re.compile(r"Tests: \d+ of \d+"))
    expect(page.locator("#cocode-pane-0")).to_contain_text("helper aux")
    screenshot(page, "co-code")

    page.locator("#cocode-agent-0-up").click()
    expect(page.locator("#cocode-rating-status")).to_contain_text("Saved rating")
    pressed = re.compile(r"\bprimary\b")  # a saved thumb stays pressed, its opposite not
    expect(page.locator("#cocode-agent-0-up")).to_have_class(pressed)
    expect(page.locator("#cocode-agent-0-down")).not_to_have_class(pressed)
    page.locator("#cocode-result-up").click()
    expect(page.locator("#cocode-rating-status")).to_contain_text("thumbs up on the result")
    page.locator("#cocode-score label", has_text="4").click()
    page.locator("#cocode-comment textarea").fill("Uses the helper; clear names.")
    page.locator("#cocode-save-score").click()
    expect(page.locator("#cocode-rating-status")).to_contain_text("your comment")
    page.locator("#cocode-score label", has_text="5").click()  # a second score replaces the first
    page.locator("#cocode-save-score").click()
    expect(page.locator("#cocode-rating-status")).to_contain_text("replaces your earlier")
    screenshot(page, "co-code-rated")

    got = [(r["kind"], r["agent"], r["value"], r["text"]) for r in ratings_of(app.db, episode_id)]
    assert got == [
        ("thumbs", 0, 1.0, None),
        ("thumbs", None, 1.0, None),
        ("score", None, 5.0, None),  # the second score, in place of the first
        ("comment", None, None, "Uses the helper; clear names."),
    ]
    with store.open_db(app.db) as db:
        episode = store.get_episode(db, episode_id)
    assert episode["status"] == "ok" and episode["task"]["source_id"] == "HumanEval/0"
    assert len(episode["turns"]) == 2 and episode["reward"] is not None


def test_co_write_episode_with_a_prompt_of_ones_own(app, page):
    page.locator("#cowrite-run").click()  # nothing typed yet: a clear message, nothing runs
    expect(page.locator("#cowrite-status")).to_contain_text("the prompt is empty")
    page.locator("#cowrite-prompt textarea").fill("x" * 9000)
    page.locator("#cowrite-run").click()
    expect(page.locator("#cowrite-status")).to_contain_text("the limit is 8,000")

    # the first choice: a plain request written a section per writer, at the default tokens
    expect(page.locator("#cowrite-sections")).to_be_visible()
    page.locator("#cowrite-size label", has_text="4").click()
    page.locator("#cowrite-prompt textarea").fill("A 4-section explainer of how ocean tides work")
    page.locator("#cowrite-run").click()
    status = wait_for_episode(page, "cowrite")
    assert "✗" not in status and "token limit" not in status, status  # no writer cut off
    result = page.locator("#cowrite-result textarea").input_value()
    headings = [h for h, _, _ in DEFAULT_OUTLINE]
    assert [line.removeprefix("## ") for line in result.splitlines() if line.startswith("## ")] == (
        headings
    )  # each writer's part under its own heading, in order, each once
    expect(page.locator("#cowrite-rating-panel")).to_be_visible()
    screenshot(page, "co-write")
    with store.open_db(app.db) as db:
        episode = store.get_episode(db, episode_id_in(status))
    assert episode["task"]["kind"] == "writing" and episode["final_output"] == result
    assert episode["task"]["metadata"]["form"] == "longform" and len(episode["roles"]) == 4


def test_ab_mode_runs_two_teams_side_by_side_and_records_the_vote(app, page):
    open_tab(page, "Co-code")
    page.locator("#cocode-mode label", has_text="A/B").click()
    set_number(page, "cocode-max-tokens", 192)
    set_number(page, "cocode-temperature", 0)
    page.locator("#cocode-run").click()
    expect(page.locator("#cocode-status")).to_contain_text(
        re.compile("Both teams are done|A team failed"), timeout=EPISODE_TIMEOUT_MS
    )
    # team A is what the page serves (one agent, by the held-out figures), team B the team
    expect(page.locator("#cocode-ab-status-a")).to_contain_text("single")
    expect(page.locator("#cocode-ab-status-b")).to_contain_text("parallel")
    page.locator("#cocode-vote-tie").click()
    expect(page.locator("#cocode-vote-status")).to_contain_text("Saved rating")
    screenshot(page, "co-code-ab")
    left, right = map(
        int, re.search(r"\((\d+) vs (\d+)\)", page.locator("#cocode-vote-status").inner_text()).groups()
    )  # fmt: skip
    [vote] = ratings_of(app.db, left)
    assert (vote["kind"], vote["choice"], vote["other_episode_id"]) == ("pairwise", "tie", right)


def test_history_lists_filters_and_opens_an_episode(app, page):
    open_tab(page, "History")
    page.locator("#history-refresh").click()
    expect(page.locator("#history-page")).to_contain_text("episode")
    expect(page.locator("#history-table")).to_contain_text("finished")  # the live page's word
    width = page.viewport_size["width"]
    for column in ("status", "reward", "score"):  # every column on screen, none scrolled off
        box = page.locator("#history-table th", has_text=column).first.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, (column, box, width)
    for header in page.locator("#history-table th").all():  # no word broken, no header wrapped
        assert header.evaluate(LINES) == 1, header.inner_text()
    status = page.locator("#history-table td", has_text="finished").first
    assert status.evaluate(LINES) <= 2, status.inner_text()  # "finished, not passed" may wrap
    with store.open_db(app.db) as db:  # the episodes the tests above ran
        newest = store.list_episodes(db, limit=1)[0]["id"]
    set_number(page, "history-episode", newest)
    page.locator("#history-open").click()
    detail = page.locator("#history-detail")
    expect(detail).to_contain_text(f"Episode {newest}")
    expect(detail).to_contain_text("What the agent saw")
    page.locator("#history-detail summary").first.click()  # unfold one observation
    expect(detail).to_contain_text(re.compile("Problem:|Request:"))
    for block in page.locator("#history-detail pre").all():  # long lines wrap, nothing scrolls
        assert block.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    screenshot(page, "history")


def test_history_offers_two_stored_answers_to_rate_and_records_the_vote(app, page):
    said = "The minister said on Tuesday that the bridge would reopen in May, after repairs."
    goals = "Two late goals gave the visitors a 2-1 win in a cup tie played in heavy rain."
    with store.open_db(app.db) as db:  # the newest task: two different stored answers
        task = store.create_task(db, "writing", "Say what happened at the bridge.")
        answers = []
        for text in (said, goals):
            answers.append(store.start_episode(db, task, shape="parallel", roles=["a", "b"]))
            store.finish_episode(db, answers[-1], text)
    open_tab(page, "History")
    page.locator("#rate-show").click()
    expect(page.locator("#rate-task")).to_contain_text(f"Task #{task}")
    expect(page.locator("#rate-task")).to_contain_text("picked as the")  # why these two
    expect(page.locator("#rate-left")).to_contain_text("the bridge would reopen")
    expect(page.locator("#rate-right")).to_contain_text("Two late goals")
    screenshot(page, "history-rate-queue")
    page.locator("#rate-vote-right").click()
    expect(page.locator("#rate-status")).to_contain_text("Saved rating")
    [vote] = ratings_of(app.db, answers[0])
    assert (vote["kind"], vote["choice"]) == ("pairwise", "right")
    assert vote["other_episode_id"] == answers[1]
    assert vote["rater"].startswith("ip:")  # the server's identity for the browser
    expect(page.locator("#rate-task")).not_to_contain_text(f"Task #{task}")  # the next pair


def test_co_code_runs_a_class_its_methods_divided_and_history_keeps_it(app, page):
    open_tab(page, "Co-code")
    page.locator("#cocode-source label", has_text="A ClassEval class").click()
    # one agent is served for classes by the card's figures, and says so; the team one choice away
    expect(page.locator("#cocode-served")).to_contain_text("0.249")
    expect(page.locator("#cocode-roles")).to_be_hidden()  # one fixed instruction for every agent
    page.locator("#cocode-problem input").fill("Interpolation")
    page.get_by_role("option", name=re.compile("ClassEval_46 · Interpolation")).click()
    expect(page.locator("#cocode-preview .cm-content")).to_contain_text("class Interpolation")
    page.locator("#cocode-shape input").click()
    page.get_by_role("option", name=CLASS_SHAPE_LABELS["parallel"]).click()
    expect(page.locator("#cocode-max-tokens input[type=number]")).to_have_value("256")
    set_number(page, "cocode-temperature", 0)
    page.locator("#cocode-run").click()
    status = wait_for_episode(page, "cocode")
    assert "✗" not in status and "test classes" in status, status
    episode_id = episode_id_in(status)
    expect(page.locator("#cocode-pane-0")).to_contain_text("writes interpolate_1d")
    expect(page.locator("#cocode-pane-1")).to_contain_text("writes interpolate_2d")
    assert "def interpolate_2d" in code_text(page, "cocode-pane-1")
    assert "class Interpolation" in code_text(page, "cocode-result")
    tests_view = page.locator("#cocode-tests-view")
    expect(tests_view).to_contain_text(re.compile(r"Tests: \d of \d test classes passed"))
    expect(tests_view).to_contain_text("written by")
    expect(tests_view).to_contain_text("CoTeam wrote those")
    page.locator("#cocode-result-up").click()
    expect(page.locator("#cocode-rating-status")).to_contain_text("thumbs up on the result")
    screenshot(page, "co-code-class")
    with store.open_db(app.db) as db:
        episode = store.get_episode(db, episode_id)
    assert episode["task"]["kind"] == "class" and episode["task"]["source_id"] == "ClassEval_46"
    assert episode["shape"] == "class_parallel" and len(episode["turns"]) == 2
    assert [r["kind"] for r in episode["ratings"]] == ["thumbs"]

    open_tab(page, "History")
    set_number(page, "history-episode", episode_id)
    page.locator("#history-open").click()
    detail = page.locator("#history-detail")
    expect(detail).to_contain_text(f"Episode {episode_id} · class · class_parallel")
    expect(detail).to_contain_text("Its methods")


def test_admin_is_refused_without_the_password_and_opens_with_it(app, page):
    open_tab(page, "Admin")
    panel = page.locator("#admin-panel")
    page.locator("#admin-unlock").click()
    expect(page.locator("#admin-login-status")).to_contain_text("type the admin password")
    page.locator("#admin-password input").fill("wrong password")
    page.locator("#admin-unlock").click()
    expect(page.locator("#admin-login-status")).to_contain_text("wrong password")
    expect(panel).to_be_hidden()
    screenshot(page, "admin-refused")
    page.locator("#admin-password input").fill(PASSWORD)
    page.locator("#admin-unlock").click()
    expect(panel).to_be_visible()
    expect(page.locator("#admin-learner-status")).to_contain_text("Serving coding:")
    expect(page.locator("#admin-cancel")).to_be_hidden()  # nothing runs: nothing to cancel
    # the writing set is a choice for writing tasks only: shown when the task is writing
    expect(page.locator("#admin-eval-set")).to_be_hidden()
    page.locator("#admin-eval-task input").click()
    page.get_by_role("option", name="writing", exact=True).click()
    expect(page.locator("#admin-eval-set")).to_be_visible()
    screenshot(page, "admin")


def test_admin_tab_stays_locked_when_no_password_is_configured(vllm_server, model_path, browser, tmp_path):  # fmt: skip
    locked = App(vllm_server.url, model_path, tmp_path, password=None)
    try:
        page = browser.new_page()
        page.goto(locked.url)
        open_tab(page, "Admin")
        expect(page.locator("#admin-disabled")).to_contain_text("no admin password is configured")
        page.locator("#admin-password input").fill(PASSWORD)
        page.locator("#admin-unlock").click()
        expect(page.locator("#admin-login-status")).to_contain_text("Refused")
        expect(page.locator("#admin-panel")).to_be_hidden()
        page.close()
    finally:
        locked.stop()


VOTES = 50  # what a person gives before a retrain learns a taste (issue 56)


def vote_for_a_taste(page, db: Path, votes: int = VOTES) -> None:
    """A scripted rater votes through the History tab's A/B queue, `votes` times, for the answer
    with a comment, on stored pairs of answers (made here: the same code with and without one)."""
    with store.open_db(db) as db_:
        for k in range(votes):
            prompt = f'def add_{k}(x: int) -> int:\n    """Return x plus {k}."""\n'
            task = store.create_task(db_, "coding", prompt)
            for comment in ("", f"    # {k} is the offset the docstring asks for\n"):
                code = f"def add_{k}(x: int) -> int:\n{comment}    return x + {k}\n"
                episode = store.start_episode(db_, task, shape="parallel", roles=["a", "b"])
                store.finish_episode(db_, episode, code)
    open_tab(page, "History")
    page.locator("#rate-show").click()
    for _ in range(votes):
        expect(page.locator("#rate-task")).to_contain_text("def add_")
        shown = re.search(r"Task #\d+", page.locator("#rate-task").inner_text()).group()
        left = "is the offset" in page.locator("#rate-left").inner_text()
        page.locator(f"#rate-vote-{'left' if left else 'right'}").click()
        expect(page.locator("#rate-task")).not_to_contain_text(shown)  # the next pair
    expect(page.locator("#rate-status")).to_contain_text("Saved rating")
    expect(page.locator("#rate-status")).not_to_contain_text("will not steer training")


def test_retrain_now_from_the_admin_tab_then_the_new_adapter_serves(app, page, model_path):
    """A new installation serves the shipped team; a person votes 50 times for a taste, and a
    real training run with tiny settings, started from the admin tab, learns from those votes and
    makes the next version, which is promoted, shown in "What your ratings changed" with its
    answers before and after, and then serves the next episode. The run loads the model in the
    app (about 3-6 GB) and takes minutes on a 2-core CPU."""
    if psutil.virtual_memory().available < 6 * 2**30:
        pytest.skip("less than 6 GiB of memory free for training the model in the app")
    vote_for_a_taste(page, app.db)
    # a new installation serves the shipped team when it serves the model the team was trained on
    card = json.loads((SHIPPED / CARD).read_text()) if (SHIPPED / CARD).is_file() else None
    trained_on_this = card and card["base_model"]["sha256"] == (
        model_provenance(model_path) or {}
    ).get("sha256")
    shipped = {agent: 1 for agent in card["agents"]} if trained_on_this else {}
    with store.open_db(app.db) as db:
        before = {
            agent: row["version"] for agent, row in store.active_adapters(db, "coding").items()
        }
    assert before == shipped
    new = [before.get(agent, 0) + 1 for agent in (0, 1)]  # the retrain's versions
    open_tab(page, "Admin")
    page.locator("#admin-password input").fill(PASSWORD)
    page.locator("#admin-unlock").click()
    expect(page.locator("#admin-panel")).to_be_visible()
    for elem_id, value in [
        ("admin-steps", 1), ("admin-group-size", 2), ("admin-tasks-per-step", 1),
        ("admin-train-tokens", 64), ("admin-task-limit", 1), ("admin-gate-tasks", 1),
        ("admin-gate-threshold", 1),  # the reward may be this much lower: it is promoted
    ]:  # fmt: skip
        set_number(page, elem_id, value)
    page.locator("#admin-retrain").click()
    expect(page.locator("#admin-learner-msg")).to_contain_text("Training run")
    bar = page.locator("#admin-progress-bar")
    expect(bar).to_have_attribute("data-state", "running", timeout=30_000)
    expect(page.locator("#admin-cancel")).to_be_visible(timeout=30_000)
    screenshot(page, "admin-training")
    expect(bar).to_have_attribute("data-state", re.compile("ok|failed|cancelled"), timeout=1_200_000)  # fmt: skip
    with store.open_db(app.db) as db:
        [run] = store.list_training_runs(db)
        active = store.active_adapters(db, "coding")
    assert run["state"] == "ok", run["error"]
    assert run["metrics"]["promoted"] is True and set(active) == {0, 1}
    assert {agent: row["version"] for agent, row in active.items()} == dict(enumerate(new))
    expect(page.locator("#admin-adapters")).to_contain_text(f"agent1-v{new[0]}")
    expect(page.locator("#admin-learner-status")).to_contain_text(f"agent1-v{new[0]}")
    screenshot(page, "admin-trained")
    learnt = active[0]["metrics"]["ratings_learnt"]
    assert learnt >= VOTES  # every vote counted (and the earlier tests' ratings of code)
    page.locator("#admin-rating-refresh").click()  # what your ratings changed
    expect(page.locator("#admin-rating-changes")).to_contain_text(f"agent1-v{new[0]}")
    pairs = page.locator("#admin-rating-pairs")
    # the newest version first (either agent's: both learnt from the same ratings)
    expect(pairs).to_contain_text(re.compile(rf"agent\d-v{new[0]} learnt from {learnt} rating"))
    expect(pairs).to_contain_text(re.compile(rf"After \(agent\d-v{new[0]}"))  # a gate problem
    screenshot(page, "admin-ratings-changed")

    open_tab(page, "Co-code")  # the next episode runs on the new versions
    choose_shape(page, "cocode", "parallel")
    set_number(page, "cocode-max-tokens", 64)
    page.locator("#cocode-run").click()
    status = wait_for_episode(page, "cocode")
    expect(page.locator("#cocode-pane-0")).to_contain_text(f"agent1-v{new[0]}")
    expect(page.locator("#cocode-status")).to_contain_text(f"from {learnt} rating(s)")
    with store.open_db(app.db) as db:
        assert store.get_episode(db, episode_id_in(status))["adapter_versions"] == new
