"""Programs the sandbox runs as `main.py` around a generated module (never imported by the app).

`runner.py` reads `job.json` from its folder and prints one JSON line per test on the original
standard output and nothing else: in mode "calls" the values of the calls of `assert CALL OP
EXPECTED` tests, in mode "inside" pass/fail of tests of any other form.
"""
