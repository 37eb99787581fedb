# Cases of issue 15 (items 3, 4, 5 and their weak items): bih export over existing files, GGUF
# fields that do not fit float32, seeds, long names, a full disk, checkpoints whose config does not
# describe their weights, and the model cache (altered, read-only, not UTF-8). Sourced by
# run_cases.sh (case_, py, $small and ok.json come from there).

"$BIH" export --preset tiny --format hf --out x40-ckpt >/dev/null 2>&1

# ---- export destinations ----
cp -r x40-ckpt x40-full && echo '{"weight_map": {}}' > x40-full/model.safetensors.index.json
case_ export "hf export into an existing checkpoint folder" 2 -- export --preset tiny --format hf --out x40-full
case_ export "--force into a folder whose index would win over the export" 2 -- export --preset tiny --format hf --out x40-full --force
mkdir -p x40-notes && echo keep > x40-notes/README.md
case_ export "hf export into a folder holding other files" 2 -- export --preset tiny --format hf --out x40-notes
case_ export "--force into that folder (README.md kept)" 0 -- export --preset tiny --format hf --out x40-notes --force
echo 'not yours' > x40-other.gguf
case_ export "gguf export over an existing file" 2 -- export --preset tiny --format gguf --out x40-other.gguf
case_ export "gguf export over it with --force" 0 -- export --preset tiny --format gguf --out x40-other.gguf --force
case_ export "a 255-byte file name" 0 -- export --preset tiny --format gguf --out "$(py 'print("n" * 250)').gguf"

# ---- seeds ----
case_ export "--seed -1" 2 -- export --preset tiny --seed=-1 --format gguf --out x40-s.gguf
case_ export "--seed 2^64" 2 -- export --preset tiny --seed 18446744073709551616 --format gguf --out x40-s.gguf
case_ export "--seed 2^64-1" 0 -- export --preset tiny --seed 18446744073709551615 --format gguf --out x40-s.gguf

# ---- GGUF fields narrowed to float32 ----
x40_config() {  # FOLDER PYTHON-EDIT-OF-c
  rm -rf "$1" && cp -r x40-ckpt "$1"
  py "import json; p='$1/config.json'; c=json.load(open(p)); $2; json.dump(c, open(p, 'w'))"
}
x40_config x40-theta39 "c['rope_parameters']['rope_theta'] = 1e39"
case_ gguf "rope_theta 1e39 (inf as float32)" 2 -- export --model x40-theta39 --format gguf --out x40-t.gguf
x40_config x40-theta308 "c['rope_parameters']['rope_theta'] = 1e308"
case_ gguf "rope_theta 1e308" 2 -- export --model x40-theta308 --format gguf --out x40-t.gguf
x40_config x40-thetatiny "c['rope_parameters']['rope_theta'] = 1e-308"
case_ gguf "rope_theta 1e-308 (0 as float32)" 2 -- export --model x40-thetatiny --format gguf --out x40-t.gguf
x40_config x40-eps "c['rms_norm_eps'] = 1e-50"
case_ gguf "rms_norm_eps 1e-50 (0 as float32)" 2 -- export --model x40-eps --format gguf --out x40-t.gguf

# ---- layers against the weights ----
x40_config x40-fewer "c['num_hidden_layers'] = 3; c['max_window_layers'] = 3; c['layer_types'] = ['full_attention'] * 3"
case_ checkpoint "config of 3 layers over 4 layers of weights (export)" 2 -- export --model x40-fewer --format gguf --out x40-f.gguf
echo "{\"model\": {\"path\": \"x40-fewer\"}, $small}" > x40-fewer.json
case_ checkpoint "config of 3 layers over 4 layers of weights (run)" 2 -- run x40-fewer.json --out out-x40f
x40_config x40-more "c['num_hidden_layers'] = 100000; c['max_window_layers'] = 100000; c['layer_types'] = ['full_attention'] * 100000"
echo "{\"model\": {\"path\": \"x40-more\"}, \"plan\": {\"prompts\": {\"count\": 2, \"min_len\": 2, \"max_len\": 4}, \"max_tokens\": 2, \"batch_sizes\": [1, 2], \"max_model_len\": 40960, \"max_num_seqs\": 64}}" > x40-more.json
case_ checkpoint "num_hidden_layers 100000 over 4 layers of weights" 2 -- run x40-more.json --out out-x40m

# ---- full disk (a 1 MiB tmpfs, where this shell may mount one) ----
mkdir -p x40-small
if mount -t tmpfs -o size=1m tmpfs x40-small 2>/dev/null; then
  case_ export "hf export onto a full disk (1 MiB tmpfs)" 3 -- export --preset tiny --format hf --out x40-small/ckpt
  case_ export "gguf export onto a full disk (1 MiB tmpfs)" 3 -- export --preset tiny --format gguf --out x40-small/m.gguf
  umount x40-small
fi

# ---- the model cache ----
x40_engine() {  # FORMAT
  echo "{\"engine\": {\"kind\": \"command\", \"name\": \"faulty\", \"command\": [\"python3\", \"$REPO/tests/data/adapters/faulty_adapter.py\"], \"options\": {\"fault\": \"\"}, \"model_format\": \"$1\"}, $small}"
}
x40_engine gguf > x40-adapter.json
case_ cache "adapter run exporting a GGUF into the cache" 0 -- run x40-adapter.json --out out-x40a
py "
import glob
p = glob.glob('$BIH_CACHE_DIR/models/tiny-seed0-*.gguf')[0]
b = bytearray(open(p, 'rb').read()); b[-100] ^= 0x40; open(p, 'wb').write(b)"
case_ cache "cached GGUF altered after its export (exported again)" 0 -- run x40-adapter.json --out out-x40b
mkdir -p x40-ro
if mount -t tmpfs -o ro,size=1m tmpfs x40-ro 2>/dev/null; then
  x40_saved=$BIH_CACHE_DIR
  export BIH_CACHE_DIR=$T/x40-ro
  case_ cache "read-only cache folder" 3 -- run x40-adapter.json --out out-x40c
  export BIH_CACHE_DIR=$x40_saved
  umount x40-ro
fi
x40_saved=$BIH_CACHE_DIR
export BIH_CACHE_DIR="$T/caf$(printf '\xe9')"
case_ cache "cache folder whose name is not UTF-8" 3 -- run x40-adapter.json --out out-x40d
export BIH_CACHE_DIR=$x40_saved
