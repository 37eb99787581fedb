# Reports that lie (issue 15, item 6) and the one rule for `unsupported` (issue 19): a report is
# read by its comparisons, never by its verdict field, in bih gate, bih matrix, bih run --resume and
# bih explain; an `unsupported` under a declared expectation is not checked here unless it must
# run. The reports start as real ones from `bih run` and are then edited. Sourced by run_cases.sh.

"$BIH" run ok.json --out rep-real >/dev/null 2>&1
echo '{"schema": "bih.expectations/1", "expectations": []}' > exp-none.json
# A copy of rep-real whose report is edited by the Python statement $2 (r is the report).
lie() {
  rm -rf "$1" && cp -r rep-real "$1"
  py "
import glob, json
p = [f for f in glob.glob('$1/*.json') if 'manifest' not in f][0]
r = json.load(open(p))
$2
json.dump(r, open(p, 'w'))"
}

# ---- a verdict against its own comparisons ----
lie rep-claims 'r["verdict"] = "batch_variant"'
case_ reports "verdict batch_variant, every comparison identical (bih gate)" 2 -- gate --expect exp-none.json rep-claims
case_ reports "verdict batch_variant, every comparison identical (bih matrix)" 2 -- matrix rep-claims --out m50a
lie rep-hides 'c = r["comparisons"][-1]; c["identical"] = False; c["logprobs_differ"] = 1'
case_ reports "verdict invariant, a comparison differs (bih gate)" 2 -- gate --expect exp-none.json rep-hides
case_ reports "verdict invariant, a comparison differs (bih run --resume)" 2 -- run ok.json --resume --out rep-hides
case_ reports "verdict invariant, a comparison differs (bih explain)" 2 -- explain "$(ls rep-hides/*.json | grep -v manifest | head -1)"
lie rep-identical 'r["comparisons"][0]["logprobs_differ"] = 3'
case_ reports "identical true with 3 differing logprobs" 2 -- gate --expect exp-none.json rep-identical
lie rep-count 'r["comparisons"][0]["tokens_differ"] = -1'
case_ reports "a negative count" 2 -- gate --expect exp-none.json rep-count
lie rep-kind 'r["comparisons"][0]["kind"] = "vibes"'
case_ reports "a comparison of an unknown kind" 2 -- gate --expect exp-none.json rep-kind
lie rep-empty 'r["comparisons"] = []'
case_ reports "verdict invariant with nothing compared" 2 -- gate --expect exp-none.json rep-empty
lie rep-unsup-ran 'r["verdict"] = "unsupported"; r["reason"] = "needs 2 GPUs"'
case_ reports "verdict unsupported, yet it compared something" 2 -- gate --expect exp-none.json rep-unsup-ran
lie rep-unhealthy 'r["health"]["healthy"] = False'
case_ reports "verdict invariant, health says unhealthy" 2 -- gate --expect exp-none.json rep-unhealthy

# ---- unsupported: unchecked where declared, a failure where it must run ----
lie rep-unsup 'r["verdict"] = "unsupported"; r["reason"] = "ranks nccl at tp=2 needs 2 GPUs"; r["comparisons"] = []; r["scenario"]["expect"] = r["expect"] = "invariant"'
case_ reports "unsupported, expect declared: not checked here" 0 -- gate --expect exp-none.json rep-unsup
case_ reports "unsupported, expect declared, --require-all" 1 -- gate --expect exp-none.json rep-unsup --require-all
lie rep-unsup-bare 'r["verdict"] = "unsupported"; r["reason"] = "no GPU"; r["comparisons"] = []'
case_ reports "unsupported, nothing declared (the default claims it must run)" 1 -- gate --expect exp-none.json rep-unsup-bare
echo '{"schema": "bih.expectations/1", "require_all": "yes", "expectations": []}' > exp-req-str.json
case_ reports "require_all that is a string" 2 -- gate --expect exp-req-str.json rep-unsup
echo '{"schema": "bih.expectations/1", "expectations": [{"id": "*", "verdict": "invariant", "require": 1}]}' > exp-req-num.json
case_ reports "an entry's require that is a number" 2 -- gate --expect exp-req-num.json rep-unsup
echo '{"schema": "bih.expectations/1", "expectations": [{"id": "*", "verdict": "invariant", "require": true}]}' > exp-req.json
case_ reports "an entry's require: true, unsupported" 1 -- gate --expect exp-req.json rep-unsup
