"""The history tab: past episodes, filtered by task, shape, rating and adapter version, a page at a
time; opening one shows its task, what every agent saw and wrote at every turn, the result, its
reward components and its ratings."""

from __future__ import annotations

import functools
import json
import re
import textwrap

import gradio as gr

import store
from agents.team.roles import CLASS_SHAPES, SHAPES
from app.context import AppContext
from app.cowork_results import display_code, reward_markdown
from app.live import EPISODE_STATES, PASSED_MEANS, verdict_words

PAGE_SIZE = 20
# one word a header, each column wide enough for its header's word (assets/app.css keeps words
# whole): every column on screen at 1400 px, the task wrapping
COLUMNS = [
    "#",
    "started",
    "task",
    "kind",
    "shape",
    "agents",
    "versions",
    "status",
    "turns",
    "seconds",
    "tokens",
    "reward",
    "ratings",
    "score",
]
COLUMN_WIDTHS = [
    "3.5%",
    "8%",
    "14%",
    "5.5%",
    "9.5%",
    "6%",
    "8%",
    "6.5%",
    "5%",
    "6.5%",
    "6%",
    "6%",
    "6%",
    "5%",
]
RATING_FILTERS = {
    "any": {},
    "rated": {"rated": True},
    "not rated": {"rated": False},
    "score ≥ 4": {"min_score": 4},
    "score ≥ 3": {"min_score": 3},
    "score ≥ 2": {"min_score": 2},
}


MAX_ROW_ID = 2**63 - 1  # SQLite's largest integer


def row_id(value: float | int | str, what: str) -> int:
    """A row number typed into the page, or ValueError with a message for the page (NaN,
    fractions and numbers past SQLite's integers would otherwise fail deep in the store)."""
    try:
        number = float(value) if not isinstance(value, int) else value
        if isinstance(number, float):
            if not number.is_integer():
                raise ValueError
            number = int(number)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"the {what} must be a whole number, not {str(value)[:40]!r}") from None
    if not 1 <= number <= MAX_ROW_ID:
        raise ValueError(f"the {what} must be between 1 and {MAX_ROW_ID:,}")
    return number


def episode_filters(
    kind: str, shape: str, rated: str, adapter: str, status: str, task_id: float | None
) -> store.EpisodeFilter:
    """The form's filters as a `store.EpisodeFilter` ("any" and empty mean no filter)."""
    filters: dict = dict(RATING_FILTERS.get(rated, {}))
    if kind not in ("any", "", None):
        filters["task_kind"] = kind
    if shape not in ("any", "", None):
        filters["shape"] = shape
    if status not in ("any", "", None):
        filters["status"] = status
    if task_id:
        try:
            filters["task_id"] = row_id(task_id, "task number")
        except ValueError as e:
            raise gr.Error(str(e)) from None
    base = re.fullmatch(r"agent([1-9]\d*)-base", adapter or "")
    if base:
        filters["adapter"] = (int(base.group(1)) - 1, 0)
    elif parsed := store.parse_adapter_name(adapter):
        filters["adapter"] = parsed
    return store.EpisodeFilter(**filters)


def episode_rows(
    ctx: AppContext, filters: store.EpisodeFilter, page: int
) -> tuple[list[list], int]:
    """One page of the history table and the number of matching episodes."""
    with store.open_db(ctx.db_path) as db:
        total = store.count_episodes(db, filters)
        found = store.list_episodes(db, filters, limit=PAGE_SIZE, offset=page * PAGE_SIZE)
    rows = []
    for e in found:
        rows.append(
            [
                e["id"],
                e["started_at"][:16].replace("T", " "),
                f"#{e['task_id']} " + textwrap.shorten(" ".join(e["prompt"].split()), 60),
                e["task_kind"],
                e["shape"],
                e["team_size"],
                ", ".join(store.version_label(v) for v in e["adapter_versions"]),
                verdict_words(e["status"], e["passed"]),
                e["turn_count"],
                round(e["wall_time_s"], 1) if e["wall_time_s"] is not None else None,
                e["completion_tokens"],
                round(e["reward"], 3) if e["reward"] is not None else None,
                e["rating_count"],
                round(e["mean_score"], 1) if e["mean_score"] is not None else None,
            ]
        )
    return rows, total


def adapter_filter_choices(ctx: AppContext) -> list[str]:
    """'any', then each registered agentK-vN and each agent's base model."""
    registered = ctx.registered_adapters()
    agents = sorted({r["agent"] for r in registered} | {0, 1})
    return (
        ["any"]
        + [store.adapter_name(r["agent"], r["version"]) for r in registered]
        + [f"{store.agent_label(a)}-base" for a in agents]
    )


def fenced(text: str, language: str = "") -> str:
    """`text` as a Markdown code block whose fence no backtick run inside it can close."""
    longest = max((len(m) for m in re.findall(r"`+", text or "")), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text or ''}\n{fence}"


def episode_markdown(episode: dict) -> str:
    """Everything about one episode, as Markdown (observations folded away)."""
    task, kind = episode["task"], episode["task"]["kind"]
    code = kind in ("coding", "class")
    language = "python" if code else "text"  # assets/app.css: text in the page's font, wrapped
    rounds = 2 if episode["shape"] == "one_round_discussion" else 1
    source = task["source"] + (f" {task['source_id']}" if task.get("source_id") else "")
    lines = [
        f"### Episode {episode['id']} · {kind} · {episode['shape']} · "
        f"{episode['team_size']} agent(s) · "
        f"{verdict_words(episode['status'], episode['passed'])}",
        f"Started {episode['started_at'][:19].replace('T', ' ')} UTC · "
        f"{episode['turn_count']} turn(s) · "
        + (f"{episode['wall_time_s']:.1f} s · " if episode["wall_time_s"] is not None else "")
        + f"{episode['prompt_tokens']} prompt + {episode['completion_tokens']} output tokens"
        + (f" · reward {episode['reward']:.3f}" if episode["reward"] is not None else ""),
        "Team: "
        + ", ".join(
            f"agent {i + 1} {role} ({store.version_label(v)})"
            for i, (role, v) in enumerate(
                zip(episode["roles"], episode["adapter_versions"], strict=False)
            )
        ),
    ]
    if episode.get("error"):
        lines.append(f"**Error:** {episode['error'].splitlines()[0]}")
    lines += [f"#### Task (task #{task['id']}, {source})", fenced(task["prompt"], language)]
    for turn in episode["turns"]:
        number, revision = turn["turn"] // rounds + 1, turn["turn"] % rounds
        role = episode["roles"][turn["agent"]] if turn["agent"] < len(episode["roles"]) else "?"
        lines.append(
            f"#### Turn {number}{' (revision)' if revision else ''} · agent {turn['agent'] + 1} "
            f"({role}) · {turn['completion_tokens']} tokens · {turn['latency_s']:.1f} s"
        )
        lines.append(
            "<details><summary>What the agent saw (its observation)</summary>\n\n"
            + observation_markdown(turn["observation"])
            + "\n\n</details>\n"
        )
        # an agent's code without its own ``` fence lines (inside ours they would show as text)
        text = display_code(turn["completion"]) if code else turn["completion"]
        lines.append(fenced(text, language))
    lines += ["#### Result", fenced(episode["final_output"] or "(none)", language)]
    lines += verdict_lines(episode, kind)
    if episode["rewards"]:
        weights = episode["reward_weights"] or {}
        lines += [
            "#### Reward",
            reward_markdown(kind, episode["reward"], episode["rewards"], weights),
        ]
        table = [f"| {k} | {v:.3f} |" for k, v in sorted(episode["rewards"].items())]
        lines.append(
            "<details><summary>Every part it was computed from</summary>\n\n"
            "| part | value |\n|---|---|\n" + "\n".join(table) + "\n\n</details>"
        )
    lines.append("#### Ratings")
    if not episode["ratings"]:
        lines.append("None yet.")
    for r in episode["ratings"]:
        lines.append("- " + rating_text(r, episode["id"]))
    return "\n\n".join(lines)


def verdict_lines(episode: dict, kind: str) -> list[str]:
    """The environment's verdict on the result, as the page showed it: passed or not, what that
    means for this kind of work, and each check (a test, a test class, a part) with its message."""
    if episode["passed"] is None:
        return []
    word = "passed" if episode["passed"] else "not passed"
    meaning = PASSED_MEANS.get(kind, "every check passed")
    lines = [f"#### Verdict: {word}", f"Passed means: {meaning}."]
    if episode["checks"]:
        rows = ["| | check | message |", "|---|---|---|"]
        for check in episode["checks"]:
            name, message = (
                textwrap.shorten(" ".join(check[k].split()), width).replace("|", "\\|")
                for k, width in (("name", 100), ("message", 160))
            )
            rows.append(f"| {'✓' if check['passed'] else '✗'} | `{name}` | {message} |")
        lines.append("\n".join(rows))
    return lines


def observation_markdown(observation: str) -> str:
    try:
        messages = json.loads(observation)
    except json.JSONDecodeError:
        return fenced(observation)
    if not all(isinstance(m, dict) for m in messages):  # a class agent's: the methods it wrote
        methods = ", ".join(f"`{m}`" for m in messages)
        return f"Its methods {methods}, each written seeing the class's skeleton (and what the "
        "shape shows of the others' methods) and begun with its head from the skeleton"
    return "\n\n".join(
        f"**{m.get('role', '?')}**\n\n{fenced(m.get('content', ''))}" for m in messages
    )


def rating_text(r: dict, episode_id: int) -> str:
    """One rating in words."""
    who = f"agent {r['agent'] + 1}'s part" if r["agent"] is not None else "the result"
    when = r["created_at"][:16].replace("T", " ")
    if r["kind"] == "thumbs":
        body = f"thumbs {'up' if r['value'] > 0 else 'down'} on {who}"
    elif r["kind"] == "score":
        body = f"score {r['value']:.0f}/5 for {who}"
    elif r["kind"] == "comment":
        body = f"comment on {who}: “{textwrap.shorten(r['text'], 300)}”"
    elif r["kind"] == "edit":
        body = f"edited {who} (preferred output):\n\n" + textwrap.indent(fenced(r["text"]), "  ")
    else:
        left = r["episode_id"] == episode_id
        other = r["other_episode_id"] if left else r["episode_id"]
        side = "left (A)" if left else "right (B)"
        body = (
            f"A/B vote against episode {other} (this was {side}): {r['choice'].replace('_', ' ')}"
        )
    return f"#{r['id']} {when} · {body}"


class HistoryTab:
    def __init__(self, ctx: AppContext):
        self.ctx = ctx

    def build(self) -> None:
        with gr.Row():
            self.kind = gr.Dropdown(
                ["any", "coding", "class", "writing"],
                value="any",
                label="Task kind",
                elem_id="history-kind",
            )
            self.shape = gr.Dropdown(
                ["any", *SHAPES, *[f"class_{s}" for s in CLASS_SHAPES]],
                value="any",
                label="Shape",
                elem_id="history-shape",
            )
            self.rated = gr.Dropdown(
                list(RATING_FILTERS), value="any", label="Rating", elem_id="history-rated"
            )
            self.adapter = gr.Dropdown(
                ["any"], value="any", label="Adapter version", elem_id="history-adapter"
            )
            self.status = gr.Dropdown(
                [("any", "any"), *[(words, state) for state, words in EPISODE_STATES.items()]],
                value="any",
                label="Status",
                elem_id="history-status",
            )
            self.task_id = gr.Number(
                0, label="Task # (0: any)", precision=0, minimum=0, elem_id="history-task"
            )
        self.page = gr.State(0)
        self.table = gr.Dataframe(
            headers=COLUMNS,
            interactive=False,
            wrap=True,
            column_widths=COLUMN_WIDTHS,  # every column on screen at 1400 px; the task wraps
            elem_id="history-table",
        )
        with gr.Row():
            self.previous = gr.Button("← newer", size="sm", elem_id="history-prev")
            self.page_info = gr.Markdown(elem_id="history-page")
            self.next = gr.Button("older →", size="sm", elem_id="history-next")
            self.refresh = gr.Button("Refresh", size="sm", elem_id="history-refresh")
        with gr.Row():
            self.episode_number = gr.Number(
                0,
                label="Episode # (or click a row)",
                precision=0,
                minimum=0,
                elem_id="history-episode",
            )
            self.open = gr.Button("Open", elem_id="history-open")
        self.detail = gr.Markdown(elem_id="history-detail")
        self.wire()

    def filters(self) -> list:
        return [self.kind, self.shape, self.rated, self.adapter, self.status, self.task_id]

    def wire(self) -> None:
        outputs = [self.table, self.page_info, self.page]
        for control in self.filters():
            control.change(self.first_page, self.filters(), outputs, show_progress="hidden")
        self.refresh.click(
            self.refresh_page, [*self.filters(), self.page], [*outputs, self.adapter]
        )
        self.previous.click(functools.partial(self.step, -1), [*self.filters(), self.page], outputs)
        self.next.click(functools.partial(self.step, 1), [*self.filters(), self.page], outputs)
        self.table.select(self.open_row, None, [self.episode_number, self.detail])
        self.open.click(self.open_episode, self.episode_number, self.detail)

    # -- events ----------------------------------------------------------------------------
    def show_page(self, filters: store.EpisodeFilter, page: int):
        rows, total = episode_rows(self.ctx, filters, page)
        pages = max(1, -(-total // PAGE_SIZE))
        info = f"page {page + 1} of {pages} · {total} episode{'s' * (total != 1)}"
        return {"headers": COLUMNS, "data": rows}, info, page

    def first_page(self, *filters):
        return self.show_page(episode_filters(*filters), 0)

    def refresh_page(self, *filters_and_page):
        *filters, page = filters_and_page
        choices = adapter_filter_choices(self.ctx)
        adapter = filters[3] if filters[3] in choices else "any"
        return (
            *self.show_page(episode_filters(*filters), page),
            gr.update(choices=choices, value=adapter),
        )

    def step(self, delta: int, *filters_and_page):
        *filters, page = filters_and_page
        found = episode_filters(*filters)
        with store.open_db(self.ctx.db_path) as db:
            last = max(0, (store.count_episodes(db, found) - 1) // PAGE_SIZE)
        return self.show_page(found, min(max(0, page + delta), last))

    def open_row(self, event: gr.SelectData):
        row = event.row_value if event.row_value else None
        if not row or row[0] in (None, ""):
            return gr.skip(), gr.skip()
        return int(row[0]), self.open_episode(int(row[0]))

    def open_episode(self, episode_id: float | None) -> str:
        if not episode_id:
            return "Type an episode number, or click a row of the table."
        try:
            number = row_id(episode_id, "episode number")
        except ValueError as e:
            return f"⚠ {str(e)[0].upper()}{str(e)[1:]}."
        with store.open_db(self.ctx.db_path) as db:
            try:
                episode = store.get_episode(db, number)
            except store.NotFound:
                return f"⚠ There is no episode {number}."
        return episode_markdown(episode)
