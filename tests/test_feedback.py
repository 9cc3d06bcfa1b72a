"""The environment's feedback to each agent, for coding and writing teams."""

from agents.kinds import team_roles
from agents.tasks import humaneval_task, writing_prompt_task
from agents.team.combine import combine_code
from agents.team.feedback import (
    CodeCheck,
    assess_code,
    assess_writing,
    overlap,
    parse_check,
)

TASK = humaneval_task(0)
ROLES = team_roles(TASK, "parallel", 2)
ENTRY_USES_AUX = "def has_close_elements(numbers, threshold):\n    return aux(numbers)\n"


def assess(helper: str, entry: str, checker=parse_check):
    combined = combine_code([helper, entry], [r.owns for r in ROLES], TASK.preamble)
    return assess_code(combined, ROLES, TASK, checker)


def test_parse_check():
    assert parse_check("def has_close_elements():\n    pass\n", TASK).passed
    missing = parse_check("def other():\n    pass\n", TASK)
    assert not missing.passed and "defines no `has_close_elements`" in missing.messages[0]
    broken = parse_check("def (:\n", TASK)
    assert not broken.passed and "does not parse" in broken.messages[0]
    assert not broken.tests_run


def test_a_good_team_succeeds_without_notes():
    verdict = assess("def aux(xs):\n    return xs\n", ENTRY_USES_AUX)
    assert verdict.success
    assert verdict.feedback == ["", ""]
    assert verdict.details["parses"] and not verdict.details["tests_run"]


def test_each_agent_hears_about_its_own_part():
    helper = "def helper_fn(x):\n    return x\n\nprint(helper_fn(1))\n"
    entry = "def has_close_elements(numbers, threshold):\n    return numbers\n\ndef g(:\n"
    verdict = assess(helper, entry)
    to_helper, to_entry = verdict.feedback
    assert "does not define `aux`" in to_helper
    assert "line 4: print(...)" in to_helper
    assert "does not call your `aux`" in to_helper
    assert "syntax error" in to_entry and "syntax error" not in to_helper
    assert "does not call the helper(s) aux" in to_entry
    assert verdict.success  # parse-level: the module parses and defines the entry function


def test_a_reply_cut_off_at_the_token_limit_is_reported():
    combined = combine_code(
        ["def aux(x):\n    return x\n", ENTRY_USES_AUX], [r.owns for r in ROLES]
    )
    verdict = assess_code(combined, ROLES, TASK, parse_check, cut_off=[False, True])
    assert "cut off at the token limit" in verdict.feedback[1]
    assert "cut off" not in verdict.feedback[0]
    roles = team_roles(writing_prompt_task("Write about tea."), "parallel", 2)
    written = assess_writing(["word " * 30, "word " * 70], roles, cut_off=[True, False])
    assert "cut off" in written.feedback[0] and not written.success


def test_a_function_written_for_a_teammate_is_reported():
    helper = "def aux(x):\n    return x\n\ndef has_close_elements(n, t):\n    return False\n"
    verdict = assess(helper, ENTRY_USES_AUX)
    assert "You wrote `has_close_elements`, a teammate's part" in verdict.feedback[0]
    assert "was not used" not in verdict.feedback[1]


def test_checker_messages_go_to_every_agent_and_decide_success():
    def failing(code, task):
        assert "def aux" in code  # the checker gets the joined module
        return CodeCheck(False, True, 1, 3, ["assert candidate([1.0], 0.5) == False"])

    verdict = assess("def aux(xs):\n    return xs\n", ENTRY_USES_AUX, failing)
    assert not verdict.success
    for note in verdict.feedback:
        assert "Tests: 1 of 3 passed." in note and "candidate([1.0], 0.5)" in note
    assert verdict.details["tests_passed"] == 1 and verdict.details["tests_total"] == 3


def test_a_module_that_does_not_parse_is_not_checked():
    calls = []
    combined = combine_code(["def aux(x):\n    return x\n"])
    combined.error, combined.code = "line 1: invalid syntax", "def ("  # as concat_code can give
    verdict = assess_code(combined, ROLES[:1], TASK, lambda c, t: calls.append(c))
    assert not verdict.success and calls == []
    assert "does not parse" in verdict.feedback[0]


def test_writing_feedback_on_length_emptiness_and_repetition():
    task = writing_prompt_task("Write about tea.")
    roles = team_roles(task, "parallel", 3)  # introduction, body, conclusion
    intro = "Tea is an old drink, loved around the world for its taste, its warmth and the calm it brings to a busy day."
    body = " ".join(["Green and black teas come from one plant, brewed in many ways."] * 6)
    verdict = assess_writing([intro, body, ""], roles)
    assert not verdict.success
    assert verdict.feedback[0] == ""
    assert "Your section was empty." in verdict.feedback[2]
    assert verdict.details["words"] == [23, 72, 0]
    short = assess_writing([intro, "Too short.", intro + " " + intro], roles)
    assert "has 2 words; aim for 60-200" in short.feedback[1]
    assert "repeats much of section 1 (introduction" in short.feedback[2]
    assert "repeats much of section 3" in short.feedback[0]
    end = "So tea keeps its place, year after year, as a small daily comfort for many people everywhere, morning and night."
    good = assess_writing([intro, body, end], roles)
    assert good.success and good.feedback == ["", "", ""]


def test_overlap():
    assert overlap("the cat sat", "the cat sat") == 1.0
    assert overlap("cat", "dog") == 0.0
    assert overlap("", "dog") == 0.0
