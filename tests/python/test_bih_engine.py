"""test_bih_engine.py: the Python adapters' protocol loop (adapters/python/bih_engine.py).

A tiny in-test adapter answers through run() with in-memory streams; one test runs an adapter as
a real subprocess to check that library output cannot reach the protocol stream.
"""

import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "adapters", "python"))
import bih_engine  # noqa: E402

INIT = {"type": "init", "protocol": "bih.engine/1", "model": {"format": "hf", "path": "/m"},
        "knobs": {}, "options": {}, "limits": {"max_batch": 4, "max_model_len": 64, "max_tokens": 3}}

# float32 values whose bit patterns must survive: -0.0, the smallest denormal, -inf, NaN payload.
SPECIAL = [-0.0, struct.unpack("<f", struct.pack("<I", 1))[0], float("-inf"),
           struct.unpack("<f", struct.pack("<I", 0x7FC00001))[0]]


class Echo(bih_engine.Adapter):
    """Token t of prompt p is p[0] + t; values cycle through SPECIAL; prompt [666] fails."""

    name = "echo"

    def __init__(self, decline=None):
        self.decline = decline
        self.stopped = False

    def start(self, init):
        if self.decline:
            raise bih_engine.Unsupported(self.decline)
        print("library chatter")  # must land on stderr, not the protocol stream
        return {"engine": {"name": "echo", "version": "0.1"}, "settings": {"k": 1}}

    def generate(self, prompts, max_tokens):
        if prompts and prompts[0] == [666]:
            raise ValueError("prompt 666 is cursed")
        bih_engine.progress("step 1")
        self.last_stats = {"steps": max_tokens, "rows": max_tokens * len(prompts)}
        return [([p[0] + t for t in range(max_tokens)],
                 [SPECIAL[t % len(SPECIAL)] for t in range(max_tokens)]) for p in prompts]

    def shutdown(self):
        self.stopped = True


def exchange(adapter, *messages):
    """(exit status, protocol lines as objects, captured stderr text); a str message is sent raw."""
    stdin = io.StringIO("".join((m if isinstance(m, str) else json.dumps(m)) + "\n"
                                for m in messages))
    stdout, stderr = io.StringIO(), io.StringIO()
    saved = sys.stderr
    sys.stderr = stderr
    try:
        status = bih_engine.run(adapter, stdin=stdin, stdout=stdout)
    finally:
        sys.stderr = saved
    return status, [json.loads(line) for line in stdout.getvalue().splitlines()], stderr.getvalue()


def generate(request_id, prompts, max_tokens=4):
    return {"type": "generate", "id": request_id, "prompts": prompts, "max_tokens": max_tokens,
            "greedy": True, "ignore_eos": True}


class ProtocolLoop(unittest.TestCase):
    def test_hello_then_result_with_exact_bit_patterns(self):
        adapter = Echo()
        status, lines, log = exchange(adapter, INIT, generate(7, [[5, 1], [9]]), {"type": "shutdown"})
        self.assertEqual(status, 0)
        hello = lines[0]
        self.assertEqual(hello["type"], "hello")
        self.assertEqual(hello["protocol"], "bih.engine/1")
        self.assertEqual(hello["engine"], {"name": "echo", "version": "0.1"})
        self.assertEqual(hello["value"], "logprob")
        self.assertEqual(hello["settings"], {"k": 1})
        self.assertEqual(hello["adapter"]["name"], "echo")
        self.assertEqual(lines[1], {"type": "progress", "text": "step 1"})
        result = lines[2]
        self.assertEqual(result["type"], "result")
        self.assertEqual(result["id"], 7)
        self.assertEqual(result["stats"], {"steps": 4, "rows": 8})
        self.assertEqual([s["tokens"] for s in result["sequences"]], [[5, 6, 7, 8], [9, 10, 11, 12]])
        # -0.0, the smallest denormal, -inf, a NaN with a payload: bit for bit.
        self.assertEqual(result["sequences"][0]["values"],
                         ["0x80000000", "0x00000001", "0xff800000", "0x7fc00001"])
        self.assertEqual(len(lines), 3)
        self.assertTrue(adapter.stopped)
        self.assertIn("library chatter", log)

    def test_reset_cache_is_announced_and_answered_only_when_implemented(self):
        # Echo does not override reset_cache: no capability, and a reset_cache is refused.
        _, lines, _ = exchange(Echo(), INIT, {"type": "reset_cache"}, {"type": "shutdown"})
        self.assertNotIn("capabilities", lines[0])
        self.assertEqual(lines[1]["type"], "error")

        class Resettable(Echo):
            resets = 0

            def reset_cache(self):
                self.resets += 1
                if self.resets == 2:
                    raise RuntimeError("cache locked")

        adapter = Resettable()
        _, lines, _ = exchange(adapter, INIT, {"type": "reset_cache"}, generate(1, [[3]], 1),
                               {"type": "reset_cache"}, {"type": "shutdown"})
        self.assertEqual(lines[0]["capabilities"], {"reset_cache": True})
        self.assertEqual(lines[1], {"type": "reset_done"})
        self.assertEqual(lines[3]["type"], "result")
        self.assertEqual(lines[4], {"type": "error", "message": "RuntimeError: cache locked"})
        self.assertEqual(adapter.resets, 2)

    def test_score_is_announced_and_answered_only_when_implemented(self):
        # Echo does not override score: no capability, and a score request is refused.
        request = {"type": "score", "id": 3, "sequences": [{"prompt": [5, 1], "tokens": [2, 7]}]}
        _, lines, _ = exchange(Echo(), INIT, request, {"type": "shutdown"})
        self.assertNotIn("capabilities", lines[0])
        self.assertEqual(lines[1]["type"], "error")

        class Scorer(Echo):
            asked = None

            def score(self, sequences):
                self.asked = (sequences, self.request_top_k, self.request_row_digest)
                out = []
                for prompt, tokens in sequences:
                    logprobs = [-1.0, -0.5, -0.5, -3.0]  # a tie: ids 1 and 2
                    ids, values = bih_engine.top_k_of(logprobs, self.request_top_k)
                    out.append(([prompt[0]] * len(tokens), [-0.5] * len(tokens),
                                {"top_k_ids": [ids] * len(tokens),
                                 "top_k_values": [values] * len(tokens),
                                 "row_digests": [bih_engine.row_digest(logprobs)] * len(tokens)}))
                return out

        adapter = Scorer()
        request.update({"top_k": 2, "row_digest": True})
        _, lines, _ = exchange(adapter, INIT, request, {"type": "shutdown"})
        self.assertEqual(lines[0]["capabilities"], {"score": True})
        self.assertEqual(adapter.asked, ([([5, 1], [2, 7])], 2, True))
        result = lines[1]
        self.assertEqual(result["type"], "result")
        self.assertEqual(result["id"], 3)
        seq = result["sequences"][0]
        self.assertEqual(seq["tokens"], [5, 5])
        self.assertEqual(seq["values"], ["0xbf000000", "0xbf000000"])
        # Value descending, the tie to the lower id.
        self.assertEqual(seq["top_k_ids"], [[1, 2], [1, 2]])
        self.assertEqual(seq["top_k_values"], [["0xbf000000", "0xbf000000"]] * 2)
        self.assertEqual(len(seq["row_digests"]), 2)
        self.assertRegex(seq["row_digests"][0], "^[0-9a-f]{16}$")

    def test_row_digest_is_fnv1a_over_float32_words(self):
        # One word by hand: (offset ^ 0x3f800000) * prime mod 2^64.
        expected = ((0xCBF29CE484222325 ^ 0x3F800000) * 0x100000001B3) & (2**64 - 1)
        self.assertEqual(bih_engine.row_digest([1.0]), "%016x" % expected)
        self.assertEqual(bih_engine.row_digest(["0x3f800000"]), "%016x" % expected)
        self.assertEqual(bih_engine.row_digest([0x3F800000]), "%016x" % expected)
        self.assertNotEqual(bih_engine.row_digest([0.0]), bih_engine.row_digest([-0.0]))

    def test_float32_bits(self):
        self.assertEqual(bih_engine.float32_bits(1.0), "0x3f800000")
        self.assertEqual(bih_engine.float32_bits(-0.0), "0x80000000")
        self.assertEqual(bih_engine.float32_bits(float("inf")), "0x7f800000")
        self.assertEqual(bih_engine.float32_bits(0.1), "0x3dcccccd")  # float64 rounds to float32
        self.assertEqual(bih_engine.float32_bits("0x00000001"), "0x00000001")

    def test_exception_becomes_an_error_line_and_the_loop_goes_on(self):
        status, lines, log = exchange(Echo(), INIT, generate(1, [[666]]), generate(2, [[3]], 1),
                                      {"type": "shutdown"})
        self.assertEqual(status, 0)
        self.assertEqual(lines[1], {"type": "error", "id": 1,
                                    "message": "ValueError: prompt 666 is cursed"})
        self.assertEqual(lines[3]["type"], "result")
        self.assertEqual(lines[3]["id"], 2)
        self.assertIn("Traceback", log)  # the whole traceback is in the log

    def test_unsupported(self):
        status, lines, _ = exchange(Echo(decline="no TP here"), INIT)
        self.assertEqual(status, 0)
        self.assertEqual(lines, [{"type": "unsupported", "reason": "no TP here"}])

    def test_wrong_protocol_and_bad_lines(self):
        status, lines, _ = exchange(Echo(), dict(INIT, protocol="bih.engine/9"))
        self.assertEqual(status, 1)
        self.assertEqual(lines[0]["type"], "error")
        self.assertIn("bih.engine/9", lines[0]["message"])
        _, lines, _ = exchange(Echo(), INIT, "not json", {"type": "bogus"}, {"type": "shutdown"})
        self.assertEqual(lines[1]["type"], "error")
        self.assertIn("not JSON: not json", lines[1]["message"])
        self.assertIn("unexpected message type 'bogus'", lines[2]["message"])

    def test_wrong_number_of_tokens_is_an_error(self):
        class Short(Echo):
            def generate(self, prompts, max_tokens):
                return [([1], [0.0]) for _ in prompts]

        _, lines, _ = exchange(Short(), INIT, generate(3, [[1]], 2))
        self.assertEqual(lines[1]["type"], "error")
        self.assertIn("expected 2", lines[1]["message"])


class RealProcess(unittest.TestCase):
    def test_library_output_goes_to_stderr(self):
        script = textwrap.dedent("""
            import os, sys
            sys.path.insert(0, %r)
            import bih_engine
            class A(bih_engine.Adapter):
                def start(self, init):
                    print("python print")
                    os.write(1, b"C-level write\\n")
                    return {"engine": {"name": "a", "version": "1"}}
                def generate(self, prompts, max_tokens):
                    return [([0] * max_tokens, [-1.5] * max_tokens) for _ in prompts]
            sys.exit(bih_engine.run(A()))
        """ % os.path.join(ROOT, "adapters", "python"))
        stdin = "\n".join(json.dumps(m) for m in (INIT, generate(1, [[4]], 2), {"type": "shutdown"}))
        done = subprocess.run([sys.executable, "-c", script], input=stdin + "\n",
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]  # every line is protocol
        self.assertEqual([l["type"] for l in lines], ["hello", "result"])
        self.assertEqual(lines[1]["sequences"][0]["values"], ["0xbfc00000", "0xbfc00000"])
        self.assertIn("python print", done.stderr)
        self.assertIn("C-level write", done.stderr)


if __name__ == "__main__":
    unittest.main()
