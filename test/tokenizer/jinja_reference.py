"""Renders chat templates with Python Jinja2 configured as transformers' apply_chat_template
configures it (sandboxed, trim_blocks, lstrip_blocks, loop controls, raise_exception,
strftime_now, and a tojson that keeps non-ASCII text and key order), the ground truth for what
a model saw in training.

  python3 jinja_reference.py CASES_JSON
CASES_JSON: an array of {"template": str, "variables": {...}}; prints an array of {"text": str}
or {"error": str}. Exits 2 when Jinja2 is missing.
"""
import json
import sys
from datetime import datetime

try:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("jinja_reference.py: Python Jinja2 is missing: run tools/setup.sh (Debian package python3-jinja2)\n")
    sys.exit(2)


def raise_exception(message):
    raise TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"text": env.from_string(case["template"]).render(**case["variables"])})
        except Exception as e:  # every failure is a result to compare, not a crash
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


main()
