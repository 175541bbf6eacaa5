#!/usr/bin/env python3
"""Units of tools/serve_bench.py that need no server: statistics, goodput, the Poisson schedule
and the workloads (deterministic under the seed), the metrics scrape's arithmetic, the docs
section writer and the plot; and the command line's refusals (exit codes 2 and 1, clear
messages, no traceback), which run the script itself.

    serve_bench_units.py SRC_ROOT
"""
import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

SRC = sys.argv.pop(1)
TOOL = os.path.join(SRC, "tools", "serve_bench.py")
sys.path.insert(0, os.path.join(SRC, "tools"))
import serve_bench as sb  # noqa: E402


def row(rate, ttft_p99, itl_p99, errors=None):
    return {"rate": rate, "errors": errors or {}, "ttft_ms": {"p99": ttft_p99},
            "itl_ms": {"p99": itl_p99}}


class Percentile(unittest.TestCase):
    def test_interpolates_between_order_statistics(self):
        values = [10, 1, 9, 2, 8, 3, 7, 4, 6, 5]  # unsorted on purpose
        self.assertAlmostEqual(sb.percentile(values, 50), 5.5)
        self.assertAlmostEqual(sb.percentile(values, 90), 9.1)
        self.assertAlmostEqual(sb.percentile(values, 99), 9.91)
        self.assertEqual(sb.percentile(values, 0), 1)
        self.assertEqual(sb.percentile(values, 100), 10)

    def test_one_value_and_none(self):
        self.assertEqual(sb.percentile([3.0], 99), 3.0)
        self.assertIsNone(sb.percentile([], 50))

    def test_distribution_is_in_milliseconds(self):
        d = sb.distribution_ms([0.001, 0.002, 0.003])
        self.assertAlmostEqual(d["p50"], 2.0)
        self.assertAlmostEqual(d["mean"], 2.0)
        self.assertEqual(sb.distribution_ms([]), {"p50": None, "p90": None, "p99": None,
                                                  "mean": None})


class Goodput(unittest.TestCase):
    def test_largest_rate_up_to_which_every_rate_meets_the_objectives(self):
        rows = [row("inf", 50, 10), row(16, 2000, 10), row(1, 100, 10), row(4, 900, 49)]
        self.assertEqual(sb.goodput_rate(rows, 1000, 50), 4)

    def test_every_rate_meets_them(self):
        self.assertEqual(sb.goodput_rate([row(1, 1, 1), row("inf", 2, 2)], 1000, 50), "inf")

    def test_none_meets_them(self):
        self.assertIsNone(sb.goodput_rate([row(1, 100, 60), row(2, 1, 1)], 1000, 50))

    def test_errors_and_missing_figures_fail(self):
        self.assertIsNone(sb.goodput_rate([row(1, 1, 1, {"HTTP 429": 1})], 1000, 50))
        self.assertIsNone(sb.goodput_rate([row(1, 1, None)], 1000, 50))

    def test_objectives_are_strict_bounds(self):
        self.assertIsNone(sb.goodput_rate([row(1, 1000, 1)], 1000, 50))
        self.assertEqual(sb.goodput_rate([row(1, 1000, 1)], 1001, 50), 1)


class Arrivals(unittest.TestCase):
    def test_deterministic_under_the_seed(self):
        self.assertEqual(sb.poisson_arrivals(50, 4.0, 7), sb.poisson_arrivals(50, 4.0, 7))
        self.assertNotEqual(sb.poisson_arrivals(50, 4.0, 7), sb.poisson_arrivals(50, 4.0, 8))

    def test_starts_at_zero_and_never_goes_back(self):
        t = sb.poisson_arrivals(100, 2.0, 0)
        self.assertEqual(t[0], 0.0)
        self.assertTrue(all(b >= a for a, b in zip(t, t[1:])))

    def test_rates_are_stretched_copies(self):
        for a, b in zip(sb.poisson_arrivals(20, 1.0, 3), sb.poisson_arrivals(20, 4.0, 3)):
            self.assertAlmostEqual(a / 4.0, b)

    def test_mean_gap_is_one_over_the_rate(self):
        t = sb.poisson_arrivals(20001, 5.0, 0)
        self.assertAlmostEqual(t[-1] / 20000, 0.2, delta=0.2 * 0.03)

    def test_inf_sends_everything_at_once(self):
        self.assertEqual(sb.poisson_arrivals(5, math.inf, 0), [0.0] * 5)


class Workloads(unittest.TestCase):
    def total(self, spec):
        return len(spec.prompt) + spec.output_len

    def test_deterministic_under_the_seed(self):
        for name in sb.WORKLOADS:
            a = sb.build_workload(name, 30, 8448, 128256, 1)
            self.assertEqual(a, sb.build_workload(name, 30, 8448, 128256, 1), name)
            self.assertNotEqual(a, sb.build_workload(name, 30, 8448, 128256, 2), name)

    def test_every_request_fits_and_ids_are_in_the_vocabulary(self):
        for name in sb.WORKLOADS:
            for max_seq_len in (64, 256, 8448):
                for spec in sb.build_workload(name, 40, max_seq_len, 512, 0):
                    self.assertLessEqual(self.total(spec), max_seq_len, name)
                    self.assertGreaterEqual(spec.output_len, sb.MIN_OUTPUT)
                    self.assertTrue(spec.prompt and all(0 <= t < 512 for t in spec.prompt))

    def test_sharegpt_lengths_follow_the_stated_distribution(self):
        specs = sb.build_workload("sharegpt", 4000, 1 << 20, 512, 0)
        prompts = [len(s.prompt) for s in specs]
        self.assertAlmostEqual(sb.percentile(prompts, 50), sb.PROMPT_LEN.median, delta=8)
        self.assertAlmostEqual(sb.percentile([s.output_len for s in specs], 50),
                               sb.OUTPUT_LEN.median, delta=15)
        self.assertLessEqual(max(prompts), sb.PROMPT_LEN.hi)

    def test_shared_prefix_shares_its_system_prompt(self):
        specs = sb.build_workload("shared-prefix", 10, 8448, 128256, 0)
        prefix = specs[0].prompt[:sb.SYSTEM_PROMPT_LEN]
        self.assertTrue(all(s.prompt[:sb.SYSTEM_PROMPT_LEN] == prefix for s in specs))
        self.assertEqual(len({tuple(s.prompt[sb.SYSTEM_PROMPT_LEN:]) for s in specs}), 10)
        small = sb.build_workload("shared-prefix", 3, 256, 512, 0)
        self.assertTrue(all(s.prompt[:128] == small[0].prompt[:128] for s in small))

    def test_multi_turn_conversations_fit_whole(self):
        specs = sb.build_workload("multi-turn", 10, 256, 512, 0)
        self.assertEqual([s.conversation for s in specs], [0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
        for c in range(3):
            turns = [s for s in specs if s.conversation == c]
            self.assertLessEqual(sum(self.total(s) for s in turns), 256)

    def test_long_prompts_arrive_among_the_mix(self):
        specs = sb.build_workload("long-prompts", 30, 8448, 128256, 0)
        long = [s.index for s in specs if len(s.prompt) == sb.LONG_PROMPT_LEN]
        self.assertEqual(long, [5, 15, 25])

    def test_a_context_too_small_is_refused(self):
        with self.assertRaisesRegex(sb.BenchError, "max_model_len leaves 2 tokens"):
            sb.build_workload("multi-turn", 4, 8, 512, 0)


class Summaries(unittest.TestCase):
    def test_latencies_of_one_request(self):
        r = sb.RequestResult(0, 10, 4, start=1.0, chunk_times=[1.5, 1.6, 1.8, 1.9],
                             token_ids=[1, 2, 3, 4])
        ttft, tpot, itl = sb.request_latencies(r)
        self.assertAlmostEqual(ttft, 0.5)
        self.assertAlmostEqual(tpot, 0.4 / 3)
        self.assertEqual([round(x, 6) for x in itl], [0.1, 0.2, 0.1])

    def test_errors_are_counted_by_kind_and_left_out_of_the_latencies(self):
        ok = sb.RequestResult(0, 10, 2, start=0.0, chunk_times=[0.1, 0.2], token_ids=[1, 2],
                              cached_tokens=8)
        refused = sb.RequestResult(1, 10, 2, error="HTTP 429: busy")
        short = sb.RequestResult(2, 10, 2, error="short output: 1 of 2 tokens")
        s = sb.summarize(4.0, [ok, refused, short], 2.0)
        self.assertEqual((s["rate"], s["requests"], s["completed"]), (4, 3, 1))
        self.assertEqual(s["errors"], {"HTTP 429": 1, "short output": 1})
        self.assertAlmostEqual(s["ttft_ms"]["p99"], 100.0)
        self.assertAlmostEqual(s["output_tokens_per_s"], 1.0)
        self.assertEqual(s["cached_prompt_tokens"], 8)

    def test_metrics_deltas_and_peak(self):
        text = ("# HELP x\ntelos_kv_pages_used 3\ntelos_http_responses_total{code=\"200\"} 9\n"
                "telos_prefix_cache_queries_total 100\n")
        self.assertEqual(sb.parse_metrics(text), {"telos_kv_pages_used": 3.0,
                                                  "telos_prefix_cache_queries_total": 100.0})
        before = {"telos_prefix_cache_queries_total": 100, "telos_prefix_cache_hits_total": 10,
                  "telos_preemptions_total": 1, "telos_time_to_first_token_seconds_sum": 1.0,
                  "telos_time_to_first_token_seconds_count": 10,
                  "telos_request_queue_seconds_sum": 0.25, "telos_request_queue_seconds_count": 10}
        after = {"telos_prefix_cache_queries_total": 300, "telos_prefix_cache_hits_total": 60,
                 "telos_preemptions_total": 1, "telos_kv_pages_used": 0, "telos_kv_pages_total": 64,
                 "telos_time_to_first_token_seconds_sum": 1.5,
                 "telos_time_to_first_token_seconds_count": 15,
                 "telos_request_queue_seconds_sum": 0.28125, "telos_request_queue_seconds_count": 15}
        samples = [{"telos_kv_pages_used": 5}, {}, {"telos_kv_pages_used": 9}]
        m = sb.metrics_summary(before, after, samples)
        self.assertEqual(m, {"prefix_cache_hit_rate": 0.25, "kv_pages_used_peak": 9,
                             "kv_pages_total": 64, "preemptions": 0,
                             "server_ttft_ms_mean": 100.0, "server_queue_ms_mean": 6.25})
        self.assertIsNone(sb.metrics_summary({}, {}, [])["prefix_cache_hit_rate"])


def report(workload="shared-prefix", cache_runs=(True, False)):
    rates = []
    for i, rate in enumerate([1, 4, "inf"]):
        rates.append({"rate": rate, "requests": 2, "completed": 2, "errors": {},
                      "request_throughput": 1.0, "output_tokens_per_s": 10.0,
                      "ttft_ms": {"p50": 10.0 * (i + 1), "p90": 20.0, "p99": 30.0},
                      "tpot_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
                      "itl_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "itl_p99_over_p50": 3.0,
                      "prefix_cache_hit_rate": 0.5, "kv_pages_used_peak": 7, "kv_pages_total": 64})
    return {"meta": {"date": "today", "command": "test", "hardware": "none", "engine": "cpu",
                     "model": "tiny", "max_model_len": 256, "workload": workload,
                     "workload_description": "test", "num_requests": 2, "seed": 0,
                     "slo_ttft_ms": 1000.0, "slo_itl_ms": 50.0},
            "runs": [{"prefix_cache": c, "rates": rates, "goodput_rate": "inf"}
                     for c in cache_runs]}


class DocsSection(unittest.TestCase):
    BEFORE = "# Benchmarks\n\nbench_suite's tables\n\n"
    AFTER = "\nafter the section\n"

    def section(self, inner):
        return (f"{sb.SECTION_BEGIN}\n## Serving benchmark\n\nhow it works\n{inner}"
                f"{sb.SECTION_END}\n")

    def test_replaces_only_its_workload(self):
        a_begin, a_end = sb.workload_markers("sharegpt")
        b_begin, b_end = sb.workload_markers("shared-prefix")
        other = f"{a_begin}\nsharegpt results\n{a_end}\n"
        text = self.BEFORE + self.section(other + f"{b_begin}\nold\n{b_end}\n") + self.AFTER
        new = sb.replace_workload_section(text, "shared-prefix", "new", "f.md")
        self.assertEqual(new, self.BEFORE + self.section(other + f"{b_begin}\nnew\n{b_end}\n")
                         + self.AFTER)

    def test_adds_a_new_workload_at_the_end_of_the_section(self):
        text = self.BEFORE + self.section("") + self.AFTER
        new = sb.replace_workload_section(text, "multi-turn", "results", "f.md")
        begin, end = sb.workload_markers("multi-turn")
        self.assertEqual(new, self.BEFORE + self.section(f"{begin}\nresults\n{end}\n") + self.AFTER)

    def test_adds_the_section_when_absent(self):
        new = sb.replace_workload_section(self.BEFORE, "sharegpt", "results", "f.md")
        self.assertTrue(new.startswith(self.BEFORE.rstrip("\n") + "\n\n" + sb.SECTION_BEGIN))
        end = sb.workload_markers("sharegpt")[1]
        self.assertTrue(new.endswith(f"{end}\n{sb.SECTION_END}\n"))

    def test_broken_markers_are_refused_and_nothing_is_written(self):
        begin, _ = sb.workload_markers("sharegpt")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "benchmarks.md")
            text = self.BEFORE + self.section(f"{begin}\nno end marker\n")
            with open(path, "w") as f:
                f.write(text)
            with self.assertRaisesRegex(sb.BenchError, r"benchmarks\.md: expected one '<!-- "
                                        r"serve_bench sharegpt: begin -->' followed by one"):
                sb.write_docs(path, report("sharegpt"))
            with open(path) as f:
                self.assertEqual(f.read(), text)
            self.assertEqual(os.listdir(d), ["benchmarks.md"])

    def test_writes_the_section_and_the_plot_beside_it(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "benchmarks.md")
            with open(path, "w") as f:
                f.write(self.BEFORE + self.section("") + self.AFTER)
            sb.write_docs(path, report())
            with open(path) as f:
                text = f.read()
            self.assertTrue(text.startswith(self.BEFORE + sb.SECTION_BEGIN))
            self.assertTrue(text.endswith(sb.SECTION_END + "\n" + self.AFTER))
            self.assertIn("![TTFT and ITL against the request rate]"
                          "(serve_bench_shared-prefix.svg)", text)
            self.assertIn("| inf | 2 / 0 |", text)
            self.assertTrue(os.path.exists(os.path.join(d, "serve_bench_shared-prefix.svg")))

    def test_bench_suite_keeps_the_section(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "benchmarks.md")
            self.assertEqual(sb.kept_serving_section(path), "")
            with open(path, "w") as f:
                f.write(self.BEFORE + self.section("x\n") + self.AFTER)
            self.assertEqual(sb.kept_serving_section(path), self.section("x\n"))
            with open(path, "w") as f:  # no end marker: everything from the begin marker
                f.write(self.BEFORE + sb.SECTION_BEGIN + "\nrest\n")
            self.assertEqual(sb.kept_serving_section(path), sb.SECTION_BEGIN + "\nrest\n")


class Plot(unittest.TestCase):
    def test_one_line_per_series_and_run(self):
        svg = ET.fromstring(sb.latency_svg(report()))
        lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
        self.assertEqual(len(lines), 2 * len(sb.SERIES))
        self.assertEqual(sum(1 for l in lines if l.get("stroke-dasharray")), len(sb.SERIES))
        dots = svg.findall("{http://www.w3.org/2000/svg}circle")
        self.assertEqual(len(dots), 2 * len(sb.SERIES) * 3)  # runs, series, rates
        self.assertEqual(sb.latency_svg(report()), sb.latency_svg(report()))

    def test_nothing_to_plot(self):
        r = report(cache_runs=(True,))
        for x in r["runs"][0]["rates"]:
            x["ttft_ms"] = x["itl_ms"] = {"p50": None, "p99": None}
        self.assertIsNone(sb.latency_svg(r))


class Client(unittest.TestCase):
    """The streaming client against canned HTTP answers (a loopback server that sends `reply`
    whole, whatever the request)."""

    def stream(self, reply, output_len=2):
        async def go():
            async def answer(reader, writer):
                await reader.readuntil(b"\r\n\r\n")
                writer.write(reply)
                await writer.drain()
                writer.close()

            server = await asyncio.start_server(answer, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            target = sb.Target(f"http://127.0.0.1:{port}", model="m")
            async with server:
                spec = sb.RequestSpec(0, [1, 2, 3], output_len)
                return await sb.send(target, spec, spec.prompt, "s")
        return asyncio.run(go())

    @staticmethod
    def chunked(*events):
        body = b"".join(f"data: {e}\n\n".encode() for e in events)
        half = len(body) // 2  # two chunks, split inside an event
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]))
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")

    def token(self, *ids):
        return json.dumps({"choices": [{"index": 0, "text": "", "token_ids": list(ids)}]})

    def test_a_whole_stream(self):
        usage = json.dumps({"choices": [],
                            "usage": {"prompt_tokens_details": {"cached_tokens": 16}}})
        r = self.stream(self.chunked(self.token(5), self.token(6, 7), usage, "[DONE]"),
                        output_len=3)
        self.assertIsNone(r.error)
        self.assertEqual((r.token_ids, len(r.chunk_times), r.cached_tokens), ([5, 6, 7], 2, 16))

    def test_fewer_tokens_than_asked_for(self):
        r = self.stream(self.chunked(self.token(5), "[DONE]"), output_len=2)
        self.assertEqual(r.error, "short output: 1 of 2 tokens")

    def test_a_refusal(self):
        body = b'{"error": {"message": "too many requests"}}'
        r = self.stream(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body))
        self.assertEqual(r.error, 'HTTP 429: {"error": {"message": "too many requests"}}')

    def test_an_error_inside_the_stream(self):
        r = self.stream(self.chunked(self.token(5), json.dumps({"error": {"message": "boom"}})))
        self.assertEqual(r.error, "stream error: boom")

    def test_a_connection_cut_short(self):
        r = self.stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\ndata: ")
        self.assertTrue(r.error.startswith("connection: IncompleteReadError"), r.error)


def free_port():
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CommandLine(unittest.TestCase):
    def run_tool(self, *args):
        res = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                             timeout=120)
        self.assertNotIn("Traceback", res.stderr)
        return res.returncode, res.stderr

    def assert_fails(self, code, message, *args):
        rc, err = self.run_tool(*args)
        self.assertEqual(rc, code, err)
        self.assertIn(message, err)

    def test_usage_errors_exit_2(self):
        self.assert_fails(2, "argument --workload: invalid choice: 'chat'", "a.telos",
                          "--workload", "chat")
        for bad in ("0", "-1", "abc", "1,,2", "nan"):
            self.assert_fails(2, "argument --rates: expected request rates > 0 (requests/s) or "
                              f"'inf', comma-separated; got", "a.telos", "--rates", bad)
        self.assert_fails(2, "argument --num-requests: expected a whole number >= 1, got '0'",
                          "a.telos", "--num-requests", "0")
        self.assert_fails(2, "argument --slo-itl-ms: expected a number > 0, got 'inf'",
                          "a.telos", "--slo-itl-ms", "inf")
        self.assert_fails(2, "give ARTIFACT to serve, or --url of a running server")
        self.assert_fails(2, "--url: expected http://HOST:PORT, got 'localhost:8000'",
                          "--url", "localhost:8000", "--vocab-size", "10")
        self.assert_fails(2, "--url needs ARTIFACT or --vocab-size", "--url", "http://h:1")
        self.assert_fails(2, "not with --url", "--url", "http://h:1", "--vocab-size", "10",
                          "--compare-no-prefix-cache")
        self.assert_fails(2, "not allowed with argument", "a.telos", "--no-prefix-cache",
                          "--compare-no-prefix-cache")
        self.assert_fails(2, "--out /no/such/folder/r.json: the folder /no/such/folder does not "
                          "exist", "a.telos", "--out", "/no/such/folder/r.json")
        self.assert_fails(2, "--write-docs /no/such/folder/b.md: the folder", "a.telos",
                          "--write-docs", "/no/such/folder/b.md")

    def test_unreachable_server_exits_1(self):
        url = f"http://127.0.0.1:{free_port()}"
        self.assert_fails(1, f"serve_bench: cannot reach {url}/health: ConnectionRefusedError",
                          "--url", url, "--vocab-size", "10")

    def test_unreadable_artifact_exits_1(self):
        with tempfile.TemporaryDirectory() as d:
            self.assert_fails(1, f"serve_bench: {d}/none.telos/manifest.json: cannot read "
                              "model.vocab_size", os.path.join(d, "none.telos"))
            os.mkdir(os.path.join(d, "bad.telos"))
            with open(os.path.join(d, "bad.telos", "manifest.json"), "w") as f:
                json.dump({"model": {"vocab_size": "many"}}, f)
            self.assert_fails(1, "manifest.json: model.vocab_size: expected a whole number >= 1, "
                              "got 'many'", os.path.join(d, "bad.telos"))

    def test_missing_telos_run_exits_1(self):
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "a.telos"))
            with open(os.path.join(d, "a.telos", "manifest.json"), "w") as f:
                json.dump({"model": {"vocab_size": 10}}, f)
            self.assert_fails(1, f"serve_bench: cannot start {d}/no-telos-run:",
                              os.path.join(d, "a.telos"), "--telos-run",
                              os.path.join(d, "no-telos-run"))


if __name__ == "__main__":
    unittest.main(verbosity=1)
