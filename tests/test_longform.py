"""Long-form co-writing: the curated set, a person's own request, the outline dealt out to the
team, the document kept from each section's owner, and the reward that ranks documents as a
person would. The graph runs with a scripted policy (logic only); the reward uses the real
sentence-embedding model."""

import itertools
import json
import math
import re

import pytest

from agents.kinds import team_roles
from agents.serving.policy import pieces_kept
from agents.tasks import (
    DEFAULT_OUTLINE,
    LONGFORM_WORDS,
    TaskError,
    find_task,
    longform_prompt_task,
    longform_tasks,
)
from agents.team.graph import TeamSettings
from agents.team.outline import (
    assign_sections,
    document_sections,
    match_heading,
    mid_sentence,
    own_sections,
    plan_outline,
    structure_compliance,
    writer_stop,
)
from agents.team.roles import section_min_tokens, section_words_of, token_share
from agents.team.sentences import drop_repeats
from learner.rewards import score_episode
from learner.writing_reward import longform_reward
from tests.scripted import ScriptedPolicy, adapters, agent_of

# -- the curated set and a person's own request ----------------------------------------------


def test_the_longform_set_has_four_sections_a_target_a_reference_and_a_fixed_split():
    every, held_out = longform_tasks(), longform_tasks("held_out")
    train, validation = longform_tasks("train"), longform_tasks("validation")
    assert 30 <= len(every) <= 60 and len(held_out) == len(every) // 4
    # the gate's validation set: every fourth of the rows the file does not hold out
    assert len(validation) == (len(every) - len(held_out)) // 4
    ids = [{t.source_id for t in part} for part in (held_out, train, validation)]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    assert len(held_out) + len(train) + len(validation) == len(every)
    assert {t.extra["split"] for t in validation} == {"validation"}
    for task in every:
        assert task.form == "longform" and task.kind == "writing"
        outline = task.extra["outline"]
        assert len(outline) == 4 and all(s["heading"] and s["brief"] for s in outline)
        assert len({s["heading"] for s in outline}) == 4
        assert LONGFORM_WORDS[0] <= task.extra["target_words"] <= LONGFORM_WORDS[1]
        assert len(task.reference.split("\n\n")) == 4
        assert not re.search(r"\[\[|\{\{|<ref|==", task.reference)  # markup stripped
    assert find_task("writing", problem="longform/3") == every[3]


def test_own_request_takes_the_persons_sections_or_the_default_outline():
    task = find_task("writing", prompt="Why every program deserves tests", sections="")
    assert [s["heading"] for s in task.extra["outline"]] == [h for h, _, _ in DEFAULT_OUTLINE]
    task = longform_prompt_task(
        "Why every program deserves tests",
        "## What a test is: a check a machine runs\nCost\n- Benefits: fewer bugs later",
    )
    assert task.extra["outline"] == [
        {"heading": "What a test is", "brief": "a check a machine runs"},
        {"heading": "Cost", "brief": ""},
        {"heading": "Benefits", "brief": "fewer bugs later"},
    ]
    assert task.extra["title"] == "Why every program deserves tests"


@pytest.mark.parametrize(
    ("request_text", "subject"),
    [
        ("Write an explainer article about Achilles for a general reader.", "Achilles"),
        (
            "Write a four-part explainer on how vaccines train the immune system",
            "How vaccines train the immune system",
        ),
        (
            "Could you please draft a post about the history of jazz for teenagers?",
            "The history of jazz",
        ),
        ("Explain quantum computing to a curious 12-year-old", "Quantum computing"),
        ("Why every program deserves tests", "Why every program deserves tests"),
        ("Write about\nmore lines", "Write about"),
    ],
)
def test_a_plain_request_is_titled_by_its_subject_not_by_the_ask(request_text, subject):
    """The document's title, and the subject the style sheet names, is what was asked about:
    never the request pasted whole ("Write a four-part explainer on ...")."""
    from agents.tasks import request_subject

    assert request_subject(request_text) == subject
    assert longform_prompt_task(request_text).extra["title"] == subject


def test_a_section_line_may_give_the_words_its_text_begins_with():
    task = longform_prompt_task(
        "Tides", "Causes: what pulls the sea | begins: The Moon pulls\nEffects: on coasts\nHistory"
    )
    assert task.extra["outline"] == [
        {"heading": "Causes", "brief": "what pulls the sea", "lead": "The Moon pulls"},
        {"heading": "Effects", "brief": "on coasts"},
        {"heading": "History", "brief": ""},
    ]


def test_a_planned_outline_takes_the_models_headings_and_the_environments_briefs_and_leads():
    """The planner names the parts; every later part is briefed to its heading and begun with a
    lead into its matter (names the request capitalises keep their capitals), never with the
    subject's definition, which the first part alone gives. A plan of repeated or too few
    headings, or cut off, is no plan: the caller keeps the default outline."""
    request = "Write an explainer about Apollo 11 and NASA for a general reader"
    headings = [
        "The mission",
        "NASA's Saturn V rocket",
        "Landing on the Moon's surface",
        "Apollo 11 today",
    ]

    def planner(reply):
        return ScriptedPolicy(lambda ask: reply)

    lines, reply, _ = plan_outline(planner(json.dumps({"headings": headings})), request)
    task = longform_prompt_task(request, lines)
    outline = task.extra["outline"]
    assert [s["heading"] for s in outline] == headings
    assert "lead" not in outline[0] and "defines" in outline[0]["brief"]
    assert [s["lead"] for s in outline[1:]] == [
        "When it comes to NASA's Saturn V rocket,",
        "As for landing on the Moon's surface,",
        "Turning to Apollo 11 today,",
    ]
    assert all(s["brief"].startswith("Only ") for s in outline[1:])
    assert mid_sentence("Mission Details", {"NASA"}) == "mission details"  # title case
    assert task.extra["title"] == "Apollo 11 and NASA"
    for bad in (headings[:3] + ["the Mission"], headings[:3], '{"headings": ["The mis'):
        text = bad if isinstance(bad, str) else json.dumps({"headings": bad})
        assert plan_outline(planner(text), request)[0] is None


@pytest.mark.parametrize(
    ("prompt", "sections", "message"),
    [
        ("", None, "empty"),
        ("Tests", "Only one", "2 to 8 sections"),
        ("Tests", "Why\nwhy", "same heading"),
    ],
)
def test_a_bad_own_request_is_refused_with_a_reason(prompt, sections, message):
    with pytest.raises(TaskError, match=message):
        longform_prompt_task(prompt, sections)
    with pytest.raises(TaskError, match="sections go with"):
        find_task("coding", prompt="def f(x):\n    pass\n", sections="A\nB")


# -- who writes what, and what each agent sees -----------------------------------------------


def test_sections_are_dealt_in_order_in_even_runs():
    assert assign_sections(4, 4) == [[0], [1], [2], [3]]
    assert assign_sections(4, 2) == [[0, 1], [2, 3]]
    assert assign_sections(4, 3) == [[0], [1], [2, 3]]
    assert assign_sections(4, 1) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("size", [2, 3, 4])
def test_each_view_names_its_own_sections_and_briefs_the_others_headings_and_the_style_sheet(size):
    task = longform_tasks("held_out")[0]
    outline = task.extra["outline"]
    roles = team_roles(task, "parallel", size)
    dealt = sorted(k for role in roles for k in role.sections)
    assert dealt == [0, 1, 2, 3]  # every section has exactly one owner
    for role in roles:
        mine = [outline[k]["heading"] for k in role.sections]
        others = [s["heading"] for k, s in enumerate(outline) if k not in role.sections]
        assert all(f'"## {h}"' in role.ask for h in mine)
        assert not any(f'"## {h}"' in role.ask for h in others)
        # "each" only where there are several sections to have the words
        assert ("words each," in role.ask) == (len(mine) > 1), role.ask
        assert all(f'"## {h}"' in role.instructions.split("You write only")[1] for h in others)
        # its own sections' briefs, and of a teammate's section the heading alone
        assert all(outline[k]["brief"] in role.instructions for k in role.sections)
        assert not any(
            s["brief"] in role.instructions for k, s in enumerate(outline) if k not in role.sections
        )
        assert "Style sheet" in role.instructions and task.extra["title"] in role.instructions


def test_the_single_writer_sees_every_brief():
    task = longform_tasks("held_out")[0]
    (role,) = team_roles(task, "single", 1)
    assert all(s["brief"] in role.instructions for s in task.extra["outline"])


def section_reply(request) -> str:
    """Each agent writes the sections its ask names; agent 1 also writes agent 0's section."""
    ask = request.messages[1]["content"].split("Now write")[-1]
    own = re.findall(r'"## ([^"]+)"', ask)
    text = "\n\n".join(f"## {h}\nText of {h} by agent {agent_of(request)}." for h in own)
    if agent_of(request) == 1:
        text += "\n\n## Etymology\nAgent 1 trespassing."
    begun = request.messages[-1]  # the environment began the reply with the first heading
    assert begun["role"] == "assistant" and begun["content"] == f"## {own[0]}\n\n"
    return text.removeprefix(f"## {own[0]}\n")


def test_the_document_keeps_each_section_from_its_owner_only(tmp_path):
    from agents.team.episode import run_episode

    task = longform_tasks("held_out")[0]
    policy = ScriptedPolicy(section_reply)
    result = run_episode(
        task,
        policy,
        TeamSettings(shape="parallel", agents=4, adapters=adapters(4)),
        db=tmp_path / "c.db",
    )
    headings = [s["heading"] for s in task.extra["outline"]]
    assert result.output.startswith(f"# {task.extra['title']}")
    assert [line[3:] for line in result.output.splitlines() if line.startswith("## ")] == headings
    assert "trespassing" not in result.output and "Etymology by agent 0" in result.output
    texts = [step["text"] for step in result.final_steps()]
    owners = [role.sections for role in result.roles]
    # agent 1's call ended as it wrote the teammate's heading line (`writer_stop`)
    assert "Etymology" not in texts[1] and result.final_steps()[1]["finish_reason"] == "stop"
    assert structure_compliance(texts, task.extra["outline"], owners) == 1.0
    scored = score_episode(result)  # the one scoring path takes long-form documents
    assert scored.components["structure"] == 1.0 and 0 <= scored.reward <= 1
    # a trespass that got through is dropped from the document and counted against structure
    texts[1] += "\n\n## Etymology\nAgent 1 trespassing."
    sections = document_sections(texts, task.extra["outline"], owners)
    assert not any("trespassing" in section for section in sections)
    assert structure_compliance(texts, task.extra["outline"], owners) == 0.75


def test_each_writer_gets_the_tokens_its_sections_need_within_the_runs_cap(tmp_path):
    """A looping section stops at its writer's share, not at the run's cap: four writers of one
    section each get a quarter of what the single writer of all four gets (both under the cap)."""
    from agents.team.episode import run_episode
    from agents.team.graph import Sampling

    task = longform_tasks("held_out")[0]
    shares = {}
    for shape, size in (("parallel", 4), ("single", 1)):
        policy = ScriptedPolicy(section_reply)
        run_episode(
            task,
            policy,
            TeamSettings(
                shape=shape,
                agents=size,
                adapters=adapters(size),
                sampling=Sampling(max_tokens=4096),
            ),
            db=tmp_path / f"{shape}.db",
        )
        requests = sorted(policy.requests, key=agent_of)  # parallel calls come in any order
        shares[shape] = [r.max_tokens for r in requests]
        roles = team_roles(task, shape, size)
        headings = [s["heading"] for s in task.extra["outline"]]
        for request, role in zip(requests, roles, strict=True):  # a teammate's heading
            others = [h for k, h in enumerate(headings) if k not in role.sections]
            # ends the call at any level, as written (then title-cased while the API's limit of
            # 4 stop strings leaves room): the writer does not write it
            stop = request.stop or []
            assert stop[: len(others)] == [f"# {h}" for h in others] and len(stop) <= 4
            assert set(stop[len(others) :]) <= {f"# {h.title()}" for h in others}
        assert shares[shape] == [token_share(role) for role in roles]
        words = [role.words[1] for role in roles]
        assert all(words[i] * 1.3 < shares[shape][i] < 4096 for i in range(size))
    assert abs(sum(shares["parallel"]) - shares["single"][0]) <= 4  # the same work, dealt out
    capped = ScriptedPolicy(section_reply)
    run_episode(
        task,
        capped,
        TeamSettings(
            shape="parallel", agents=4, adapters=adapters(4), sampling=Sampling(max_tokens=64)
        ),
        db=tmp_path / "capped.db",
    )
    assert [r.max_tokens for r in capped.requests] == [64] * 4  # the run's cap still holds


def one_section_then_stop(request) -> str:
    """A writer that writes the section its reply was begun with, then ends its reply."""
    begun = request.messages[-1]["content"]
    heading = re.findall(r"^## (.+)$", begun, re.M)[-1]
    return f"Text of {heading}."


@pytest.mark.parametrize("shape, size", [("single", 1), ("parallel", 2)])
def test_a_writer_that_stops_with_its_sections_unwritten_goes_on_with_the_next(
    tmp_path, shape, size
):
    """The untrained single writer often ends its reply after one or two of the four sections:
    the environment writes the next own section's heading and the model continues its reply,
    within the writer's one token share, until each of its sections is begun."""
    from agents.team.episode import run_episode
    from agents.team.graph import Sampling

    task = longform_tasks("held_out")[0]
    headings = [s["heading"] for s in task.extra["outline"]]
    policy = ScriptedPolicy(one_section_then_stop)
    result = run_episode(
        task,
        policy,
        TeamSettings(
            shape=shape, agents=size, adapters=adapters(size), sampling=Sampling(max_tokens=4096)
        ),
        db=tmp_path / "c.db",
    )
    assert result.output == "\n\n".join(
        [f"# {task.extra['title']}", *(f"## {h}\n\nText of {h}." for h in headings)]
    )
    assert len(policy.requests) == 4  # one call per section
    for agent, role in enumerate(result.roles):
        calls = [r for r in policy.requests if agent_of(r) == agent]
        assert [r.messages[-1]["content"].rstrip().rsplit("## ", 1)[1] for r in calls] == [
            headings[k] for k in role.sections
        ]
        step = result.final_steps()[agent]
        # each call continues the reply so far; the calls share the writer's token share
        assert calls[-1].messages[-1]["content"] == step["text"].removesuffix(
            f"Text of {headings[role.sections[-1]]}."
        )
        assert calls[0].max_tokens == token_share(role)
        # a continued call may not end before the section's lower bound of words
        assert [r.min_tokens for r in calls] == [0] + [section_min_tokens(role)] * (len(calls) - 1)
        assert 0.6 * 1.3 * section_words_of(task) < section_min_tokens(role) < token_share(role)
        for before, after in itertools.pairwise(calls):  # the scripted policy: 7 chars a token
            used = math.ceil(len(one_section_then_stop(before)) / 7)
            assert after.max_tokens == before.max_tokens - used
        assert step["completion_tokens"] == step["completion"].completion_tokens > 0
    assert (
        structure_compliance(
            [s["text"] for s in result.final_steps()],
            task.extra["outline"],
            [r.sections for r in result.roles],
        )
        == 1.0
    )
    # a learner's rollout is one call per agent: its sample must be what the policy wrote
    rollout = ScriptedPolicy(one_section_then_stop)
    run_episode(
        task,
        rollout,
        TeamSettings(
            shape=shape, agents=size, adapters=adapters(size), sampling=Sampling(logprobs=True)
        ),
        db=tmp_path / "r.db",
    )
    assert len(rollout.requests) == size


def test_a_heading_that_begins_with_a_number_of_its_own_is_read_as_written():
    """The heading "1970–85: Early life" (the Andre Agassi article, a validation one) is its
    section, not "Early life" after a number the writer put before it; the go-on loop once
    wrote that heading again and again, never read as written, until the request outgrew the
    model's context."""
    outline = [{"heading": h} for h in ("1970–85: Early life", "Early life", "Legacy")]
    assert match_heading("1970–85: Early life", outline) == 0
    assert match_heading("2. Early life", outline) == 1  # a number of the writer's
    assert match_heading("Section 3: Legacy", outline) == 2
    assert match_heading("1986-93: Breakthrough", outline) is None
    (agassi,) = [t for t in longform_tasks("validation") if t.extra["title"] == "Andre Agassi"]
    sections = agassi.extra["outline"]
    assert [match_heading(s["heading"], sections) for s in sections] == list(range(len(sections)))


def test_a_section_begun_and_still_unread_is_not_begun_again(tmp_path, monkeypatch):
    """Whatever the reason a begun section is not read as written, the environment begins each
    of a writer's sections once: a reply that keeps ending at once is given up, not continued
    until the request is longer than the model's context."""
    import agents.team.writer
    from agents.team.episode import run_episode
    from agents.team.graph import Sampling

    task = longform_tasks("held_out")[0]
    monkeypatch.setattr(agents.team.writer, "next_section", lambda text, outline, mine: mine[-1])
    policy = ScriptedPolicy(lambda request: "")
    run_episode(
        task,
        policy,
        TeamSettings(
            shape="single", agents=1, adapters=adapters(1), sampling=Sampling(max_tokens=4096)
        ),
        db=tmp_path / "c.db",
    )
    assert len(policy.requests) == 2  # the first call and one continuation


@pytest.mark.parametrize("shape, size", [("single", 1), ("parallel", 2), ("parallel", 4)])
def test_an_own_request_without_sections_begins_each_section_with_its_lead(tmp_path, shape, size):
    """The default outline's sections are four kinds of text; each but the first is begun by
    the environment with its lead, in a writer's first call and in a continued one alike, so
    four writers do not all open by defining the subject."""
    from agents.team.episode import run_episode
    from agents.team.graph import Sampling

    task = longform_prompt_task("Write an explainer article about tides for a general reader.")
    leads = [lead for _, _, lead in DEFAULT_OUTLINE]
    assert leads[0] == "" and all(leads[1:])  # the first section alone defines the subject
    assert [s.get("lead", "") for s in task.extra["outline"]] == leads
    policy = ScriptedPolicy(lambda request: " it.")
    result = run_episode(
        task,
        policy,
        TeamSettings(
            shape=shape, agents=size, adapters=adapters(size), sampling=Sampling(max_tokens=4096)
        ),
        db=tmp_path / "own.db",
    )
    openings = [f"## {h}\n\n{lead}" for h, _, lead in DEFAULT_OUTLINE]
    begun = [r.messages[-1]["content"] for r in policy.requests]
    assert sorted(next(o for o in openings if b.endswith(o)) for b in begun) == sorted(openings)
    for opening in openings:
        assert f"{opening} it." in result.output or f"{opening}it." in result.output


def test_a_continued_call_is_stopped_on_the_whole_reply():
    """The stop of a call that continues a reply judges the reply so far with the new text: a
    sentence or an own heading written before ends the new text there."""
    from agents.team.writer import continuing

    before = (
        "## Early life\n\nHe was born in Rome to a family of bakers and poets.\n\n## Legacy\n\n"
    )
    stop = continuing(writer_stop(OUTLINE, [0, 2]), before)
    assert stop("His work lives on.") is None
    assert stop("His work lives on.\n\n## Early life\nMore") == len("His work lives on.\n\n")
    again = "He was born in Rome to a family of bakers and poets. Then"
    assert stop(again) == 0
    assert continuing(None, before) is None


def test_structure_compliance_and_headless_single_sections():
    outline = [{"heading": h, "brief": ""} for h in ("Alpha", "Beta")]
    owners = [[0], [1]]
    assert structure_compliance(["## Alpha\nA.", "## beta:\nB."], outline, owners) == 1.0
    assert structure_compliance(["A.", "B."], outline, owners) == 1.0  # one section, no heading
    assert structure_compliance(["## Alpha\nA.", ""], outline, owners) == 0.5
    assert own_sections("## Alpha\nA.\n## Beta\nB.", outline, [0]) == {0: "A."}
    assert document_sections(["## Alpha\nA.\n## Beta\nX.", "## Beta\nB."], outline, owners) == [
        "A.",
        "B.",
    ]
    # a sub-heading stays in its section (it used to split it and drop the text under it)
    with_sub = ["## Alpha\nA.\n### Origins\nMore of A.", "## Beta\nB."]
    assert structure_compliance(with_sub, outline, owners) == 1.0
    assert document_sections(with_sub, outline, owners)[0] == "A.\n### Origins\nMore of A."
    assert structure_compliance(["## Alpha\nA.\n# Beta\nB.", "## Beta\nB."], outline, owners) == 0.5
    # an outline heading at a deeper level is still that section
    assert structure_compliance(["### Alpha\nA.", "#### Beta\nB."], outline, owners) == 1.0


# -- the reward ranks hand-made documents as a person would -----------------------------------

BRIEFS = [
    "What a honey bee is: its body, its castes and how long each lives.",
    "How a colony is organised: the queen, the workers, the drones and the hive.",
    "How bees pollinate crops and wild plants while gathering nectar and pollen.",
    "The threats bees face today: mites, pesticides, disease and loss of habitat.",
]
BIOLOGY = (
    "The honey bee is a flying insect of the genus Apis, best known for making honey. Its body "
    "has three parts: a head with large compound eyes and antennae, a thorax that carries two "
    "pairs of wings and six legs, and an abdomen that holds the sting and the wax glands. Honey "
    "bees live in three castes. A worker lives about six weeks in summer, a drone a few weeks "
    "longer, and a queen can live for three to five years."
)
BIOLOGY_PARAPHRASE = (
    "Honey bees are insects of the genus Apis, famous above all for producing honey. The body of "
    "a honey bee is divided into a head, which bears the antennae and big compound eyes, a thorax "
    "with four wings and six legs, and an abdomen containing wax glands and the sting. There are "
    "three castes of honey bee: workers survive roughly six weeks in summer, drones somewhat "
    "longer, and queens may live three to five years."
)
COLONY = (
    "A honey bee colony is a family of one queen, tens of thousands of female workers and a few "
    "hundred male drones. The queen lays up to two thousand eggs a day. Workers change jobs as "
    "they age: young ones clean cells and feed larvae, middle-aged ones build comb and guard the "
    "entrance, and the oldest forage outside. Drones exist only to mate with queens from other "
    "colonies. The hive itself is built of wax comb, its hexagonal cells holding brood and stores."
)
POLLINATION = (
    "While a forager collects nectar and pollen, grains of pollen stick to the hairs on its body "
    "and rub off on the next flower it visits. This carries pollen from flower to flower and lets "
    "plants set seed and fruit. Farmers rent hives to pollinate almonds, apples, blueberries and "
    "many other crops, and about a third of the food people eat depends on animal pollination, "
    "much of it by honey bees. Wild flowers in meadows and hedges benefit in the same way."
)
THREATS = (
    "Honey bee colonies have suffered heavy losses in recent decades. The parasitic Varroa mite "
    "feeds on developing bees and spreads viruses that cripple their wings. Some pesticides, "
    "notably neonicotinoids, impair foragers' navigation. Diseases such as American foulbrood kill "
    "larvae, and large fields of a single crop leave bees short of varied food for most of the "
    "year. Beekeepers now treat hives for mites and plant strips of wild flowers to help."
)
GOOD = [BIOLOGY, COLONY, POLLINATION, THREATS]


def score(sections) -> dict:
    return longform_reward(sections, BRIEFS, 300, subject="honey bee")


def test_the_longform_reward_ranks_documents_as_a_person_would():
    good = score(GOOD)
    off_brief = score([THREATS, POLLINATION, COLONY, BIOLOGY])  # every section off its brief
    empty_part = score([BIOLOGY, "", POLLINATION, THREATS])
    one_writes_all = score([" ".join(GOOD), "", "", ""])
    paraphrased = score([BIOLOGY, BIOLOGY_PARAPHRASE, POLLINATION, THREATS])
    duplicated = score([BIOLOGY, BIOLOGY, POLLINATION, THREATS])
    assert good["redundancy"] == 0.0 and good["total"] > 0.85
    assert good["total"] > off_brief["total"] > empty_part["total"]
    assert off_brief["coverage"] < good["coverage"] - 0.2
    for bad in (one_writes_all, paraphrased, duplicated):
        assert bad["total"] < min(empty_part["total"], 0.3)
    # the same paragraph in other words is caught as well as a copy
    assert paraphrased["redundancy"] > 0.9 and duplicated["redundancy"] == 1.0
    assert one_writes_all["length"] == 0.0 and one_writes_all["structure"] == 0.25


def test_the_document_says_each_thing_once_where_it_was_first_said():
    opening = "Honey bees are social insects of the genus Apis, known for making honey."
    reworded = "Honey bees, social insects of the genus Apis, are known for making honey."
    edited = drop_repeats([f"{opening} They live in colonies.\n\nThey sting.", "", reworded])
    assert edited == [f"{opening} They live in colonies.\n\nThey sting.", "", ""]
    # a repeat inside one section goes too; a paragraph break after it stays
    colony = f"{COLONY}\n\n{opening}"
    assert drop_repeats([opening, f"{opening}\n\nThe queen lays eggs. {colony}"]) == [
        opening,
        f"The queen lays eggs. {COLONY}",
    ]
    assert drop_repeats(GOOD) == GOOD  # distinct sections are left as they are
    # the reward keeps what the writers did, and reports the document the reader gets
    duplicated = score([BIOLOGY, BIOLOGY, POLLINATION, THREATS])
    assert duplicated["redundancy"] == 1.0 and duplicated["document_redundancy"] < 0.3
    assert duplicated["repeats_dropped"] == pytest.approx(4 / 17)
    assert score(GOOD)["repeats_dropped"] == 0.0


def test_a_section_does_not_reach_its_length_by_saying_it_again():
    """A writer short of its section's words (45-112 here) that writes its sentences again is no
    longer than it was to the reader, and scores no better than the short section."""
    short = " ".join(COLONY.split(". ")[:2]) + "."  # 33 words
    padded = f"{short} {short}\n\n{short}"
    assert len(short.split()) < 45 <= len(padded.split())
    honest, looped = (
        score([BIOLOGY, short, POLLINATION, THREATS]),
        score([BIOLOGY, padded, POLLINATION, THREATS]),
    )
    assert looped["length"] == honest["length"] < 1.0
    # no better: equal up to the float noise of sentence embeddings computed in other batches
    assert looped["total"] <= honest["total"] + 1e-6


def test_consistency_notices_a_section_in_another_voice_and_format():
    you_list = "You should know:\n- you can keep bees at home\n- your garden will thank you"
    mixed = score([BIOLOGY, COLONY, POLLINATION, you_list])
    assert mixed["voice"] == mixed["format"] == 0.75
    assert mixed["consistency"] < score(GOOD)["consistency"]


def test_a_writer_stopped_at_a_teammates_heading_leaves_no_stray_hash(tmp_path):
    """vLLM ends a call at the stop string `# Heading`, so the `#` before it is already in the
    text ("...\n\n#"): it is cut, and the document has no line of bare `#`."""
    from agents.team.episode import run_episode

    task = longform_tasks("held_out")[0]
    policy = ScriptedPolicy(lambda request: section_reply(request) + "\n\n#")
    result = run_episode(
        task,
        policy,
        TeamSettings(shape="parallel", agents=4, adapters=adapters(4)),
        db=tmp_path / "c.db",
    )
    assert not any(step["text"].rstrip().endswith("#") for step in result.steps)
    assert not re.search(r"^\s*#+\s*$", result.output, re.M)


OUTLINE = [{"heading": h} for h in ("Early life", "ASCII Control Characters", "Legacy")]


@pytest.mark.parametrize(
    "written, kept",
    [
        # a teammate's heading at any level and in any case, once its line is whole
        ("Born in Rome. He grew up there.\n\n### Ascii control characters\nThe rest", 33),
        ("Born in Rome.\n\n  ## LEGACY\n", 15),
        ("Born in Rome.\n\n## Legacy", None),  # the line is not whole yet: it may go on
        # the writer's own heading a second time (a writer that started its part again)
        ("## Early life\n\nBorn in Rome.\n\n## early life\nAgain", 30),
        # the writer's own heading, a heading not in the outline, a short repeated sentence
        ("## Early life\n\nBorn in Rome.\n\n### Childhood\nHe played.\n", None),
        ("He lived. He lived. He lived. He lived long.\n", None),
        # a loop: a long sentence written again ends the reply before it
        (
            "Achilles was the son of the Nereid Thetis and Peleus of Phthia. He fought. "
            "Achilles was the son of the Nereid Thetis and Peleus of Phthia. And",
            75,
        ),
        # a sentence that ends in a quotation counts too (a two-sentence loop the model wrote)
        (
            'It comes from the Greek word "achilles," which means "pain." He was a hero of Troy. '
            'It comes from the Greek word "achilles," which means "pain." It',
            84,
        ),
        # the same sentence with a word changed is the loop too; two facts in one mould are not
        (
            "The Pacific Ocean is known for its rugged coastline and its diverse flora and fauna. "
            "The Atlantic Ocean is known for its rugged coastline and its diverse flora and fauna."
            " The",
            85,
        ),
        (
            "In 1990 he won the national prize for poetry in Rome. In 1994 he won the national "
            "prize for fiction in Paris. He",
            None,
        ),
        # a list item is a sentence of its own, whatever its indent
        (
            "- **Algae** - The genus of algae that includes a variety of species, including:\n"
            "    - **Algae** - The genus of algae that includes a variety of species, including:\n",
            84,
        ),
        # a phrase said four times in a row is kept once
        ("Then the gods, the gods, the gods, the gods, the gods", 15),
        ("-------------------------------------\nA rule of dashes is no loop.\n", None),
    ],
)
def test_a_writer_stops_at_a_teammates_heading_or_a_loop(written, kept):
    stop_when = writer_stop(OUTLINE, [0])
    assert stop_when(written) == kept


def test_a_writer_of_several_sections_may_open_them_in_one_mould():
    """Near repeats count within a section: a cut at the second section's opening, a sentence
    like the first's, would leave that section empty (single did, on a held-out outline)."""
    stop_when = writer_stop(OUTLINE, [0, 2])
    opening = "{} impairments are a common problem that affects people with disabilities."
    two = (
        f"## Early life\n\n{opening.format('Mobility')}\n\n## Legacy\n\n{opening.format('Visual')}"
    )
    assert stop_when(two + " They") is None
    again = two + " " + opening.format("Hearing") + " They"  # within one section: a loop
    assert stop_when(again) == len(two) + 1
    assert stop_when(two + "\n\n" + opening.format("Mobility") + " It") == len(two) + 2  # exact


def test_a_stop_keeps_whole_pieces_and_a_loop_ends_the_call(tmp_path):
    """A learner's sample is cut between streamed pieces (so token ids stay aligned), at or
    before the stop; other text at the stop itself, inside a piece of several tokens; a looping
    writer's call ends there instead of at its token share."""
    stop = writer_stop(OUTLINE, [0])
    pieces = ["Born in", " Rome.", "\n\n##", " Legacy", "\nMore"]
    assert pieces_kept(pieces, stop) == pieces[:2]
    assert pieces_kept(pieces, stop, whole=False) == [*pieces[:2], "\n\n"]  # up to its line
    assert pieces_kept(pieces[:4], stop) is None
    assert pieces_kept(pieces, None) is None
    late = ["Born in", " Rome.\n\n## Leg", "acy\nMore"]  # the server sent tokens together
    assert pieces_kept(late, stop) == ["Born in"]
    assert pieces_kept(late, stop, whole=False) == ["Born in", " Rome.\n\n"]

    from agents.team.episode import run_episode

    loop = "The bees of the hive work together every day of the year. "
    task = longform_tasks("held_out")[0]
    own = lambda request: section_reply(request).split("\n\n## Etymology")[0]  # noqa: E731
    policy = ScriptedPolicy(lambda request: own(request) + "\n\n" + loop * 40)
    result = run_episode(
        task,
        policy,
        TeamSettings(shape="parallel", agents=4, adapters=adapters(4)),
        db=tmp_path / "c.db",
    )
    for step in result.steps:
        assert step["text"].count("work together every day") == 1
        assert step["finish_reason"] == "stop"
