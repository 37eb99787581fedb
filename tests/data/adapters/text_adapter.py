#!/usr/bin/env python3
"""An adapter that writes text bih must carry safely: bytes that are not UTF-8, long multi-byte
text, step stats of the wrong type. It runs no model.

init.options.mode picks what it does (raw bytes are written with sys.stdout.buffer, as a
localized engine or a careless print would):
  latin1_error     answers generate with an error whose message holds a Latin-1 byte
  latin1_hello     a hello whose engine version holds a Latin-1 byte
  latin1_progress  a progress line with a Latin-1 byte before its result
  latin1_stderr    Latin-1 bytes and a long UTF-8 line on stderr, correct results
  latin1_crash     Latin-1 bytes on stderr, then exits 1 on generate
  long_utf8_error  an error message of 3001 bytes: 'a' and 1500 'é' (a cut at 2000 splits one)
  stats_text       result stats {"steps": "six"}
  stats_negative   result stats {"rows": -1}
  (anything else)  correct results
"""
import json
import sys

out = sys.stdout.buffer
err = sys.stderr.buffer


def send_bytes(data):
    out.write(data + b"\n")
    out.flush()


def send(message):
    send_bytes(json.dumps(message).encode())


def main():
    init = json.loads(sys.stdin.readline())
    mode = init.get("options", {}).get("mode", "")
    err.write(("text adapter: mode=" + mode + "\n").encode())
    err.flush()
    if mode in ("latin1_stderr", "latin1_crash"):
        err.write(b"avertissement: m\xe9moire presque pleine\n")
        err.write(("a" + "\u00e9" * 400 + "\n").encode())  # cut at 300 bytes inside an 'é'
        err.flush()
    if mode == "latin1_hello":
        send_bytes(b'{"type": "hello", "protocol": "bih.engine/1", '
                   b'"engine": {"name": "text", "version": "caf\xe9"}, "settings": {}}')
    else:
        send({"type": "hello", "protocol": "bih.engine/1",
              "engine": {"name": "text", "version": "1"}, "settings": {"mode": mode}})
    for line in sys.stdin:
        request = json.loads(line)
        if request["type"] == "shutdown":
            return
        rid, prompts, n = request["id"], request["prompts"], request["max_tokens"]
        if mode == "latin1_error":
            send_bytes(b'{"type": "error", "id": %d, "message": "m\xe9moire insuffisante"}' % rid)
            continue
        if mode == "long_utf8_error":
            send({"type": "error", "id": rid, "message": "a" + "\u00e9" * 1500})
            continue
        if mode == "latin1_crash":
            err.write(b"erreur fatale: d\xe9passement\n")
            err.flush()
            sys.exit(1)
        if mode == "latin1_progress":
            send_bytes(b'{"type": "progress", "text": "\xe9tape 1"}')
        seqs = [{"tokens": [(p[0] + t) % 7 for t in range(n)], "values": ["0xbf800000"] * n}
                for p in prompts]
        message = {"type": "result", "id": rid, "sequences": seqs}
        if mode == "stats_text":
            message["stats"] = {"steps": "six"}
        if mode == "stats_negative":
            message["stats"] = {"steps": 1, "rows": -1}
        send(message)


if __name__ == "__main__":
    main()
