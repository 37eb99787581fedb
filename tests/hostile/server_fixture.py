"""server_fixture.py: a misbehaving stand-in for a server under test, for the launcher's failure
paths only (tests/cpu/test_server_launch.cpp). It serves no model and claims no result: it answers
the readiness check, or refuses to, or dies, as --mode says.

  python3 server_fixture.py --port P --mode MODE [--pid-file F] [--spawn] [--state F] [--tp N]

Modes: ok (GET /health 200, GET /version and /resolved JSON), never-ready (/health 503 for ever),
exit-at-start (says why on stderr, exits 3), busy-once (the first start binds its port twice, so
the OS itself says "Address already in use", and exits; later starts, seen through --state, run
as ok), ignore-term (ok, but SIGTERM is ignored). GET /resolved echoes --tp, as a server reports
what it resolved. --spawn starts a child (sleep) in the server's
process group, as real servers start workers; --pid-file receives both pids then "ready".
Standard library only.
"""

import argparse
import http.server
import json
import os
import signal
import socket
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--pid-file")
    ap.add_argument("--state")
    ap.add_argument("--spawn", action="store_true")
    ap.add_argument("--tp", type=int, default=1)
    a = ap.parse_args()
    print("fixture: starting in mode %s on port %d" % (a.mode, a.port), flush=True)
    if a.mode == "exit-at-start":
        print("fixture: cannot load the model (a stand-in failure)", file=sys.stderr, flush=True)
        sys.exit(3)
    if a.mode == "busy-once" and not os.path.exists(a.state):
        open(a.state, "w").close()
        first = socket.socket()
        first.bind(("127.0.0.1", a.port))
        first.listen()
        second = socket.socket()
        second.bind(("127.0.0.1", a.port))  # raises OSError: [Errno 98] Address already in use
    if a.mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids = [os.getpid()]
    if a.spawn:
        pids.append(subprocess.Popen(["sleep", "300"]).pid)
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write("".join("%d\n" % p for p in pids) + "ready\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                if a.mode == "never-ready":
                    self.reply(503, {"status": "loading"})
                else:
                    self.reply(200, {"status": "ok"})
            elif self.path == "/version":
                self.reply(200, {"version": "fixture-1"})
            elif self.path == "/resolved":
                self.reply(200, {"tp": a.tp, "argv": sys.argv[1:]})
            else:
                self.reply(404, {"error": "no such path"})

        def log_message(self, fmt, *args):
            print("fixture: " + fmt % args, file=sys.stderr, flush=True)

    http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
