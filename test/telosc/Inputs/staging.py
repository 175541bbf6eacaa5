#!/usr/bin/env python3
"""Staging directories for telosc's cleanup test (compiler/artifact/staging_dir.hpp).

  staging.py kill-during PARENT NAME CMD...   run CMD (a telosc compile to PARENT/NAME) and
                                              SIGKILL it once its staging directory and marked
                                              lock file exist; fails unless it was killed there
  staging.py unmarked PARENT NAME SUFFIX      a staging directory whose lock file lacks
                                              telosc's marker (not telosc's: never removed)
  staging.py hold PARENT NAME CMD...          run CMD while holding the exclusive flock of the
                                              one staging lock of PARENT/NAME (a writer that is
                                              still alive)
"""
import fcntl
import glob
import os
import signal
import subprocess
import sys
import time

MARKER = b"telosc staging lock"


def kill_during(parent, name, cmd):
    proc = subprocess.Popen(cmd)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        for lock in glob.glob(os.path.join(parent, "." + name + ".tmp-*.lock")):
            try:
                with open(lock, "rb") as f:
                    marked = f.read().startswith(MARKER)
            except OSError:
                continue
            if marked and os.path.isdir(lock[:-len(".lock")]):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                print(f"killed {name}'s compile while it staged")
                return 0
        time.sleep(0.001)
    proc.wait()
    sys.exit(f"staging.py: the compile ended (exit {proc.returncode}) before its staging was seen")


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "kill-during":
        return kill_during(args[0], args[1], args[2:])
    if cmd == "unmarked":
        parent, name, suffix = args
        stem = os.path.join(parent, "." + name + ".tmp-" + suffix)
        os.makedirs(stem)
        with open(os.path.join(stem, "weights.bin"), "wb") as f:
            f.write(b"someone else's")
        with open(stem + ".lock", "wb") as f:
            f.write(b"not a telosc lock\n")
        return 0
    if cmd == "hold":
        (lock,) = glob.glob(os.path.join(args[0], "." + args[1] + ".tmp-*.lock"))
        with open(lock, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            return subprocess.run(args[2:]).returncode
    sys.exit(f"staging.py: unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
