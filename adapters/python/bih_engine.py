"""bih_engine.py: the bih.engine/1 protocol loop for adapters written in Python.

An adapter subclasses Adapter and calls run(MyAdapter()). The loop (docs/engine-protocol.md)
reads JSON lines from stdin, answers init with hello (or unsupported / error), each generate with
result (or error), each score with result when the adapter can score (Adapter.score), and returns
on shutdown or end of input. Only protocol lines reach the real
stdout: anything a library prints -- Python's sys.stdout and, when run() owns the process's
stdout, the file descriptor 1 that C extensions write to -- is sent to stderr, bih's log.

Values travel as float32 bit patterns ("0x%08x"), so -0.0, denormals, infinities and NaN payloads
reach bih exactly. Python 3.8+ standard library only.
"""

import json
import os
import struct
import sys
import threading
import traceback

PROTOCOL = "bih.engine/1"


class Unsupported(Exception):
    """Raised by Adapter.start to decline a scenario (a knob the engine cannot honour)."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Adapter:
    """What an adapter implements. `name`/`version` identify the adapter itself in hello."""

    name = "bih-python-adapter"
    version = "1"

    def start(self, init):
        """Loads the engine for `init`; returns {"engine": {"name", "version"}, "settings": {...},
        "value": "logprob" | "probability"} (optionally "capabilities"). Raise Unsupported(reason)
        to decline."""
        raise NotImplementedError

    def generate(self, prompts, max_tokens):
        """Runs `prompts` (lists of token ids) as ONE batch, greedy, ignoring EOS; returns one
        (tokens, values) pair per prompt, in order, each of max_tokens entries. May set
        self.last_stats = {"steps": N, "rows": N} for the result's stats."""
        raise NotImplementedError

    # compare.top_k / row_digest (docs/prefill-and-top-k.md): set by the loop before each generate
    # and score call; an adapter that announced capabilities.top_k / row_digest in start's hello
    # returns, per sequence, a third element {"top_k_ids", "top_k_values", "row_digests"} (see
    # top_k_of and row_digest below). 0 / False: not asked.
    request_top_k = 0
    request_row_digest = False

    def score(self, sequences):
        """Scores each (prompt, tokens) pair in ONE prefill over prompt + tokens (teacher forcing);
        returns per pair (tokens, values[, extras]) with one entry per forced token: the prefill's
        argmax (ties to the lowest id) and the forced token's value. Override it only if the
        engine can: the loop then announces capabilities.score in hello."""
        raise NotImplementedError

    def reset_cache(self):
        """Empties the engine's prefix (KV) cache, so that the next generate runs cold. Override
        it only if the engine can: the loop then announces capabilities.reset_cache in hello and
        answers bih's reset_cache with reset_done (or error, if this raises)."""
        raise NotImplementedError

    def shutdown(self):
        """Releases the engine."""


def float32_bits(value):
    """The IEEE-754 float32 bit pattern of `value` as "0x%08x" (a float64 rounds to float32)."""
    if isinstance(value, str):
        return value  # already a bit pattern
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", float(value)))[0]


def top_k_of(logprobs, k):
    """The k best (id, value) of one row (value descending, ties to the lower id) as two lists."""
    order = sorted(range(len(logprobs)), key=lambda j: (-logprobs[j], j))[:k]
    return [int(j) for j in order], [logprobs[j] for j in order]


def row_digest(logits):
    """FNV-1a 64 over the row's float32 bit patterns, one 32-bit word at a time in id order
    (h = (h ^ word) * 0x100000001b3 mod 2^64 from 0xcbf29ce484222325), as 16 hex digits: what
    bih's engine computes (models/row_extras.hpp). `logits` are floats, or float32 bit patterns
    as "0x%08x" strings or as ints (an int is always a bit pattern, never a value)."""
    h = 0xCBF29CE484222325
    for v in logits:
        if isinstance(v, str):
            word = int(v, 16)
        elif isinstance(v, int):
            word = v & 0xFFFFFFFF
        else:
            word = struct.unpack("<I", struct.pack("<f", float(v)))[0]
        h = ((h ^ word) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def _extras_json(i, extras, lengths_expected):
    """The optional fields of one result sequence, checked before bih sees them."""
    out = {}
    if not extras:
        return out
    if "top_k_ids" in extras or "top_k_values" in extras:
        ids = [[int(t) for t in row] for row in extras["top_k_ids"]]
        values = [[float32_bits(v) for v in row] for row in extras["top_k_values"]]
        if len(ids) != lengths_expected or len(values) != lengths_expected:
            raise ValueError("sequence %d has %d top-k lists; expected %d" % (i, len(ids), lengths_expected))
        out["top_k_ids"], out["top_k_values"] = ids, values
    if "row_digests" in extras:
        digests = [str(d) for d in extras["row_digests"]]
        if len(digests) != lengths_expected:
            raise ValueError("sequence %d has %d row digests; expected %d" % (i, len(digests), lengths_expected))
        out["row_digests"] = digests
    return out


class _Writer:
    """The protocol stream: one JSON object per line, flushed, one writer at a time."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, message):
        line = json.dumps(message, separators=(",", ":"), allow_nan=False)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


_writer = None


def progress(text):
    """Shows `text` on bih's progress line (any time during a request; ignored outside run())."""
    if _writer is not None:
        _writer.send({"type": "progress", "text": str(text)})


def _last_line(exc):
    """The traceback's last line ("ValueError: what went wrong"); the whole one goes to stderr."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip() if lines else type(exc).__name__


def _result(request_id, outputs, prompts, max_tokens, stats):
    """max_tokens: an int (generate) or one count per sequence (score)."""
    if len(outputs) != len(prompts):
        raise ValueError("adapter returned %d sequences for %d prompts" % (len(outputs), len(prompts)))
    lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(prompts)
    sequences = []
    for i, output in enumerate(outputs):
        tokens, values = output[0], output[1]
        extras = output[2] if len(output) > 2 else None
        tokens = [int(t) for t in tokens]
        values = [float32_bits(v) for v in values]
        if len(tokens) != lengths[i] or len(values) != lengths[i]:
            raise ValueError(
                "sequence %d has %d tokens and %d values; expected %d of each"
                % (i, len(tokens), len(values), lengths[i])
            )
        sequence = {"tokens": tokens, "values": values}
        sequence.update(_extras_json(i, extras, lengths[i]))
        sequences.append(sequence)
    message = {"type": "result", "id": request_id, "sequences": sequences}
    if stats:
        message["stats"] = stats
    return message


def _serve(adapter, lines, writer):
    """The exchange itself; returns the exit status."""
    first = next(lines, None)
    try:
        init = json.loads(first) if first is not None else None
    except ValueError:
        writer.send({"type": "error", "message": "first line is not JSON: %.200s" % first})
        return 1
    if not isinstance(init, dict) or init.get("type") != "init":
        writer.send({"type": "error", "message": "expected an init message first"})
        return 1
    if init.get("protocol") != PROTOCOL:
        writer.send({"type": "error", "message": "unknown protocol %r; this adapter speaks %s"
                     % (init.get("protocol"), PROTOCOL)})
        return 1
    try:
        hello = adapter.start(init) or {}
    except Unsupported as e:
        writer.send({"type": "unsupported", "reason": e.reason})
        return 0
    except Exception as e:  # noqa: BLE001 -- every failure is an error verdict, quoted
        writer.send({"type": "error", "message": _last_line(e)})
        return 1
    message = {
        "type": "hello",
        "protocol": PROTOCOL,
        "engine": hello.get("engine", {}),
        "adapter": {"name": adapter.name, "version": adapter.version},
        "value": hello.get("value", "logprob"),
        "settings": hello.get("settings", {}),
    }
    capabilities = dict(hello.get("capabilities", {}))
    if type(adapter).reset_cache is not Adapter.reset_cache:
        capabilities.setdefault("reset_cache", True)
    if type(adapter).score is not Adapter.score:
        capabilities.setdefault("score", True)
    if capabilities:
        message["capabilities"] = capabilities
    writer.send(message)

    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            writer.send({"type": "error", "message": "not JSON: %.200s" % line})
            continue
        kind = request.get("type") if isinstance(request, dict) else None
        if kind == "shutdown":
            break
        if kind == "reset_cache" and message.get("capabilities", {}).get("reset_cache"):
            try:
                adapter.reset_cache()
                writer.send({"type": "reset_done"})
            except Exception as e:  # noqa: BLE001
                writer.send({"type": "error", "message": _last_line(e)})
            continue
        if kind == "score" and message.get("capabilities", {}).get("score"):
            request_id = request.get("id")
            try:
                pairs = [(s["prompt"], s["tokens"]) for s in request["sequences"]]
                adapter.request_top_k = int(request.get("top_k", 0))
                adapter.request_row_digest = bool(request.get("row_digest", False))
                outputs = adapter.score(pairs)
                writer.send(_result(request_id, outputs, pairs, [len(t) for _, t in pairs], None))
            except Exception as e:  # noqa: BLE001
                writer.send({"type": "error", "id": request_id, "message": _last_line(e)})
            continue
        if kind != "generate":
            writer.send({"type": "error", "message": "unexpected message type %r" % kind})
            continue
        request_id = request.get("id")
        try:
            prompts, max_tokens = request["prompts"], int(request["max_tokens"])
            adapter.request_top_k = int(request.get("top_k", 0))
            adapter.request_row_digest = bool(request.get("row_digest", False))
            adapter.last_stats = None
            outputs = adapter.generate(prompts, max_tokens)
            writer.send(_result(request_id, outputs, prompts, max_tokens, adapter.last_stats))
        except Exception as e:  # noqa: BLE001
            writer.send({"type": "error", "id": request_id, "message": _last_line(e)})
    try:
        adapter.shutdown()
    except Exception as e:  # noqa: BLE001 -- the results are in; say so on stderr only
        _last_line(e)
    return 0


def run(adapter, stdin=None, stdout=None):
    """Serves the protocol for `adapter`; returns the exit status (pass it to sys.exit).

    With stdout None the process's own stdout becomes the protocol stream and fd 1 is pointed at
    stderr, so C-level writes cannot corrupt it either; tests pass their own streams."""
    global _writer
    if stdout is None:
        sys.stdout.flush()
        protocol_fd = os.dup(1)
        os.dup2(2, 1)
        stdout = os.fdopen(protocol_fd, "w", encoding="utf-8", buffering=1)
    stdin = stdin if stdin is not None else sys.stdin
    saved_stdout = sys.stdout
    sys.stdout = sys.stderr  # print() from libraries goes to the log
    _writer = _Writer(stdout)
    try:
        return _serve(adapter, iter(stdin.readline, ""), _writer)
    finally:
        _writer = None
        sys.stdout = saved_stdout
