# Cases of round one (issue 12): malformed JSON, nesting, duplicates, types, sizes, files, prompts,
# checkpoints, CLI flags, --out, matrix/gate, protocol lines, a failing worker. Sourced by
# run_cases.sh (case_, py, $small and ok.json come from there).

# ---- JSON syntax and structure ----
printf '{"plan": ' > trunc.json
case_ json "truncated object" 2 -- list trunc.json
printf '\xff\xfe{}' > bom.json
case_ json "bytes that are not UTF-8 text" 2 -- list bom.json
printf '' > empty.json
case_ json "empty file" 2 -- list empty.json
echo '[1, 2]' > array.json
case_ json "top level is an array" 2 -- list array.json
echo '"tp=4"' > string.json
case_ json "top level is a string" 2 -- list string.json
echo '{"plan": {}} trailing' > trailing.json
case_ json "text after the object" 2 -- list trailing.json
echo '{"plan": {,}}' > comma.json
case_ json "stray comma" 2 -- list comma.json
echo '{"name": "a\u0000b", '"$small"'}' > nul.json
case_ json "NUL escape in a string (accepted as text)" 0 -- list nul.json
echo '{/* unterminated comment' > comment.json
case_ json "unterminated comment" 2 -- list comment.json
echo '{"timeout_s": NaN}' > nan.json
case_ json "NaN literal" 2 -- list nan.json
echo '{"timeout_s": 1e999}' > inf.json
case_ json "number overflowing a double (1e999)" 2 -- list inf.json

# ---- nesting ----
py 'print("{\"plan\": " + "["*100000 + "]"*100000 + "}")' > deep100k.json
case_ nesting "100000 levels of arrays in a scenario" 2 -- list deep100k.json
py 'print("{\"a\": " + "{\"a\": "*100000 + "1" + "}"*100001)' > deepobj.json
case_ nesting "100000 levels of objects in a scenario" 2 -- list deepobj.json
py 'print("{\"engine\": {\"options\": " + "["*63 + "]"*63 + "}}")' > deep64.json
case_ nesting "65 levels (2 + 63): one past the limit" 2 -- list deep64.json
py 'print("{\"name\": \"" + "["*100000 + "\", '"${small//\"/\\\"}"'}")' > deepstr.json
case_ nesting "100000 brackets inside a string (not nesting)" 0 -- list deepstr.json
py 'print("["*100000 + "]"*100000)' > deepprompts.json
echo "{\"plan\": {\"prompts\": {\"file\": \"deepprompts.json\"}, \"max_tokens\": 2, \"batch_sizes\": [1, 2]}}" > useprompts.json
case_ nesting "prompts file nested 100000 levels" 2 -- list useprompts.json
case_ nesting "--set value nested 5000 levels" 2 -- list ok.json --set "engine.options.x=$(py 'print("["*5000 + "]"*5000)')"
py 'print("{\"schema\": \"bih.expectations/1\", \"expectations\": " + "["*100000 + "]"*100000 + "}")' > deepexp.json
mkdir -p noreports
case_ nesting "expectations file nested 100000 levels" 2 -- gate --expect deepexp.json noreports
py 'print("["*100000 + "]"*100000)' > deepgen.json
case_ nesting "generation dump nested 100000 levels (bih diff)" 2 -- diff deepgen.json deepgen.json
mkdir -p deeprep && py 'print("{\"schema\": \"bih.report/1\", \"x\": " + "["*100000 + "]"*100000 + "}")' > deeprep/r.json
case_ nesting "report nested 100000 levels (bih matrix)" 2 -- matrix deeprep --out m1

# ---- duplicate keys ----
echo '{"parallel": {"tp": 2, "tp": 4}}' > dup1.json
case_ duplicates "key twice in a scenario object" 2 -- list dup1.json
echo '{"plan": {}, "plan": {}}' > dup2.json
case_ duplicates "top-level key twice" 2 -- list dup2.json
echo '{"base": {}, "cases": [{"name": "a"}, {"name": "b", "name": "c"}]}' > dup3.json
case_ duplicates "key twice in a matrix case" 2 -- list dup3.json
echo '{"base": {}, "axes": {"parallel.tp": [1, 2], "parallel.tp": [4]}}' > dup4.json
case_ duplicates "axis twice in a matrix" 2 -- list dup4.json
echo '{"schema": "bih.expectations/1", "schema": "x", "expectations": []}' > dupexp.json
case_ duplicates "key twice in an expectations file" 2 -- gate --expect dupexp.json noreports
echo '{"base": {}, "cases": [{"name": "a"}, {"name": "a"}]}' > dupcase.json
case_ duplicates "two matrix cases with one id" 2 -- list dupcase.json
echo "{$small}" > b.json
case_ duplicates "one scenario id from two files" 2 -- run ok.json b.json --out out-dup
case_ duplicates "one file given twice" 2 -- run ok.json ok.json --out out-dup

# ---- types and ranges ----
echo '{"parallel": {"tp": "4"}}' > t1.json
case_ types "tp as a string" 2 -- list t1.json
echo '{"parallel": {"tp": 3}}' > t2.json
case_ types "tp that divides no head count" 2 -- list t2.json
echo '{"parallel": {"tp": -1}}' > t3.json
case_ types "negative tp" 2 -- list t3.json
echo '{"parallel": {"tp": 1.5}}' > t4.json
case_ types "fractional tp" 2 -- list t4.json
echo '{"kernels": "vendr"}' > t5.json
case_ types "enum typo" 2 -- list t5.json
echo '{"paralel": {}}' > t6.json
case_ types "unknown top-level key" 2 -- list t6.json
echo '{"model": {"seed": -3}}' > t7.json
case_ types "negative seed" 2 -- list t7.json
echo '{"plan": {"prompts": {"count": 18446744073709551615}}}' > t8.json
case_ types "count 2^64-1" 2 -- list t8.json
echo '{"plan": {"prompts": {"min_len": 40, "max_len": 4}}}' > t9.json
case_ types "min_len > max_len" 2 -- list t9.json
echo '{"expect": "invarient"}' > t10.json
case_ types "expect typo" 2 -- list t10.json

# ---- sizes and bounds ----
echo "{$small, \"cudagraph\": {\"mode\": \"full\", \"capture_sizes\": [1, 2147483647]}}" > s1.json
case_ sizes "capture size 2^31-1" 2 -- list s1.json
echo '{"cudagraph": {"capture_sizes": [1, 4096]}, "plan": {"prompts": {"count": 2, "min_len": 2, "max_len": 4}, "max_tokens": 2, "batch_sizes": [1, 2], "max_num_seqs": 2, "max_model_len": 64}}' > s2.json
case_ sizes "capture size beyond max_num_seqs x max_model_len" 2 -- list s2.json
echo '{"plan": {"max_num_seqs": 2147483647}}' > s3.json
case_ sizes "max_num_seqs 2^31-1" 2 -- list s3.json
echo '{"plan": {"max_num_seqs": 5000}}' > s4.json
case_ sizes "max_num_seqs 5000 (cap 4096)" 2 -- list s4.json
echo '{"parallel": {"tp": 4}, "prefix_caching": {"enabled": true}, "plan": {"max_num_seqs": 4096, "max_model_len": 40960}}' > s5.json
case_ sizes "KV cache of ~687 GB on the CPU" 2 -- list s5.json
echo '{"plan": {"max_model_len": 2000000}}' > s6.json
case_ sizes "max_model_len 2000000" 2 -- list s6.json
echo '{"plan": {"max_model_len": 50000}}' > s7.json
case_ sizes "max_model_len past max_position_embeddings" 2 -- list s7.json
echo '{"plan": {"repeats": 1000000}}' > s8.json
case_ sizes "repeats 1000000" 2 -- list s8.json
echo '{"timeout_s": 1e300}' > s9.json
case_ sizes "timeout_s 1e300" 2 -- list s9.json
echo '{"timeout_s": 0}' > s10.json
case_ sizes "timeout_s 0" 2 -- list s10.json
echo '{"plan": {"prompts": {"count": 100000}}}' > s11.json
case_ sizes "prompts.count 100000" 2 -- list s11.json
echo '{"plan": {"max_tokens": 2147483647}}' > s12.json
case_ sizes "max_tokens 2^31-1" 2 -- list s12.json
echo '{"plan": {"prompts": {"max_len": 2147483647}}}' > s13.json
case_ sizes "max_len 2^31-1" 2 -- list s13.json
py 'import json; print(json.dumps({"plan": {"batch_sizes": [1]*100}}))' > s14.json
case_ sizes "100 batch sizes" 2 -- list s14.json
echo '{"plan": {"batch_sizes": [1, 128]}}' > s15.json
case_ sizes "batch size past max_num_seqs" 2 -- list s15.json
echo '{"prefix_caching": {"block_size": 1000}}' > s16.json
case_ sizes "block_size 1000" 2 -- list s16.json

# ---- files and paths ----
case_ files "scenario file that does not exist" 2 -- list nope.json
mkdir -p adir
case_ files "scenario path is a folder" 2 -- list adir
echo '{"plan": {"prompts": {"file": "missing-prompts.json"}}}' > f1.json
case_ files "prompts file missing" 2 -- list f1.json
echo '{"model": {"path": "no-such-ckpt"}}' > f2.json
case_ files "model.path missing" 2 -- list f2.json
echo '{"model": {"path": ""}}' > f3.json
case_ files "model.path empty" 2 -- list f3.json
echo '{"model": {"path": "x", "preset": "tiny"}}' > f4.json
case_ files "both preset and path" 2 -- list f4.json

# ---- prompts files ----
echo '[]' > p-empty.json
echo '{"plan": {"prompts": {"file": "p-empty.json"}}}' > p1.json
case_ prompts "empty list" 2 -- list p1.json
echo '[[1, 2], [99999]]' > p-range.json
echo '{"plan": {"prompts": {"file": "p-range.json"}}}' > p2.json
case_ prompts "token id past the vocabulary" 2 -- list p2.json
echo '[[1, "a"]]' > p-type.json
echo '{"plan": {"prompts": {"file": "p-type.json"}}}' > p3.json
case_ prompts "token id as a string" 2 -- list p3.json
echo '[[1, -1]]' > p-neg.json
echo '{"plan": {"prompts": {"file": "p-neg.json"}}}' > p4.json
case_ prompts "negative token id" 2 -- list p4.json
echo '[[]]' > p-emptyp.json
echo '{"plan": {"prompts": {"file": "p-emptyp.json"}}}' > p5.json
case_ prompts "an empty prompt" 2 -- list p5.json
py 'print("[[" + ",".join(["1"]*600) + "]]")' > p-long.json
echo '{"plan": {"prompts": {"file": "p-long.json"}}}' > p6.json
case_ prompts "prompt longer than max_model_len" 2 -- list p6.json

# ---- checkpoints (bih run checks them before any worker starts; bih list reads config.json) ----
"$BIH" export --preset tiny --format hf --out ckpt >/dev/null 2>&1
mk_ckpt() { rm -rf "$1" && cp -r ckpt "$1" && echo "{\"model\": {\"path\": \"$1\"}, $small}" > "$1.json"; }
mk_ckpt c0
case_ checkpoint "intact exported checkpoint" 0 -- run c0.json --out out-c0
mk_ckpt c1 && truncate -s -1000 c1/model.safetensors
case_ checkpoint "safetensors truncated by 1000 bytes" 2 -- run c1.json --out out-c1
mk_ckpt c2 && truncate -s 4 c2/model.safetensors
case_ checkpoint "safetensors shorter than its 8-byte length" 2 -- run c2.json --out out-c2
mk_ckpt c3 && printf '\xff\xff\xff\xff\x00\x00\x00\x00' | dd of=c3/model.safetensors conv=notrunc status=none
case_ checkpoint "header length past the file" 2 -- run c3.json --out out-c3
st_edit() {  # st_edit FOLDER PYTHON: edit the header dict h in place, keep the data
  py "
import json, struct
p = '$1/model.safetensors'
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
$2
t = json.dumps(h).encode()
open(p, 'wb').write(struct.pack('<Q', len(t)) + t + b[8 + n:])"
}
mk_ckpt c4 && st_edit c4 "h['model.norm.weight']['dtype'] = 'I64'"
case_ checkpoint "tensor with dtype I64 (size mismatch)" 2 -- run c4.json --out out-c4
mk_ckpt c5 && st_edit c5 "h['model.norm.weight']['dtype'] = 'Q4'"
case_ checkpoint "tensor with an unknown dtype" 2 -- run c5.json --out out-c5
mk_ckpt c6 && st_edit c6 "h['model.norm.weight']['shape'] = [128, 2]"
case_ checkpoint "tensor shape differs from config.json" 2 -- run c6.json --out out-c6
mk_ckpt c7 && st_edit c7 "h['model.norm.weight']['data_offsets'] = [0, 512]"
case_ checkpoint "offsets overlapping another tensor" 2 -- run c7.json --out out-c7
mk_ckpt c8 && st_edit c8 "e = h['model.norm.weight']['data_offsets']; h['model.norm.weight']['data_offsets'] = [e[0] + 10**12, e[1] + 10**12]"
case_ checkpoint "offsets past the end of the file" 2 -- run c8.json --out out-c8
mk_ckpt c9 && st_edit c9 "del h['model.norm.weight']"
case_ checkpoint "missing tensor" 2 -- run c9.json --out out-c9
mk_ckpt c10 && st_edit c10 "h['model.norm.weight']['shape'] = [-1]"
case_ checkpoint "negative shape entry" 2 -- run c10.json --out out-c10
mk_ckpt c11 && py "
import struct; p='c11/model.safetensors'; b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]
open(p,'wb').write(b[:8] + b'{' * n + b[8+n:])"
case_ checkpoint "header of n '{' (nesting)" 2 -- run c11.json --out out-c11
mk_ckpt c12 && py "
import struct; p='c12/model.safetensors'; b=open(p,'rb').read(); n=struct.unpack('<Q',b[:8])[0]
h=b[8:8+n].decode(); i=h.index('{', 1); j=h.index('}', i)+1; t=(h[:1]+h[i-len(h[1:i]):j]+','+h[1:]).encode()
open(p,'wb').write(struct.pack('<Q',len(t))+t+b[8+n:])"
case_ checkpoint "a header key twice (__metadata__)" 2 -- run c12.json --out out-c12
mk_ckpt c13 && py "
import json; p='c13/config.json'; c=json.load(open(p)); c['hidden_size']=200; json.dump(c,open(p,'w'))"
case_ checkpoint "config.json hidden_size that the weights do not have" 2 -- run c13.json --out out-c13
mk_ckpt c14 && sed -i 's/{/{"vocab_size": 4096, /' c14/config.json
case_ checkpoint "config.json key twice" 2 -- run c14.json --out out-c14
mk_ckpt c15 && echo '{"hidden_size": ' > c15/config.json
case_ checkpoint "config.json truncated" 2 -- run c15.json --out out-c15
mk_ckpt c16 && py "
import json; p='c16/config.json'; c=json.load(open(p)); c['hidden_act']='gelu'; json.dump(c,open(p,'w'))"
case_ checkpoint "config.json with another activation" 2 -- run c16.json --out out-c16
mk_ckpt c17 && py "
import json; p='c17/config.json'; c=json.load(open(p)); c['num_key_value_heads']=3; json.dump(c,open(p,'w'))"
case_ checkpoint "config.json kv heads not dividing heads" 2 -- run c17.json --out out-c17
mk_ckpt c18 && rm c18/model.safetensors
case_ checkpoint "no model.safetensors" 2 -- run c18.json --out out-c18
mk_ckpt c19 && echo '{"weight_map": {"model.norm.weight": "model.safetensors"}}' > c19/model.safetensors.index.json
case_ checkpoint "sharded index missing tensors" 2 -- run c19.json --out out-c19

# ---- CLI flags ----
case_ cli "unknown verb" 2 -- frobnicate
case_ cli "unknown flag" 2 -- run ok.json --frob
case_ cli "--set without =" 2 -- list ok.json --set parallel.tp
case_ cli "--set unknown key" 2 -- list ok.json --set parallel.tpp=2
case_ cli "--set a value out of range" 2 -- list ok.json --set parallel.tp=1000
case_ cli "--shard 3/2" 2 -- run ok.json --shard 3/2 --out out-shard
case_ cli "--shard x" 2 -- run ok.json --shard x --out out-shard
case_ cli "--max-divergences -1" 2 -- run ok.json --max-divergences -1 --out out-md
case_ cli "--only matching nothing" 2 -- run ok.json --only zzz --out out-only

# ---- --out ----
echo x > afile
case_ out "--out is a file" 2 -- run ok.json --out afile
case_ out "--out below a file" 2 -- run ok.json --out afile/sub
case_ out "--out empty" 2 -- run ok.json --out ""
mkdir -p locked
python3 -c "
import fcntl, os, sys, time
f = open('locked/.lock', 'w'); fcntl.flock(f, fcntl.LOCK_EX); f.write(str(os.getpid()) + '\n'); f.flush()
open('locked/.ready', 'w').close(); time.sleep(60)" &
holder=$!
while [ ! -e locked/.ready ]; do sleep 0.1; done
case_ out "--out locked by another run" 2 -- run ok.json --out locked
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# ---- matrix, gate, expectations ----
case_ matrix "--rows with an unknown key" 2 -- matrix noreports --rows paralel.tp --out m2
case_ matrix "--split with an unknown key" 2 -- matrix noreports --split kernel --out m3
case_ matrix "--cols key on two axes" 2 -- matrix noreports --rows parallel.tp --cols parallel.tp --out m4
mkdir -p badrep && echo '{"schema": "bih.report/1"}' > badrep/r.json
case_ matrix "report missing its fields" 2 -- matrix badrep --out m5
mkdir -p duprep && echo '{"schema": "bih.report/1", "schema": "bih.report/1"}' > duprep/r.json
case_ matrix "report with a key twice" 2 -- matrix duprep --out m6
echo '{"schema": "bih.expectations/2", "expectations": []}' > exp2.json
case_ gate "expectations with another schema" 2 -- gate --expect exp2.json noreports
echo '{"schema": "bih.expectations/1", "expectations": [{"id": "x", "verdict": "maybe"}]}' > exp3.json
case_ gate "expectation with an unknown verdict" 2 -- gate --expect exp3.json noreports
case_ gate "expectations file missing" 2 -- gate --expect nope.json noreports

# ---- engine protocol lines (an adapter's bug is an error verdict, exit 3) ----
cat > hostile_adapter.py <<'PY'
import sys
sys.stdin.readline()
kind = sys.argv[1]
if kind == "deep":
    line = '{"type": "hello", "x": ' + "[" * 100000 + "]" * 100000 + "}"
elif kind == "dupkey":
    line = '{"type": "hello", "type": "error"}'
elif kind == "notjson":
    line = "Loading model..."
else:
    line = '{"type": 5}'
print("hostile adapter: sending a " + kind + " line", file=sys.stderr, flush=True)
sys.stdout.write(line + "\n")
sys.stdout.flush()
sys.stdin.readline()
PY
for kind in deep dupkey notjson badtype; do
  echo "{\"engine\": {\"kind\": \"command\", \"name\": \"h\", \"command\": [\"python3\", \"hostile_adapter.py\", \"$kind\"], \"reply_timeout_s\": 20}, $small}" > proto-$kind.json
done
case_ protocol "hello nested 100000 levels" 3 -- run proto-deep.json --out out-p1
case_ protocol "hello with \"type\" twice" 3 -- run proto-dupkey.json --out out-p2
case_ protocol "a log line on stdout" 3 -- run proto-notjson.json --out out-p3
case_ protocol "\"type\" not a string" 3 -- run proto-badtype.json --out out-p4

# ---- a worker that fails: its last words reach the terminal ----
echo "{\"debug\": {\"fault\": \"exit\"}, $small}" > w1.json
case_ worker "worker exits 7 (debug.fault)" 3 -- run w1.json --out out-w1

