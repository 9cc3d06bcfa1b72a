"""Sandbox harness: load the candidate, then run the tests' steps and print one line per test.

Reads `job.json` (mode, program, setup, steps, entry point, candidate name, per-test seconds,
timeouts allowed; steps numbered None only prepare and are run as statements) and prints on the
original standard output, one JSON line per test:

- mode "calls" (tests `assert CALL OP EXPECTED`): evaluates only CALL and prints
  `{"unit": i, "value": ENCODED}` or `{"unit": i, "error": "..."}`. The expected values are never
  here: the parent compares. A value must be plain data (exact types only: a subclass could
  answer any comparison); anything else is an error line.
- mode "inside" (tests of any other form): runs each test beside the program and prints
  `{"unit": i, "passed": bool, "message": "..."}`. The expected values are in this process, so a
  determined program can forge these lines: the parent reports such tests as "checked inside
  the sandbox" and weighs them less.
"""

import io
import json
import os
import signal
import sys

MAX_VALUE_CHARS = 65_536
MAX_DEPTH = 50


class Timeout(BaseException):
    """Raised by the per-test alarm (a BaseException so `except Exception` cannot swallow it)."""


class NotPlainData(Exception):
    """The value is not one of the plain types the parent can rebuild."""


def encode(value, depth=0):
    """Tagged JSON for plain data: [tag, payload]; exact types, bounded depth."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None:
        return ["N", None]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", repr(value)]
    if kind is complex:
        return ["c", [repr(value.real), repr(value.imag)]]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if kind in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "S", frozenset: "F"}[kind]
        return [tag, [encode(item, depth + 1) for item in value]]
    if kind is dict:
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise NotPlainData(f"returned a {kind.__name__}, not plain data")


def on_alarm(signum, frame):
    raise Timeout()


def call_step(unit, source, ns, per_test):
    """Mode "calls": (the line for this call's value or error, whether it timed out)."""
    signal.setitimer(signal.ITIMER_REAL, per_test)
    if unit is None:  # a statement that only prepares: its failure is not a test's
        try:
            exec(compile(source, "test.py", "exec"), ns)
        except BaseException:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return None, False
    try:
        value = eval(compile(source, "test.py", "eval"), ns)
        signal.setitimer(signal.ITIMER_REAL, 0)
        line = json.dumps({"unit": unit, "value": encode(value)})
        if len(line) > MAX_VALUE_CHARS:
            raise NotPlainData(f"returned a value over {MAX_VALUE_CHARS} characters")
        return line, False
    except Timeout:
        return json.dumps({"unit": unit, "error": f"timed out after {per_test:g}s"}), True
    except BaseException as e:
        return json.dumps({"unit": unit, "error": (f"{type(e).__name__}: {e}")[:500]}), False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def inside_step(unit, source, ns, per_test):
    """Mode "inside": (the line saying whether this test passed, whether it timed out)."""
    signal.setitimer(signal.ITIMER_REAL, per_test)
    timed_out = False
    try:
        exec(compile(source, "test.py", "exec"), ns)
        passed, message = True, ""
    except Timeout:
        timed_out = True
        passed, message = False, f"timed out after {per_test:g}s"
    except AssertionError as e:
        passed, message = False, f"AssertionError: {e}" if str(e) else "assertion failed"
    except BaseException as e:
        passed, message = False, f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if unit is None:  # a statement that only prepares is not a test
        return None, timed_out
    return json.dumps({"unit": unit, "passed": passed, "message": message[:500]}), timed_out


STEPS = {"calls": call_step, "inside": inside_step}


def main():
    with open("job.json", encoding="utf-8") as f:
        job = json.load(f)
    os.remove("job.json")
    step = STEPS[job["mode"]]
    # results go to a private copy of stdout; fd 1 itself goes to /dev/null so that nothing the
    # program prints (print, os.write(1, ...)) lands among them
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = io.StringIO()

    def report(line):
        out.write(line + "\n")
        out.flush()

    per_test = job["per_test"]
    signal.signal(signal.SIGALRM, on_alarm)
    ns = {"__name__": "candidate"}
    signal.setitimer(signal.ITIMER_REAL, per_test)
    try:
        exec(compile(job["program"], "program.py", "exec"), ns)
        exec(compile(job["setup"], "test.py", "exec"), ns)
    except Timeout:
        report(json.dumps({"load_error": f"loading the program took more than {per_test:g}s"}))
        return
    except BaseException as e:
        report(json.dumps({"load_error": f"{type(e).__name__}: {e}"}))
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if not callable(ns.get(job["entry_point"])):
        report(json.dumps({"load_error": f"the program does not define {job['entry_point']}()"}))
        return
    ns["candidate"] = ns[job["candidate"]] = ns[job["entry_point"]]
    timeouts = 0
    for unit, source in job["steps"]:
        line, timed_out = step(unit, source, ns, per_test)
        timeouts += timed_out
        sys.stdout = io.StringIO()
        if line is None:
            continue
        report(line)
        if timeouts >= job["max_timeouts"]:
            report(json.dumps({"stopped": f"{timeouts} asserts timed out"}))
            return


if __name__ == "__main__":
    main()
