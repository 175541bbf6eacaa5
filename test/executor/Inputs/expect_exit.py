#!/usr/bin/env python3
"""Runs a command and succeeds only if it exits with the given code (lit's `not` accepts any
non-zero code; telos-run documents specific ones).

    expect_exit.py CODE COMMAND [ARGS...]
"""
import subprocess
import sys

code = int(sys.argv[1])
got = subprocess.run(sys.argv[2:]).returncode
if got != code:
    print(f"expect_exit: {sys.argv[2]} exited with {got}, expected {code}", file=sys.stderr)
    sys.exit(1)
