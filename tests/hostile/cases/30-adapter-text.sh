# Cases of issue 15, item 2 and its weak items: text that is not UTF-8 from an adapter or in a path,
# engine sections whose env, timeout or options cannot be honoured, step stats of the wrong type.
# Sourced by run_cases.sh (case_, py, $small and ok.json come from there). The adapter is
# tests/data/adapters/text_adapter.py, run from the repository ($REPO).

text_adapter="$REPO/tests/data/adapters/text_adapter.py"
text_engine() {  # text_engine MODE: an engine section for text_adapter.py in that mode
  echo "\"engine\": {\"kind\": \"command\", \"name\": \"text\", \"command\": [\"python3\", \"$text_adapter\"], \"options\": {\"mode\": \"$1\"}, \"reply_timeout_s\": 20}"
}

# ---- text that is not UTF-8 (an error verdict of that scenario, exit 3; never an internal error) ----
for mode in latin1_error latin1_hello latin1_progress latin1_crash long_utf8_error stats_text stats_negative; do
  echo "{$(text_engine $mode), $small}" > text-$mode.json
done
case_ text "an error message with a Latin-1 byte" 3 -- run text-latin1_error.json --out out-t1
case_ text "a hello whose version has a Latin-1 byte" 3 -- run text-latin1_hello.json --out out-t2
case_ text "a progress line with a Latin-1 byte" 3 -- run text-latin1_progress.json --out out-t3
case_ text "a crash whose stderr has Latin-1 bytes" 3 -- run text-latin1_crash.json --out out-t4
case_ text "an error message of 3001 bytes of 'é' (cut inside one)" 3 -- run text-long_utf8_error.json --out out-t5
echo "{$(text_engine latin1_stderr), $small}" > text-stderr.json
case_ text "Latin-1 only on stderr: the normal verdict" 0 -- run text-stderr.json --out out-t6
echo "{$(text_engine latin1_error), $small, \"expect\": \"error\"}" > text-expected.json
case_ text "bad bytes in one file, bih's engine in the next: both run" 0 -- run text-expected.json ok.json --out out-t7
mkdir -p "caf$(printf '\xe9')"
echo "{$(text_engine ''), $small}" > "caf$(printf '\xe9')/s.json"
case_ text "scenario in a folder whose name is Latin-1 (the adapter's cwd)" 2 -- run "caf$(printf '\xe9')/s.json" --out out-t8
NCCL_BIH_HOSTILE_TEXT="$(printf 'x\xe9')" case_ text "an NCCL_ variable with a Latin-1 byte in bih's environment" 0 -- run ok.json --out out-t9

# ---- step stats ----
case_ protocol "result stats \"steps\": \"six\"" 3 -- run text-stats_text.json --out out-s1
case_ protocol "result stats \"rows\": -1" 3 -- run text-stats_negative.json --out out-s2

# ---- engine sections that cannot be honoured (exit 2, nothing runs) ----
eng='"kind": "command", "name": "x", "command": ["python3", "x.py"]'
echo "{\"engine\": {$eng, \"env\": {\"\": \"1\"}}, $small}" > env1.json
case_ engine "engine.env with an empty name" 2 -- list env1.json
echo "{\"engine\": {$eng, \"env\": {\"A=B\": \"1\"}}, $small}" > env2.json
case_ engine "engine.env name containing '='" 2 -- list env2.json
echo "{\"engine\": {$eng, \"env\": {\"A\": \"1\\u00002\"}}, $small}" > env3.json
case_ engine "engine.env value containing NUL" 2 -- list env3.json
echo "{\"engine\": {\"kind\": \"command\", \"name\": \"x\", \"command\": [\"python3\", \"a\\u0000b\"]}, $small}" > cmd-nul.json
case_ engine "engine.command argument containing NUL" 2 -- list cmd-nul.json
echo "{\"engine\": {$eng, \"reply_timeout_s\": 0.0001}, $small}" > rt.json
case_ engine "engine.reply_timeout_s 0.0001 (below 1 ms)" 2 -- list rt.json
py "import json; print(json.dumps({'engine': {'kind': 'command', 'name': 'x', 'command': ['x'], 'options': {'t': 'x' * 300000}}}))" > opt-big.json
case_ engine "engine.options of 300 KB (id gets a hash)" 0 -- list opt-big.json
py "import json; v = 0
for _ in range(56): v = [v]
print(json.dumps({'engine': {'kind': 'command', 'name': 'x', 'command': ['x'], 'options': {'d': v}}}))" > opt-deep.json
case_ engine "engine.options nested 57 levels (one past the bound)" 2 -- list opt-deep.json
