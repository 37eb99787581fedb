// model_handoff.hpp: the scenario's model in the form an adapter loads, so that every engine of a
// scenario runs the same weights.
//
// A checkpoint folder is handed over as it is when the adapter loads HF folders. A preset (or a
// checkpoint an adapter wants as GGUF) is exported once into bih's model cache, named by what
// determines its bits (preset, seed, exporter version; or the checkpoint's files), written
// atomically so that concurrent runs can share it: $BIH_CACHE_DIR, else $XDG_CACHE_HOME/bih, else
// ~/.cache/bih.
//
// The cache is not trusted: beside each entry NAME (a .gguf file or an .hf folder) a record
// NAME.verify.json lists the entry's files with their sizes and content digests
// (content_hash.hpp), written before the entry is renamed into place. Every reuse recomputes the
// digests (one read of the files: cheap next to an engine loading them) and an entry that does
// not match, or has no record, is exported again with a line on stderr saying why. Export temps
// carry the exporting pid (atomic_file.hpp); each hand-off first removes those of dead processes.
#pragma once

#include <string>

#include "engines/engine_protocol.hpp"
#include "spec/scenario.hpp"

namespace bih {

// bih's cache folder (created on demand). Throws InfraError naming the folder and BIH_CACHE_DIR
// when it cannot be created, InputError when its path is not UTF-8 (paths travel in JSON).
std::string bih_cache_dir();

// The model for scenario s in s.engine.model_format. Throws InputError / InfraError. When a
// cache entry did not match its record and was exported again, says why on stderr and, if
// `notice` is given, in *notice (the engine puts it in the report: a worker's stderr is kept
// only when it fails).
protocol::ModelHandle hand_off_model(const Scenario& s, std::string* notice = nullptr);

// The path hand_off_model(s) hands over, without exporting or checking anything (a dry run's
// command line). The cache folder is named, not created.
std::string handed_off_model_path(const Scenario& s);

// Why the cache entry at `entry` does not match its record (NAME.verify.json): "" when it matches.
std::string cache_entry_mismatch(const std::string& entry);

// weights_hash of the weights in what was handed over (h.path: an HF folder read with
// load_checkpoint, or a GGUF file with gguf_weights_hash): the model identity in the report,
// computed from the bytes the engine was given, not from the scenario's preset.
std::string handed_off_weights_hash(const protocol::ModelHandle& h);

// Sizes and content digests of every file handed over: {"bytes": N, "content_hash": "fnv64w:..."}
// for a file, {"files": {name: {...}}, "bytes": total} for a folder (its regular files).
nlohmann::json handed_off_content(const protocol::ModelHandle& h);

}  // namespace bih
