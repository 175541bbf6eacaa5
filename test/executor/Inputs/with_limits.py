#!/usr/bin/env python3
"""Runs a command under resource limits, for the tests of what a full disk or a small memory does.

    with_limits.py [--file-size BYTES] [--address-space BYTES] COMMAND [ARGS...]

--file-size sets RLIMIT_FSIZE with SIGXFSZ ignored, so that a write past it fails with EFBIG
("File too large") the way one to a full disk fails with ENOSPC; --address-space sets RLIMIT_AS.
Exits with the command's exit code.
"""
import os
import resource
import signal
import sys

args = sys.argv[1:]
while args and args[0].startswith("--"):
    flag, value = args[0], int(args[1])
    args = args[2:]
    if flag == "--file-size":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # SIG_IGN survives exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (value, value))
    elif flag == "--address-space":
        resource.setrlimit(resource.RLIMIT_AS, (value, value))
    else:
        sys.exit(f"with_limits.py: unknown flag {flag}")
os.execvp(args[0], args)
