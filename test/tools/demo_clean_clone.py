#!/usr/bin/env python3
"""The README's first command, `bash tools/demo.sh`, in a clean clone of the repository.

    demo_clean_clone.py SOURCE_DIR BUILD_DIR

Clones the committed tree of SOURCE_DIR (git clone) into a temporary folder and runs the demo
there with no Node.js on PATH, then checks that it exited 0, compiled the bundled model, matched
the golden tokens, served it (on the CPU reference engine where there is no NVIDIA driver, as in
CI), answered the chat request, and stopped the server (its port is closed afterwards).

What it proves: the committed tree (not the working copy) holds everything the demo reads
(scripts, models/tiny-llama with its tokenizer), the demo needs no Node.js, and the whole main
job works end to end. What it does not: to keep the test command fast, TELOS_BUILD points at
BUILD_DIR, the build this ctest runs from, so the demo's build step finds telosc and telos-run
built and does nothing; the binaries are the working copy's, and a fresh configure and build
(and the apt installs) are not exercised. The kernel cache is the tests' shared one (ctest sets
TELOS_CACHE_DIR).
Exit 77 (ctest: skipped) when SOURCE_DIR is not a git checkout.
"""
import ctypes
import os
import re
import socket
import subprocess
import sys
import tempfile

NODE_PROGRAMS = {"node", "nodejs", "npm", "npx", "corepack"}


def path_without_node(folder):
    """A PATH of one folder of links to every program on PATH except Node.js's."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            link = os.path.join(folder, name)
            if name not in NODE_PROGRAMS and not os.path.lexists(link):
                os.symlink(os.path.join(directory, name), link)
    return folder


def nvidia_driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def check(condition, message, output):
    if not condition:
        print(output)
        sys.exit(f"demo_clean_clone: {message}")


def main():
    source, build = sys.argv[1], os.path.abspath(sys.argv[2])
    if subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True).returncode:
        print(f"{source} is not a git checkout: nothing to clone")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="telos-demo-") as tmp:
        clone = os.path.join(tmp, "telos")
        subprocess.run(["git", "clone", "--quiet", source, clone], check=True)
        bin_dir = os.path.join(tmp, "bin")
        os.mkdir(bin_dir)
        env = dict(os.environ, PATH=path_without_node(bin_dir), TELOS_BUILD=build)
        env.pop("TELOS_CMAKE_ARGS", None)
        check(subprocess.run(["sh", "-c", "command -v node npm"], env=env,
                             capture_output=True).returncode != 0, "node is still on PATH", "")
        demo = subprocess.run(["bash", "tools/demo.sh"], cwd=clone, env=env, timeout=600,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = demo.stdout
    check(demo.returncode == 0, f"tools/demo.sh exited {demo.returncode}", out)
    check("text: tokenizer and chat template" in out, "the artifact has no tokenizer", out)
    check("greedy ids match transformers'" in out, "no golden check", out)
    served = re.search(r"serving tiny-llama on (http://[0-9.]+:([0-9]+)) with the (\w+) engine", out)
    check(served, "the server did not say where it listens", out)
    if not nvidia_driver_present():
        check("no NVIDIA driver found (libcuda.so.1 is missing); using the CPU reference engine"
              in out and served.group(3) == "cpu", "not served on the CPU reference engine", out)
    check('"object": "chat.completion"' in out and "\nreply (" in out, "no chat reply", out)
    check("telos-run serve: shut down" in out, "the server did not shut down cleanly", out)
    with socket.socket() as probe:
        check(probe.connect_ex(("127.0.0.1", int(served.group(2)))) != 0,
              "the server still listens after the demo", out)
    print(out)
    print(f"demo_clean_clone: ok ({served.group(3)} engine)")


if __name__ == "__main__":
    main()
