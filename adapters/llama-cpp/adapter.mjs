#!/usr/bin/env node
// adapter.mjs: puts llama.cpp (through node-llama-cpp 3.21.1, its prebuilt CPU binary) under bih's
// test, speaking the engine protocol bih.engine/1 (docs/engine-protocol.md) on stdin/stdout.
//
// One `generate` is one batch: a llama.cpp context with one sequence per prompt, every sequence
// evaluated concurrently (node-llama-cpp packs the pending tokens of all sequences into one
// llama_decode per step), greedy, EOS ignored, exactly max_tokens tokens each. Contexts are kept,
// one per batch size (creating one costs more than a tiny model's request), and emptied after
// every request: each sequence is disposed, which removes all its KV cells, so no KV cell of one
// request is ever seen by the next (tests/cpu/test_llama_cpp_reuse.cpp checks it against a fresh
// adapter). `reset_cache` (announced in hello) drops the kept contexts.
//
// What is compared (hello.value = "probability"): node-llama-cpp's `confidence` of the sampled
// token: with temperature 0 its sampler chain is llama.cpp's greedy sampler alone (no top-k/top-p,
// no penalties), and the addon computes expf(logit - max) / sum over the full vocabulary in float.
// It reaches JS as a double holding that float exactly, so its float32 bits are sent.
//
// compare.top_k (capabilities.top_k): node-llama-cpp's probabilities list of each step (the
// same softmax over the full vocabulary), the k best re-sorted by (probability desc, id asc) so
// that ties go to the lower id; values are probabilities, like the sampled token's. row_digest is
// not offered: node-llama-cpp hands JS no raw logits row, and a digest of the probabilities would
// not be the documented one. score is not offered either (controlledEvaluate could teacher-force
// a sequence; not done yet), so compare.prefill records its comparison as unsupported.
//
// stdout carries protocol lines only: llama.cpp's log goes through node-llama-cpp's logger to
// stderr, and console.log/info/debug are sent to stderr too (before the library is loaded).
import { readFileSync } from "node:fs";
import readline from "node:readline";
import util from "node:util";

const PROTOCOL = "bih.engine/1";
const ADAPTER = { name: "bih-llama-cpp", version: "1" };

const writeProtocol = process.stdout.write.bind(process.stdout);
const toStderr = (...args) => process.stderr.write(util.format(...args) + "\n");
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;

function send(message) {
  writeProtocol(JSON.stringify(message) + "\n");
}

// A float32 value as its IEEE-754 bit pattern, "0x3f800000".
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function float32Bits(x) {
  f32[0] = x;
  return "0x" + u32[0].toString(16).padStart(8, "0");
}

// A request bih cannot be given an answer for: reported as the protocol's `unsupported`.
class Unsupported extends Error {}

// Knobs llama.cpp can honour here, each only at the value that describes what it really does.
// Anything else is `unsupported`: llama.cpp has no tensor or sequence parallelism, no kernel
// families and no NCCL, and this adapter loads only the CPU binary, which has no CUDA graphs.
function checkKnobs(knobs, gpu) {
  const accepted = {};
  const fail = (key, why) => {
    throw new Unsupported(`llama.cpp cannot honour ${key}=${JSON.stringify(knobs[key])}: ${why}`);
  };
  for (const [key, value] of Object.entries(knobs ?? {})) {
    switch (key) {
      case "parallel.tp":
        // One process, one device: TP=1 is what llama.cpp always does.
        if (value !== 1) fail(key, "llama.cpp has no tensor parallelism (only parallel.tp=1)");
        break;
      case "sequence_parallel.enabled":
        if (value !== false) fail(key, "llama.cpp has no sequence parallelism");
        break;
      case "sequence_parallel.min_tokens":
        if (knobs["sequence_parallel.enabled"] !== false) {
          fail(key, "llama.cpp has no sequence parallelism (set sequence_parallel.enabled=false)");
        }
        break;
      case "prefix_caching.enabled":
        // Every request starts from an empty context and sequences never share KV cells: no
        // prefix is ever reused, which is what prefix_caching=false asks for.
        if (value !== false) {
          fail(key, "this adapter never reuses a prefix across requests or sequences");
        }
        break;
      case "prefix_caching.block_size":
        if (knobs["prefix_caching.enabled"] !== false) {
          fail(key, "this adapter has no prefix cache (set prefix_caching.enabled=false)");
        }
        break;
      case "cudagraph.mode":
        // The CPU backend captures nothing; a GPU build would use CUDA graphs behind our back.
        if (value !== "none" || gpu !== false) fail(key, "only cudagraph.mode=none on the CPU");
        break;
      case "chunked_prefill.max_tokens":
        // llama.cpp's batch size (n_batch) is the most tokens, prompt chunks and decode tokens of
        // all sequences together, that one llama_decode step takes: the same limit.
        if (!Number.isInteger(value) || value < 1) fail(key, "needs a positive integer");
        accepted.batchSize = value;
        break;
      default:
        if (key.startsWith("nccl_env.")) fail(key, "llama.cpp does not use NCCL");
        if (key === "kernels") fail(key, "llama.cpp has no switchable kernel families");
        fail(key, "no llama.cpp setting corresponds to it");
    }
  }
  return accepted;
}

const KNOWN_OPTIONS = [
  "threads",
  "batchSize",
  "contextSize",
  "gpuLayers",
  "gpu",
  "flashAttention",
  "dispatchSchedule",
  "logLevel",
];

// When a step's batch is dispatched. node-llama-cpp 3.21.1 dispatches at once when every sequence
// of the context has queued its tokens, else on setImmediate ("nextCycle", its default); any other
// string takes the same setImmediate path, so "nextTick" is accepted as a synonym (scenarios
// written for other versions use it). Measured here (2 shared cores, 16 prompts x 12 tokens in one
// context): nextCycle 0.6-1.1 s, a process.nextTick function 0.8-1.2 s, so no such function is
// offered; on an overloaded machine every variant took 8-20 s (ggml's threads spin-wait).
const DISPATCH_SCHEDULES = ["nextCycle", "nextTick"];
function resolveDispatchSchedule(name) {
  if (DISPATCH_SCHEDULES.includes(name)) return name;
  throw new Error(
    `options.dispatchSchedule "${name}" is unknown; valid: ${DISPATCH_SCHEDULES.join(", ")}`,
  );
}

class Engine {
  contexts = new Map();  // sequence count -> its reused context

  async start(init) {
    if (init.protocol !== PROTOCOL) {
      throw new Error(`protocol "${init.protocol}" is not spoken here; valid: "${PROTOCOL}"`);
    }
    const model = init.model ?? {};
    if (model.format !== "gguf") {
      throw new Error(
        `model.format "${model.format}": llama.cpp reads only GGUF; valid: "gguf" ` +
          `(set the scenario's engine.model_format to "gguf")`,
      );
    }
    const options = init.options ?? {};
    for (const key of Object.keys(options)) {
      if (!KNOWN_OPTIONS.includes(key)) {
        throw new Error(`options.${key} is unknown; valid: ${KNOWN_OPTIONS.join(", ")}`);
      }
    }
    const limits = init.limits ?? {};
    const gpu = options.gpu ?? false;
    const fromKnobs = checkKnobs(init.knobs, gpu);
    if (options.batchSize !== undefined && fromKnobs.batchSize !== undefined) {
      throw new Error("options.batchSize and the knob chunked_prefill.max_tokens both set it");
    }

    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    // The package's "exports" hide package.json; its entry point is dist/index.js.
    const packageJson = new URL("../package.json", import.meta.resolve("node-llama-cpp"));
    const nodeLlamaCppVersion = JSON.parse(readFileSync(packageJson, "utf8")).version;
    const logLevel = options.logLevel ?? "warn";
    if (!Object.values(LlamaLogLevel).includes(logLevel)) {
      throw new Error(`options.logLevel "${logLevel}"; valid: ${Object.values(LlamaLogLevel)}`);
    }
    // build "never" + skipDownload: the prebuilt binary from npm or an error, never a download
    // or a source build at run time.
    this.llama = await getLlama({
      gpu,
      build: "never",
      skipDownload: true,
      usePrebuiltBinaries: true,
      progressLogs: false,
      logLevel,
      logger: (level, message) => process.stderr.write(`[llama.cpp ${level}] ${message.trimEnd()}\n`),
      ...(options.threads !== undefined ? { maxThreads: options.threads } : {}),
    });
    const threads = options.threads ?? this.llama.cpuMathCores;
    const gpuLayers = options.gpuLayers ?? 0;
    this.model = await this.llama.loadModel({ modelPath: model.path, gpuLayers });
    this.vocabSize = model.config?.vocab_size ?? this.model.fileInsights?.tokens?.length;

    // Per sequence (node-llama-cpp gives every sequence its own contextSize cells).
    this.contextSize = options.contextSize ?? limits.max_model_len ?? 4096;
    this.maxBatch = limits.max_batch ?? 1;
    this.contextOptions = {
      contextSize: this.contextSize,
      threads: { ideal: threads, min: threads },
      batching: {
        dispatchSchedule: resolveDispatchSchedule(options.dispatchSchedule ?? "nextCycle"),
        itemPrioritizationStrategy: "maximumParallelism",
      },
      ...(options.batchSize ?? fromKnobs.batchSize
        ? { batchSize: options.batchSize ?? fromKnobs.batchSize }
        : {}),
      ...(options.flashAttention !== undefined ? { flashAttention: options.flashAttention } : {}),
    };
    // A one-sequence context shows what llama.cpp resolved (padding, batch size, flash attention).
    const probe = await this.model.createContext({ ...this.contextOptions, sequences: 1 });
    const resolved = {
      contextSizePerSequence: probe.contextSize,
      batchSize: probe.batchSize,
      flashAttention: probe.flashAttention,
      kvCacheKeyType: probe.kvCacheKeyType,
      kvCacheValueType: probe.kvCacheValueType,
      threads: probe.idealThreads,
    };
    // Kept as the pool's one-sequence context (what every bs=1 request uses).
    this.contexts.set(1, probe);

    const release = this.llama.llamaCppRelease;
    return {
      type: "hello",
      protocol: PROTOCOL,
      engine: { name: "llama.cpp", version: release.release },
      adapter: ADAPTER,
      value: "probability",
      capabilities: { reset_cache: true, top_k: true },
      settings: {
        llamaCppRepo: release.repo,
        llamaCppRelease: release.release,
        nodeLlamaCpp: nodeLlamaCppVersion,
        node: process.version,
        binary: this.llama.buildType,
        gpu: this.llama.gpu,
        gpuLayers,
        systemInfo: this.llama.systemInfo,
        modelPath: model.path,
        threads,
        ...resolved,
        contextSize: this.contextSize,
        sequencesPerContext:
          "one per prompt of the request; one context per batch size, reused, its sequences " +
          "disposed (every KV cell removed) after each request",
        maxBatch: this.maxBatch,
        dispatchSchedule: options.dispatchSchedule ?? "nextCycle",
        itemPrioritizationStrategy: "maximumParallelism",
        sampler: "greedy (temperature 0, no top-k/top-p/min-p, no penalties)",
        value: "confidence: expf(logit - max) / sum over the vocabulary (float)",
        yieldEogToken: true,
        logLevel,
      },
    };
  }

  async generate(request) {
    const { prompts, max_tokens: maxTokens } = request;
    const topK = Number.isInteger(request.top_k) ? request.top_k : 0;
    if (request.greedy !== true || request.ignore_eos !== true) {
      throw new Error("only greedy: true with ignore_eos: true is implemented");
    }
    if (!Array.isArray(prompts) || prompts.length === 0) throw new Error("prompts: none given");
    if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new Error("max_tokens: not >= 1");
    prompts.forEach((p, i) => {
      if (!Array.isArray(p) || p.length === 0) throw new Error(`prompts[${i}]: empty`);
      for (const t of p) {
        if (!Number.isInteger(t) || t < 0 || (this.vocabSize && t >= this.vocabSize)) {
          throw new Error(`prompts[${i}]: token ${t} is outside the vocabulary`);
        }
      }
      if (p.length + maxTokens > this.contextSize) {
        // A context shift would silently drop the prompt's beginning: refuse instead.
        throw new Error(
          `prompts[${i}]: ${p.length} + ${maxTokens} tokens exceed contextSize ${this.contextSize}`,
        );
      }
    });

    const context = await this.contextFor(prompts.length);
    const sequences = prompts.map(() => context.getSequence());
    let clean = false;
    try {
      let done = 0;
      const total = prompts.length * maxTokens;
      const runOne = async (prompt, sequence) => {
        const tokens = [];
        const values = [];
        const topIds = [];
        const topValues = [];
        const steps = sequence.evaluateWithMetadata(
          prompt,
          { confidence: true, probabilities: topK > 0 },
          { temperature: 0, yieldEogToken: true },
        );
        for await (const { token, confidence, probabilities } of steps) {
          tokens.push(token);
          values.push(float32Bits(confidence));
          if (topK > 0) {
            const best = [...probabilities.entries()]
              .sort((a, b) => b[1] - a[1] || a[0] - b[0])
              .slice(0, topK);
            topIds.push(best.map(([id]) => id));
            topValues.push(best.map(([, p]) => float32Bits(p)));
          }
          if (++done % 64 === 0) send({ type: "progress", text: `${done}/${total} tokens` });
          if (tokens.length === maxTokens) break;
        }
        if (tokens.length !== maxTokens) {
          throw new Error(`a sequence stopped after ${tokens.length} of ${maxTokens} tokens`);
        }
        return topK > 0
          ? { tokens, values, top_k_ids: topIds, top_k_values: topValues }
          : { tokens, values };
      };
      const results = await Promise.all(prompts.map((p, i) => runOne(p, sequences[i])));
      clean = true;
      return { type: "result", id: request.id, sequences: results };
    } finally {
      await this.release(prompts.length, sequences, clean);
    }
  }

  // The context of `n` sequences, made on first use and kept: creating one costs far more than a
  // tiny model's request. Its size and options are those a fresh context per request had.
  async contextFor(n) {
    let context = this.contexts.get(n);
    if (context === undefined) {
      context = await this.model.createContext({ ...this.contextOptions, sequences: n });
      this.contexts.set(n, context);
    }
    return context;
  }

  // Empties the context for the next request. Disposing a sequence removes all its KV cells
  // (llama_memory_seq_rm over every position) and returns its id to the context's free list, which
  // hands ids out first-in first-out: released in order 0..n-1, the next request's prompt i gets
  // sequence id i again, as in a fresh context. With every cell free, llama.cpp's KV cache starts
  // placing cells from the first one again, so a reused context holds its cells where a fresh one
  // would. After a failure the context is dropped whole instead: its state is unknown.
  async release(n, sequences, clean) {
    if (clean) {
      for (const sequence of sequences) await sequence.dispose();
      return;
    }
    const context = this.contexts.get(n);
    this.contexts.delete(n);
    await context?.dispose();
  }

  // reset_cache: nothing of a request survives into the next (see release()), so there is no
  // prefix cache to empty; the pooled contexts are dropped anyway, so the next request starts from
  // contexts as new.
  async resetCache() {
    const contexts = [...this.contexts.values()];
    this.contexts.clear();
    for (const context of contexts) await context.dispose();
  }

  async stop() {
    await this.resetCache();
    await this.model?.dispose();
    await this.llama?.dispose();
  }
}

async function main() {
  const engine = new Engine();
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let started = false;
  for await (const line of lines) {
    if (line.trim() === "") continue;
    let message;
    try {
      message = JSON.parse(line);
    } catch (e) {
      send({ type: "error", message: `not a JSON line: ${e.message}` });
      continue;
    }
    if (!started) {
      started = true;
      try {
        if (message.type !== "init") throw new Error(`expected init first, got "${message.type}"`);
        send(await engine.start(message));
        continue;
      } catch (e) {
        if (e instanceof Unsupported) {
          send({ type: "unsupported", reason: e.message });
        } else {
          send({ type: "error", message: e?.message ?? String(e) });
        }
        await engine.stop().catch(() => {});
        process.exit(0);
      }
    }
    if (message.type === "shutdown") break;
    if (message.type === "reset_cache") {
      try {
        await engine.resetCache();
        send({ type: "reset_done" });
      } catch (e) {
        send({ type: "error", message: e?.message ?? String(e) });
      }
      continue;
    }
    if (message.type === "generate") {
      try {
        send(await engine.generate(message));
      } catch (e) {
        send({ type: "error", id: message.id, message: e?.message ?? String(e) });
      }
      continue;
    }
    send({ type: "error", message: `unknown message type "${message.type}"` });
  }
  await engine.stop();
  process.exit(0);
}

// `node adapter.mjs --check`: load the prebuilt binary once (no model) and say which it is; setup.sh
// runs it so that a missing or unloadable binary shows at setup, not in a scenario.
async function check() {
  const { getLlama } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, dryRun: true });
  toStderr(`llama.cpp ${llama.llamaCppRelease.release} (${llama.buildType} binary) loads`);
}

(process.argv.includes("--check") ? check() : main()).catch((e) => {
  send({ type: "error", message: e?.message ?? String(e) });
  process.exit(1);
});
