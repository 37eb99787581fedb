#!/usr/bin/env python3
"""run_mutations.py: plants each bug of mutations.json, one at a time, in a throw-away copy of the
working tree and runs the whole cpu suite on it; prints which bugs the suite caught and which tests
caught each.

Not part of CI: each mutation is an incremental build plus a full `ctest -L cpu` (minutes). Run it
when a change touches the code the list plants bugs in, and quote its last line.

A mutation is (file, original snippet, replacement), not a diff, so that it still applies after
unrelated edits of the file; one whose snippet is gone (or no longer unique) is reported as "does
not apply" and should be updated. The copy (default /tmp/bih-mutations-<user>/src) and its build
folder persist between runs, so only the first run builds everything; the copy is re-synced with
the working tree (tracked and untracked, not ignored, files) at every start.

  python3 tests/mutations/run_mutations.py                 # every mutation
  python3 tests/mutations/run_mutations.py --only kv-budget-one-rank --only gate-left-no-report-all-ids
  python3 tests/mutations/run_mutations.py --check         # which snippets still apply; no build
  python3 tests/mutations/run_mutations.py --first-failure # each caught bug ends the suite early
  python3 tests/mutations/run_mutations.py --in-place build --target bih --target bih_cpu_tests
      # no copy: plants each bug in the working tree itself (restored after each, and on ^C) and
      # builds an existing build folder of it; faster, but leave the tree alone while it runs

Exit code: 0 when every mutation applied and was caught, 1 otherwise (2: the tool itself failed).
"""
import argparse
import filecmp
import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load_mutations(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != "bih.mutations/1":
        sys.exit(f"{path}: at /schema: expected \"bih.mutations/1\"")
    seen = set()
    for i, m in enumerate(doc["mutations"]):
        for key in ("id", "file", "bug", "original", "replacement"):
            if not isinstance(m.get(key), str):
                sys.exit(f"{path}: at /mutations/{i}/{key}: missing or not a string")
        if m["id"] in seen:
            sys.exit(f"{path}: at /mutations/{i}/id: duplicate id {m['id']}")
        seen.add(m["id"])
    return doc["mutations"]


def applies(text, m):
    """'' when the snippet occurs exactly once in text, else why the mutation does not apply."""
    n = text.count(m["original"])
    if n == 0:
        return "does not apply (snippet not found)"
    if n > 1:
        return f"does not apply (snippet found {n} times)"
    return ""


def sync_copy(src):
    """Mirrors the working tree's tracked and untracked, not ignored, files into src; a file whose
    bytes are unchanged keeps its mtime, so the build stays incremental."""
    listed = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout.decode().split("\0")
    wanted = {p for p in listed if p and os.path.isfile(os.path.join(REPO, p))}
    for rel in wanted:
        a, b = os.path.join(REPO, rel), os.path.join(src, rel)
        if os.path.exists(b) and filecmp.cmp(a, b, shallow=False):
            continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copy2(a, b)
    for root, _, files in os.walk(src):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), src)
            if rel not in wanted:
                os.remove(os.path.join(root, name))


def run_logged(cmd, log, timeout=None):
    with open(log, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            out.write(f"(killed after {timeout} s)\n")
            return 124


def build(args, src, bld, log):
    if not os.path.exists(os.path.join(bld, "build.ninja")):
        cmake = ["cmake", "-S", src, "-B", bld, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache",
                 "-DBIH_CUDA=" + args.cuda] + args.cmake_arg
        if run_logged(cmake, log) != 0:
            return False
    targets = [x for t in args.target for x in ("--target", t)]
    return run_logged(["cmake", "--build", bld, "-j", str(args.jobs)] + targets, log) == 0


FAILED_LINE = re.compile(r"^\s*\d+\s+-\s+(\S+)\s+\((.*)\)\s*$")


def run_suite(args, bld, log, stop_on_failure=False, skip=()):
    """The cpu tests that failed (name -> ctest's reason), or None when ctest did not run.
    stop_on_failure: ctest stops starting tests at the first failure (a caught mutation then
    names the first tests that caught it, not all); `skip`: tests left out (the baseline's
    failures, which would otherwise stop it at once)."""
    start = os.path.getsize(log) if os.path.exists(log) else 0
    cmd = ["ctest", "--test-dir", bld, "-L", "cpu", "-j", str(args.test_jobs),
           "--timeout", str(args.test_timeout)]
    if stop_on_failure:
        cmd.append("--stop-on-failure")
        # ctest starts the slowest tests first when it has their past costs; without them it
        # goes in test order, where the quick unit tests of each file come before the long
        # runs, so a caught bug stops the suite in seconds rather than after the slow ones.
        cost = os.path.join(bld, "Testing", "Temporary", "CTestCostData.txt")
        if os.path.exists(cost):
            os.remove(cost)
    if skip:
        cmd += ["-E", "^(" + "|".join(re.escape(t) for t in sorted(skip)) + ")$"]
    rc = run_logged(cmd, log)
    with open(log) as f:
        f.seek(start)
        text = f.read()
    if "tests passed" not in text and "No tests were found" in text:
        return None
    failed = {}
    in_list = False
    for line in text.splitlines():
        if line.startswith("The following tests FAILED"):
            in_list = True
            continue
        if in_list:
            match = FAILED_LINE.match(line)
            if match:
                failed[match.group(1)] = match.group(2)
            elif line.strip() and not line.startswith("\t"):
                in_list = False
    if rc != 0 and not failed:
        return None
    return failed


def shown(tests, limit=3):
    names = sorted(tests)
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", default=os.path.join(HERE, "mutations.json"))
    p.add_argument("--only", action="append", default=[], help="a mutation id (repeatable)")
    p.add_argument("--check", action="store_true", help="only say which mutations apply")
    p.add_argument("--work", default=f"/tmp/bih-mutations-{getpass.getuser()}",
                   help="the throw-away copy and its build folder (kept between runs)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="build jobs")
    p.add_argument("--test-jobs", type=int, default=2, help="ctest -j")
    p.add_argument("--test-timeout", type=int, default=300, help="seconds per test")
    p.add_argument("--cuda", default="OFF", choices=["OFF", "AUTO", "ON"],
                   help="BIH_CUDA of the copy's build (the cpu label never links CUDA)")
    p.add_argument("--cmake-arg", action="append", default=[])
    p.add_argument("--target", action="append", default=[],
                   help="build only these targets (repeatable; default all)")
    p.add_argument("--in-place", metavar="BUILD_DIR",
                   help="mutate the working tree itself and build BUILD_DIR, an existing build of "
                        "it, instead of a copy")
    p.add_argument("--first-failure", action="store_true",
                   help="per mutation, stop the suite at its first failure (ctest "
                        "--stop-on-failure): minutes instead of a whole suite per caught bug; "
                        "the baseline still runs whole")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the suite run on the unmutated copy (its failures are then not "
                        "subtracted)")
    args = p.parse_args()
    # SIGTERM unwinds like ^C, so that a planted bug is always taken out again.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    mutations = load_mutations(args.list)
    if args.only:
        unknown = set(args.only) - {m["id"] for m in mutations}
        if unknown:
            sys.exit(f"--only: no mutation {', '.join(sorted(unknown))} in {args.list}")
        mutations = [m for m in mutations if m["id"] in args.only]

    if args.check:
        bad = 0
        for m in mutations:
            with open(os.path.join(REPO, m["file"])) as f:
                why = applies(f.read(), m)
            bad += bool(why)
            print(f"{m['id']:<42} {m['file']:<30} {why or 'applies'}")
        return 1 if bad else 0

    logs = os.path.join(args.work, "logs")
    os.makedirs(logs, exist_ok=True)
    if args.in_place:
        src, bld = REPO, os.path.abspath(args.in_place)
        if not os.path.exists(os.path.join(bld, "build.ninja")):
            sys.exit(f"--in-place: {bld} is not a configured build folder")
    else:
        src, bld = os.path.join(args.work, "src"), os.path.join(args.work, "build")
        os.makedirs(src, exist_ok=True)
        sync_copy(src)

    baseline = {}
    log = os.path.join(logs, "baseline.log")
    open(log, "w").close()
    print(f"copy: {src}; build: {bld}; logs: {logs}", flush=True)
    if not build(args, src, bld, log):
        print(f"the unmutated copy does not build; see {log}")
        return 2
    if not args.no_baseline:
        t0 = time.time()
        failed = run_suite(args, bld, log)
        if failed is None:
            print(f"ctest did not run on the unmutated copy; see {log}")
            return 2
        baseline = failed
        print(f"baseline: {len(baseline)} cpu test(s) fail without any mutation"
              f"{': ' + shown(baseline) if baseline else ''} ({time.time() - t0:.0f} s)",
              flush=True)

    rows = []
    for m in mutations:
        path = os.path.join(src, m["file"])
        with open(path) as f:
            original = f.read()
        why = applies(original, m)
        if why:
            rows.append((m, why, {}))
            print(f"{m['id']}: {why}", flush=True)
            continue
        log = os.path.join(logs, m["id"] + ".log")
        open(log, "w").close()
        t0 = time.time()
        try:
            with open(path, "w") as f:
                f.write(original.replace(m["original"], m["replacement"], 1))
            if not build(args, src, bld, log):
                result, caught_by = "build failed", {}
            else:
                failed = run_suite(args, bld, log, args.first_failure, baseline)
                if failed is None:
                    result, caught_by = "ctest did not run", {}
                else:
                    caught_by = {t: r for t, r in failed.items() if t not in baseline}
                    result = "caught" if caught_by else "MISSED"
        finally:
            with open(path, "w") as f:
                f.write(original)
        rows.append((m, result, caught_by))
        print(f"{m['id']}: {result} ({time.time() - t0:.0f} s){': ' + shown(caught_by) if caught_by else ''}",
              flush=True)
    # Leave the copy's build matching the unmutated tree.
    build(args, src, bld, os.path.join(logs, "restore.log"))

    print()
    print(f"| {'mutation':<42} | {'file':<28} | {'result':<34} | caught by")
    print(f"| {'-' * 42} | {'-' * 28} | {'-' * 34} | ---")
    for m, result, caught_by in rows:
        print(f"| {m['id']:<42} | {m['file']:<28} | {result:<34} | {shown(caught_by)}")
    applied = [r for r in rows if not r[1].startswith("does not apply")]
    caught = [r for r in rows if r[1] == "caught"]
    print()
    print(f"caught {len(caught)}/{len(applied)} applied mutations"
          f" ({len(rows) - len(applied)} of {len(rows)} do not apply); logs in {logs}")
    return 0 if len(caught) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
