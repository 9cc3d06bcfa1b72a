"""Task sources: HumanEval and its fixed split or folds, a person's own problem, writing sets."""

import ast

import pytest

import store
from agents.tasks import (
    HUMANEVAL_HELD_OUT,
    HUMANEVAL_TRAIN,
    TaskError,
    abstract_tasks,
    entry_signature,
    evaluation_split,
    find_task,
    humaneval_task,
    humaneval_tasks,
    longform_tasks,
    save_task,
    split_tasks,
    user_coding_task,
    writing_prompt_task,
    writing_task,
    xsum_tasks,
)

SPLITS = ("train", "validation", "held_out")


def test_humaneval_split_is_fixed_disjoint_and_complete():
    held_out, train = humaneval_tasks("held_out"), humaneval_tasks("train")
    validation = humaneval_tasks("validation")
    assert [t.source_id for t in held_out] == [f"HumanEval/{i}" for i in range(32)]
    assert [t.source_id for t in train] == [f"HumanEval/{i}" for i in range(32, 132)]
    assert [t.source_id for t in validation] == [f"HumanEval/{i}" for i in range(132, 164)]
    assert set(HUMANEVAL_HELD_OUT).isdisjoint(HUMANEVAL_TRAIN)
    assert len(humaneval_tasks("all")) == 164
    assert {t.extra["split"] for t in held_out} == {"held_out"}
    assert {t.extra["split"] for t in train} == {"train"}
    assert {t.extra["split"] for t in validation} == {"validation"}


@pytest.mark.parametrize("task_set", ["coding", "summary", "expansion"])
def test_every_task_set_splits_into_disjoint_train_validation_and_held_out(task_set):
    parts = {split: split_tasks(task_set, split) for split in ("train", "validation", "held_out")}
    ids = {split: {t.source_id for t in tasks} for split, tasks in parts.items()}
    assert len(parts["validation"]) >= 32 and len(parts["held_out"]) >= 30
    assert not ids["train"] & ids["validation"] and not ids["train"] & ids["held_out"]
    assert not ids["validation"] & ids["held_out"]
    assert sum(map(len, parts.values())) == len(split_tasks(task_set, "all"))
    with pytest.raises(TaskError, match="unknown task set"):
        split_tasks("poetry", "train")
    with pytest.raises(TaskError, match="unknown split 'heldout'"):  # not every task, nor none
        split_tasks(task_set, "heldout")


@pytest.mark.parametrize("count", [2, 3])
def test_k_folds_hold_out_every_humaneval_problem_exactly_once(count):
    """K runs, one per fold, evaluate all 164 problems, each on a team that never trained on it:
    within a fold the three splits are disjoint and complete; across folds the held-out parts
    partition the problems."""
    held_out = []
    for number in range(1, count + 1):
        fold = f"{number}/{count}"
        parts = {s: {t.source_id for t in split_tasks("coding", s, fold)} for s in SPLITS}
        assert not parts["train"] & parts["validation"] and not parts["train"] & parts["held_out"]
        assert not parts["validation"] & parts["held_out"]
        assert sum(map(len, parts.values())) == 164
        assert len(parts["validation"]) >= 27 and len(parts["train"]) >= 55
        assert all(evaluation_split("humaneval", i, fold) == "held_out" for i in parts["held_out"])
        assert not any(evaluation_split("humaneval", i, fold) for i in parts["train"])
        held_out += parts["held_out"]
    assert sorted(held_out) == sorted(f"HumanEval/{i}" for i in range(164))
    # a fold is not the fixed split: problem 1 is held out by it and by fold 2/2, trained on by 1/2
    assert evaluation_split("humaneval", "HumanEval/1") == "held_out"
    assert evaluation_split("humaneval", "HumanEval/1", "1/2") is None
    assert evaluation_split("humaneval", "HumanEval/1", " 2 / 2 ") == "held_out"


@pytest.mark.parametrize("fold", ["0/2", "3/2", "1/1", "1/9", "half", "1-2"])
def test_a_fold_that_is_not_one_of_k_is_refused(fold):
    with pytest.raises(TaskError, match="a fold is F/K"):
        split_tasks("coding", "train", fold)


def test_a_fold_splits_the_coding_set_only():
    with pytest.raises(TaskError, match="coding set only"):
        split_tasks("summary", "held_out", "1/2")
    first = xsum_tasks()[0].source_id  # held out of the writing set, fold or not
    assert evaluation_split("xsum", first, "1/2") == evaluation_split("xsum", first) == "held_out"


def test_a_misspelt_split_is_refused_not_read_as_none_or_all():
    for tasks in (humaneval_tasks, longform_tasks):
        with pytest.raises(TaskError, match="unknown split 'heldout': train, validation, held_out"):
            tasks("heldout")


def test_humaneval_task_has_entry_point_tests_and_preamble():
    task = humaneval_task("HumanEval/0")
    assert task == humaneval_task(0) == humaneval_task("0")
    assert task.kind == "coding" and task.entry_point == "has_close_elements"
    assert "def check(candidate)" in task.tests
    assert task.preamble.strip() == "from typing import List"
    # problem 32 gives a helper `poly` beside the stub of `find_zero`: it is part of the preamble
    task = humaneval_task(32)
    assert task.entry_point == "find_zero"
    assert "def poly" in task.preamble and "def find_zero" not in task.preamble
    ast.parse(task.preamble)


@pytest.mark.parametrize("bad", [-1, 164, "HumanEval/x", "abc"])
def test_humaneval_task_rejects_unknown_ids(bad):
    with pytest.raises(TaskError, match="no HumanEval problem"):
        humaneval_task(bad)


def test_user_coding_task_finds_entry_point_and_checks_python():
    prompt = 'import math\n\ndef g(x):\n    return x\n\ndef area(r: float) -> float:\n    """Area of a circle."""\n'
    task = user_coding_task(prompt, tests="assert area(1) > 3\n")
    assert task.entry_point == "area"
    assert "import math" in task.preamble and "def g" in task.preamble
    assert "def area" not in task.preamble
    assert task.tests == "assert area(1) > 3\n"
    assert user_coding_task(prompt, entry_point="g").entry_point == "g"
    with pytest.raises(TaskError, match="not valid Python"):
        user_coding_task("def f(:\n")
    with pytest.raises(TaskError, match="needs a function"):
        user_coding_task("x = 1\n")
    with pytest.raises(TaskError, match="tests are not valid"):
        user_coding_task(prompt, tests="assert (\n")
    with pytest.raises(TaskError, match="no function 'h'"):
        user_coding_task(prompt, entry_point="h")
    with pytest.raises(TaskError, match="characters"):
        user_coding_task("def f():\n    '''" + "x" * 9000 + "'''\n")


def test_writing_sets_are_curated_and_have_references():
    xsum, abstracts = xsum_tasks(), abstract_tasks()
    assert len(xsum) == 150 and len(abstracts) == 150
    assert all(t.form == "summary" and t.reference and 300 <= len(t.prompt) <= 1500 for t in xsum)
    assert all(t.form == "expansion" and len(t.reference) >= 300 for t in abstracts)
    assert len({t.source_id for t in xsum}) == 150
    first = xsum[0]
    assert writing_task(f"xsum/{first.source_id}") == first
    assert writing_task("abstracts/0").prompt.startswith("Enhanced interface")
    with pytest.raises(TaskError, match="unknown writing set"):
        writing_task("reddit/1")
    with pytest.raises(TaskError, match="no task"):
        writing_task("xsum/nope")


def test_find_task_takes_one_source():
    assert find_task("coding", problem="3").source_id == "HumanEval/3"
    # a person's own request is written a section per writer; free-form roles on request
    assert find_task("writing", prompt="Write a haiku about rain.").form == "longform"
    assert find_task("writing", prompt="Write a haiku about rain.", free=True).form == "free"
    with pytest.raises(TaskError, match="free-form roles"):
        find_task("writing", prompt="Tides", sections="A\nB", free=True)
    user = find_task("coding", prompt="def f(x):\n    '''x'''\n", tests="assert f(1) == 1")
    assert user.source == "user" and user.tests
    with pytest.raises(TaskError, match="either"):
        find_task("coding", problem="3", prompt="def f(): pass")
    with pytest.raises(TaskError, match="either"):
        find_task("writing")
    with pytest.raises(TaskError, match="tests go with"):
        find_task("coding", problem="3", tests="assert True")
    with pytest.raises(TaskError, match="empty"):
        writing_prompt_task("   ")


def test_save_task_stores_curated_tasks_once(tmp_path):
    with store.open_db(tmp_path / "t.db") as db:
        task = humaneval_task(5)
        first, again = save_task(db, task), save_task(db, task)
        assert first == again
        row = store.get_task(db, first)
        assert row["kind"] == "coding" and row["source_id"] == "HumanEval/5"
        assert row["metadata"]["entry_point"] == task.entry_point
        assert row["metadata"]["tests"] == task.tests
        assert row["metadata"]["split"] == "held_out"
        free = writing_prompt_task("Write about tea.")
        assert save_task(db, free) != save_task(db, free)  # a person's prompt is a new task


def test_a_problem_given_as_comments_and_a_bare_signature_is_accepted():
    prompt = "# Rotate a list right by k places.\n# rotate([1, 2, 3], 1) == [3, 1, 2]\ndef rotate(items, k):\n"
    task = user_coding_task(prompt, tests="assert rotate([1, 2, 3], 1) == [3, 1, 2]\n")
    assert task.entry_point == "rotate" and task.prompt == prompt  # shown as the person wrote it
    assert task.preamble == ""
    assert entry_signature(task) == ("items, k", "", "Rotate a list right by k places.")
    # a bare signature after given code, over several lines
    task = user_coding_task("import math\n\ndef f(\n    a,\n    b,\n):\n")
    assert task.entry_point == "f" and task.preamble.startswith("import math")
    # other syntax errors are still refused
    with pytest.raises(TaskError, match="not valid Python"):
        user_coding_task("def f(x):\n    return (\n")
