"""Sandbox harness: run tests of any form beside the candidate and print whether each passed.

Reads `job.json` (program, setup, steps, entry point, candidate name, per-test seconds, timeouts
allowed; steps numbered None only prepare) and prints `{"unit": i, "passed": bool, "message": "..."}` per test. The expected values
are in this process, so a determined program can forge these lines: the parent reports such tests
as "checked inside the sandbox" and weighs them less. Tests of the form `assert CALL == EXPECTED`
go through `calls.py` instead.
"""

import io
import json
import os
import signal
import sys


class Timeout(BaseException):
    """Raised by the per-test alarm (a BaseException so `except Exception` cannot swallow it)."""


def on_alarm(signum, frame):
    raise Timeout()


def main():
    with open("job.json", encoding="utf-8") as f:
        job = json.load(f)
    os.remove("job.json")
    # results go to a private copy of stdout; fd 1 goes to /dev/null (see calls.py)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = io.StringIO()

    def report(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    per_test = job["per_test"]
    signal.signal(signal.SIGALRM, on_alarm)
    ns = {"__name__": "candidate"}
    signal.setitimer(signal.ITIMER_REAL, per_test)
    try:
        exec(compile(job["program"], "program.py", "exec"), ns)
        exec(compile(job["setup"], "test.py", "exec"), ns)
    except Timeout:
        report({"load_error": f"loading the program took more than {per_test:g}s"})
        return
    except BaseException as e:
        report({"load_error": f"{type(e).__name__}: {e}"})
        return
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if not callable(ns.get(job["entry_point"])):
        report({"load_error": f"the program does not define {job['entry_point']}()"})
        return
    ns["candidate"] = ns[job["candidate"]] = ns[job["entry_point"]]
    timeouts = 0
    for unit, source in job["steps"]:
        signal.setitimer(signal.ITIMER_REAL, per_test)
        try:
            exec(compile(source, "test.py", "exec"), ns)
            passed, message = True, ""
        except Timeout:
            timeouts += 1
            passed, message = False, f"timed out after {per_test:g}s"
        except AssertionError as e:
            passed, message = False, f"AssertionError: {e}" if str(e) else "assertion failed"
        except BaseException as e:
            passed, message = False, f"{type(e).__name__}: {e}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout = io.StringIO()
        if unit is None:  # a statement that only prepares is not a test
            continue
        report({"unit": unit, "passed": passed, "message": message[:500]})
        if timeouts >= job["max_timeouts"]:
            report({"stopped": f"{timeouts} asserts timed out"})
            return


if __name__ == "__main__":
    main()
