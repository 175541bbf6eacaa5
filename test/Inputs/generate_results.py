"""Reads `telos-run generate --json --dump-logits` output and measures how far two logit vectors
are apart; shared by the lit suites' checkers (executor/Inputs/check_golden.py,
telosc/plan/Inputs/logits_near.py, telosc/import/Inputs/same_results.py), which import it from
this folder."""
import json
import math


def load_results(path):
    """The results in the JSONL file at `path`, one dict a non-blank line."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rel_l2(got, want):
    """The relative L2 error of `got` against `want` (the absolute one where `want` is all zero)."""
    num = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want)))
    den = math.sqrt(sum(w * w for w in want))
    return num / den if den else num
