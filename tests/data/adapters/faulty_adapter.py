#!/usr/bin/env python3
"""An adapter that breaks bih.engine/1 on purpose, to test how bih records a failing engine.

It runs no model: it exists only to fail in the ways real adapters fail. init.options.fault picks
the failure: crash_on_init, crash_on_generate, hang_on_generate, not_json, wrong_count,
token_out_of_range, wrong_id, error_reply, unsupported, stdout_noise, bad_value, ignores_shutdown;
init.options.pid_file, when set, receives the adapter's pid (to check that it does not outlive bih).
"""
import json
import os
import signal
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(prompts, max_tokens, lie=None):
    seqs = []
    for p in prompts:
        tokens = [(p[0] + t) % 7 for t in range(max_tokens)]
        values = ["0xbf800000"] * max_tokens  # -1.0
        seqs.append({"tokens": tokens, "values": values})
    if lie == "wrong_count":
        seqs[0]["tokens"] = seqs[0]["tokens"][:-1]
    if lie == "token_out_of_range":
        seqs[-1]["tokens"][0] = 10**9
    if lie == "bad_value":
        seqs[0]["values"][0] = "minus one"
    return seqs


def main():
    init = json.loads(sys.stdin.readline())
    fault = init.get("options", {}).get("fault", "")
    pid_file = init.get("options", {}).get("pid_file")
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
    print(f"faulty adapter: fault={fault!r}", file=sys.stderr, flush=True)
    if fault == "crash_on_init":
        print("Traceback (most recent call last):\nRuntimeError: model failed to load", file=sys.stderr)
        sys.exit(1)
    if fault == "unsupported":
        knobs = init.get("knobs", {})
        send({"type": "unsupported", "reason": f"this engine has no knob {sorted(knobs)}"})
        return
    if fault == "stdout_noise":
        print("loading model... done")  # a library printing to stdout
    send({"type": "hello", "protocol": "bih.engine/1",
          "engine": {"name": "faulty", "version": "0"}, "value": "logprob",
          "settings": {"fault": fault}})
    for line in sys.stdin:
        request = json.loads(line)
        if request["type"] == "shutdown":
            if fault == "ignores_shutdown":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                time.sleep(3600)
            return
        prompts, n = request["prompts"], request["max_tokens"]
        if fault == "crash_on_generate":
            print("Segmentation fault in the engine's kernel", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if fault == "hang_on_generate":
            send({"type": "progress", "text": "about to hang"})
            time.sleep(3600)
        if fault == "not_json":
            sys.stdout.write("Result: tokens=[1, 2, 3]\n")
            sys.stdout.flush()
            continue
        if fault == "error_reply":
            send({"type": "error", "id": request["id"], "message": "CUDA out of memory"})
            continue
        rid = request["id"] + (1 if fault == "wrong_id" else 0)
        send({"type": "result", "id": rid, "sequences": answer(prompts, n, fault)})


if __name__ == "__main__":
    main()
