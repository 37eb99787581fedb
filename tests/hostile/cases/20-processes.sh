# Cases of issue 15 (processes): adapters that cannot start, that never read, that flood stdout or
# stderr, that exit while a child holds their stdout. Each is an `error` verdict (exit 3) found in
# bounded time and memory. Sourced by run_cases.sh (case_ and $small come from there).

tree_adapter="$REPO/tests/data/adapters/tree_adapter.py"
# adapter_scenario FILE COMMAND_JSON [EXTRA_ENGINE_FIELDS]
adapter_scenario() {
  echo "{\"engine\": {\"kind\": \"command\", \"name\": \"hostile\", \"command\": $2,
         \"reply_timeout_s\": 20 ${3:-}}, $small, \"timeout_s\": 120}" > "$1"
}

adapter_scenario nocmd.json '["no-such-adapter-program"]'
case_ processes "adapter command not found in PATH" 3 -- run nocmd.json --out out-nocmd
mkdir -p a-folder
adapter_scenario foldercmd.json '["./a-folder"]'
case_ processes "adapter command is a folder" 3 -- run foldercmd.json --out out-folder
printf '#!/bin/sh\necho hi\n' > noexec.sh && chmod 644 noexec.sh
adapter_scenario noexec.json '["./noexec.sh"]'
case_ processes "adapter command not executable" 3 -- run noexec.json --out out-noexec
adapter_scenario badcwd.json "[\"python3\", \"$tree_adapter\"]" ', "cwd": "/no/such/folder"'
case_ processes "engine.cwd does not exist" 3 -- run badcwd.json --out out-badcwd
adapter_scenario longarg.json "[\"python3\", \"$(py 'print("a" * 200000)')\"]"
case_ processes "argument list too long (one 200 KB argument)" 3 -- run longarg.json --out out-longarg

# The request of the first generation is over 100 KB (prompts of 20000 tokens).
echo "{\"engine\": {\"kind\": \"command\", \"name\": \"hostile\",
       \"command\": [\"python3\", \"$tree_adapter\"], \"options\": {\"mode\": \"never_reads\"},
       \"reply_timeout_s\": 5},
       \"plan\": {\"prompts\": {\"count\": 2, \"min_len\": 20000, \"max_len\": 20000},
                \"max_tokens\": 2, \"batch_sizes\": [1, 2], \"max_model_len\": 20100},
       \"timeout_s\": 60}" > neverreads.json
case_ processes "adapter never reads a 100 KB request (reply_timeout_s 5)" 3 -- run neverreads.json --out out-neverreads

adapter_scenario hugeline.json "[\"python3\", \"$tree_adapter\"]" ', "options": {"mode": "huge_line"}'
case_ processes "adapter answers with one 200 MB line" 3 -- run hugeline.json --out out-hugeline
adapter_scenario flood.json "[\"python3\", \"$tree_adapter\"]" ', "options": {"mode": "stderr_flood"}'
case_ processes "adapter writes 500 MB of stderr without a newline and exits" 3 -- run flood.json --out out-flood
adapter_scenario holdout.json "[\"python3\", \"$tree_adapter\"]" \
  ', "options": {"mode": "exit_on_generate", "spawn": true}'
case_ processes "adapter exits while its children hold its stdout (reply_timeout_s 20)" 3 -- run holdout.json --out out-holdout
