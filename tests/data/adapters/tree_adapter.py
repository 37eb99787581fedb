#!/usr/bin/env python3
"""An adapter that leaves processes behind, to prove that none of them outlives bih.

On init it starts, when init.options.spawn is true, the descendants real engines leave: a plain
child (sleep), a double-forked setsid() daemon and a multiprocessing child (spawn context, as
vLLM's EngineCore; with it comes multiprocessing's resource tracker). Every one of them inherits
its stdout. Their pids and its own go to init.options.pid_file, one per line, then "ready".

init.options.mode picks what it does next: "ok" answers (and exits at shutdown with os._exit, so
Python cleans nothing up), "error" answers generate with an error, "hang" hangs in generate,
"exit_on_generate" exits at once (its children still hold its stdout), "never_reads" stops
reading stdin after init, "exit5_at_shutdown" exits with status 5 at shutdown,
"ignores_shutdown" ignores it, "huge_line" answers generate with one line of 200 MB,
"stderr_flood" writes 500 MB to stderr without a newline and exits.
"""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def sleep_forever():
    while True:
        time.sleep(3600)


def start_daemon():
    """A double fork with setsid() in between: the daemon is no child of ours, nor in our group."""
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            sleep_forever()
        os._exit(0)
    os.close(write_end)
    os.waitpid(first, 0)
    pid = int(os.read(read_end, 32).decode())
    os.close(read_end)
    return pid


def spawn_descendants():
    pids = [os.getpid()]
    pids.append(subprocess.Popen(["sleep", "600"]).pid)
    pids.append(start_daemon())
    child = multiprocessing.get_context("spawn").Process(target=sleep_forever)
    child.start()
    pids.append(child.pid)
    return pids


def main():
    init = json.loads(sys.stdin.readline())
    options = init.get("options", {})
    mode = options.get("mode", "ok")
    pids = spawn_descendants() if options.get("spawn") else [os.getpid()]
    if options.get("pid_file"):
        with open(options["pid_file"] + ".tmp", "w") as f:
            f.write("".join(f"{p}\n" for p in pids) + "ready\n")
        os.rename(options["pid_file"] + ".tmp", options["pid_file"])
    print(f"tree adapter: mode={mode!r} pids={pids}", file=sys.stderr, flush=True)
    send({"type": "hello", "protocol": "bih.engine/1",
          "engine": {"name": "tree", "version": "0"}, "value": "logprob",
          "settings": {"mode": mode}})
    if mode == "never_reads":
        sleep_forever()
    for line in sys.stdin:
        request = json.loads(line)
        if request["type"] == "shutdown":
            if mode == "ignores_shutdown":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                sleep_forever()
            os._exit(5 if mode == "exit5_at_shutdown" else 0)
        if mode == "hang":
            send({"type": "progress", "text": "about to hang"})
            sleep_forever()
        if mode == "exit_on_generate":
            print("tree adapter: exiting with status 3, children keep stdout", file=sys.stderr,
                  flush=True)
            os._exit(3)
        if mode == "error":
            send({"type": "error", "id": request["id"], "message": "out of memory"})
            continue
        if mode == "huge_line":
            sys.stdout.write("x" * (200 << 20) + "\n")
            sys.stdout.flush()
            continue
        if mode == "stderr_flood":
            chunk = "y" * (1 << 20)
            for _ in range(500):
                sys.stderr.write(chunk)
            sys.stderr.flush()
            os._exit(4)
        seqs = []
        for p in request["prompts"]:
            n = request["max_tokens"]
            seqs.append({"tokens": [(p[0] + t) % 7 for t in range(n)], "values": ["0xbf800000"] * n})
        send({"type": "result", "id": request["id"], "sequences": seqs})


if __name__ == "__main__":
    main()
