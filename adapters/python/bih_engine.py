"""bih_engine.py: the bih.engine/1 protocol loop for adapters written in Python.

An adapter subclasses Adapter and calls run(MyAdapter()). The loop (docs/engine-protocol.md)
reads JSON lines from stdin, answers init with hello (or unsupported / error), each generate with
result (or error), and returns on shutdown or end of input. Only protocol lines reach the real
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
    if len(outputs) != len(prompts):
        raise ValueError("adapter returned %d sequences for %d prompts" % (len(outputs), len(prompts)))
    sequences = []
    for i, (tokens, values) in enumerate(outputs):
        tokens = [int(t) for t in tokens]
        values = [float32_bits(v) for v in values]
        if len(tokens) != max_tokens or len(values) != max_tokens:
            raise ValueError(
                "sequence %d has %d tokens and %d values; expected %d of each"
                % (i, len(tokens), len(values), max_tokens)
            )
        sequences.append({"tokens": tokens, "values": values})
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
        if kind != "generate":
            writer.send({"type": "error", "message": "unexpected message type %r" % kind})
            continue
        request_id = request.get("id")
        try:
            prompts, max_tokens = request["prompts"], int(request["max_tokens"])
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
