#!/usr/bin/env python3
"""Summarize a ctest run from its JUnit file (ctest --output-junit): the skipped tests grouped by
the reason they give, the slowest tests, and one last line "N passed, N failed, N skipped".

    python3 tools/ctest_report.py BUILD/ctest-junit.xml [--slowest N]

A skip's reason is what the test printed: a GoogleTest skip's message (the lines after
"FILE:LINE: Skipped"), lit's line after "UNSUPPORTED: ...", else the test's last line of output.
A test ctest could not run (its program was not built) counts as failed, as ctest counts it.
"""
import argparse
import collections
import re
import sys
import xml.etree.ElementTree as ET

SKIP_MESSAGES = ("SKIP_REGULAR_EXPRESSION_MATCHED", "SKIP_RETURN_CODE")


def skip_reason(output):
    lines = [line.rstrip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        if re.search(r":\d+: Skipped$", line):
            reason = []
            for following in lines[i + 1:]:
                if following.startswith("[  SKIPPED ]") or not following:
                    break
                reason.append(following.strip())
            if reason:
                return " ".join(reason)
        if line.startswith("UNSUPPORTED: ") and i + 1 < len(lines) and lines[i + 1]:
            return lines[i + 1].strip()
    meaningful = [line.strip() for line in lines if line.strip() and not line.startswith("*")]
    return meaningful[-1] if meaningful else "(no reason printed)"


def classify(case):
    """'passed', 'failed' or 'skipped', and for a skip its reason."""
    if case.get("status") == "fail" or case.find("failure") is not None:
        return "failed", None
    skipped = case.find("skipped")
    if case.get("status") == "notrun" or skipped is not None:
        message = skipped.get("message", "") if skipped is not None else ""
        if message.startswith(SKIP_MESSAGES):
            return "skipped", skip_reason(case.findtext("system-out") or "")
        return "failed", None
    return "passed", None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("junit")
    ap.add_argument("--slowest", type=int, default=10)
    args = ap.parse_args()
    try:
        cases = ET.parse(args.junit).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        sys.exit(f"ctest_report: {args.junit}: {e}")

    counts = collections.Counter()
    by_reason = collections.defaultdict(list)
    times = []
    for case in cases:
        outcome, reason = classify(case)
        counts[outcome] += 1
        if reason is not None:
            by_reason[reason].append(case.get("name"))
        times.append((float(case.get("time") or 0), case.get("name")))

    if by_reason:
        print(f"\nSkipped tests, by reason ({counts['skipped']}):")
        for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1])):
            print(f"  {reason}  [{len(names)}]")
            for name in names:
                print(f"      {name}")
    print(f"\nThe {min(args.slowest, len(times))} slowest tests:")
    for seconds, name in sorted(times, reverse=True)[:args.slowest]:
        print(f"  {seconds:8.1f} s  {name}")
    print(f"\n{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")


if __name__ == "__main__":
    main()
