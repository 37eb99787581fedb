#!/usr/bin/env python3
"""http_fixture.py: a fake server under test for the HTTP engine's plumbing tests.

It computes nothing real. For every prompt it returns deterministic fake tokens and logprobs
(token t of a prompt: (sum(prompt) + 3*t) % 97, logprob -(t+1)/8, exact in float32), in the
shape of the dialect the path names: POST .../v1/completions (openai, vLLM's fields), .../generate
(sglang native), .../completion (llama.cpp). The real engines are tested elsewhere (with the
real engine, or against their documented shapes).

The first path segment picks a behaviour, so that one fixture serves every scenario of a run
(engine.url "http://127.0.0.1:PORT/MODE"):
  ok          answer correctly
  bad_json    a body that is not JSON
  few_tokens  one token fewer than asked for
  bad_value   a logprob that does not round-trip through float32
  status500   HTTP 500 with a message
  hang        answer nothing until the client gives up (at most 30 s)
  close       close the connection without answering
  holdN       answer correctly, but each request only once N are in flight together (at most
              2 s: stragglers are waited for briefly; each batch is held anew)
GET /MODE/version answers {"version": "fixture-1"}; GET /stats the most requests it had in
flight together and how many it answered; POST /MODE/flush_cache counts cache resets.

Start: http_fixture.py; it prints its port on the first line of stdout and serves until its
stdin closes (so it never outlives the test that started it).
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Condition()
STATE = {"in_flight": 0, "most_in_flight": 0, "answered": 0, "resets": 0, "releases": 0}


def fake(prompt, max_tokens):
    base = sum(prompt)
    return [(base + 3 * t) % 97 for t in range(max_tokens)], [-(t + 1) / 8 for t in range(max_tokens)]


def prompts_of(value):
    if value and isinstance(value[0], list):
        return value, True
    return [value], False


def answer_openai(body, mode):
    prompts, _ = prompts_of(body["prompt"])
    n = body["max_tokens"] - (1 if mode == "few_tokens" else 0)
    choices = []
    for i, p in enumerate(prompts):
        tokens, values = fake(p, n)
        if mode == "bad_value" and values:
            values[0] = -0.30000000000000004
        choices.append({"index": i, "text": "", "token_ids": tokens, "finish_reason": "length",
                        "logprobs": {"tokens": ["token_id:%d" % t for t in tokens],
                                     "token_logprobs": values}})
    # Out of order on purpose: the client must sort by index.
    return {"object": "text_completion", "choices": list(reversed(choices))}


def answer_sglang(body, mode):
    prompts, batched = prompts_of(body["input_ids"])
    n = body["sampling_params"]["max_new_tokens"] - (1 if mode == "few_tokens" else 0)
    out = []
    for p in prompts:
        tokens, values = fake(p, n)
        if mode == "bad_value" and values:
            values[0] = -0.30000000000000004
        out.append({"text": "", "meta_info": {
            "output_token_logprobs": [[v, t, None] for t, v in zip(tokens, values)]}})
    return out if batched else out[0]


def answer_llama(body, mode):
    prompts, batched = prompts_of(body["prompt"])
    n = body["n_predict"] - (1 if mode == "few_tokens" else 0)
    out = []
    for p in prompts:
        tokens, values = fake(p, n)
        if mode == "bad_value" and values:
            values[0] = -0.30000000000000004
        out.append({"content": "", "tokens": tokens, "completion_probabilities": [
            {"id": t, "token": "", "logprob": v, "top_logprobs": []} for t, v in zip(tokens, values)]})
    return out if batched else out[0]


ANSWERS = {"v1/completions": answer_openai, "generate": answer_sglang, "completion": answer_llama}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/stats":
            with LOCK:
                self.send(200, json.dumps(STATE))
        elif self.path.endswith("/version"):
            self.send(200, json.dumps({"version": "fixture-1"}))
        else:
            self.send(404, '{"error": "no such path"}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        mode, _, rest = self.path.lstrip("/").partition("/")
        if rest == "flush_cache":
            with LOCK:
                STATE["resets"] += 1
            self.send(200, "{}")
            return
        answer = ANSWERS.get(rest)
        if answer is None:
            self.send(404, '{"error": "no such path %s"}' % self.path)
            return
        with LOCK:
            STATE["in_flight"] += 1
            STATE["most_in_flight"] = max(STATE["most_in_flight"], STATE["in_flight"])
            LOCK.notify_all()
            if mode.startswith("hold"):
                # Held until N are in flight together (each batch anew), or 2 s have passed.
                want, deadline = int(mode[4:]), time.monotonic() + 2
                epoch = STATE["releases"]
                if STATE["in_flight"] >= want:
                    STATE["releases"] += 1
                    LOCK.notify_all()
                while STATE["releases"] == epoch and time.monotonic() < deadline:
                    LOCK.wait(deadline - time.monotonic())
        try:
            if mode == "hang":
                time.sleep(30)
                return
            if mode == "close":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if mode == "status500":
                self.send(500, '{"error": "fixture: internal error on purpose"}')
                return
            if mode == "bad_json":
                self.send(200, '{"choices": [ this is not json')
                return
            self.send(200, json.dumps(answer(json.loads(body), mode)))
            with LOCK:
                STATE["answered"] += 1
        finally:
            with LOCK:
                STATE["in_flight"] -= 1


def main():
    # socketserver's listen backlog is 5: a batch of concurrent connections beyond it would wait
    # a SYN retry (1 s) each.
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()  # until the test closes our stdin (or dies)
    server.shutdown()


if __name__ == "__main__":
    main()
