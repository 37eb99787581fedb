#include "models/engine.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "models/bf16.hpp"
#include "models/cpu_forward.hpp"

namespace bih {
namespace {

int round_up(int x, int m) { return (x + m - 1) / m * m; }

}  // namespace

int max_blocks_per_sequence(const EngineOptions& o) {
  return static_cast<int>((int64_t{o.max_model_len} + o.block_size - 1) / o.block_size);
}

int kv_pool_blocks(const EngineOptions& o) {
  const int64_t blocks =
      int64_t{o.max_num_seqs} * max_blocks_per_sequence(o) * (o.prefix_caching ? 2 : 1) + 1;
  // Slots (block * block_size + offset) are ints too, so the bound is on the slot count.
  if (blocks * o.block_size > std::numeric_limits<int>::max()) {
    throw std::length_error("the KV pool of " + std::to_string(blocks) + " blocks of " +
                            std::to_string(o.block_size) +
                            " tokens exceeds 2^31 slots; lower plan.max_num_seqs or max_model_len");
  }
  return static_cast<int>(blocks);
}

uint64_t kv_cache_bytes_per_rank(const EngineOptions& o, int num_layers, int kv_heads_local,
                                 int head_dim) {
  const uint64_t slots = static_cast<uint64_t>(kv_pool_blocks(o)) * o.block_size;
  return slots * kv_heads_local * head_dim * 2 /*K and V*/ * num_layers * sizeof(bf16);
}

int graph_padded_rows(GraphMode mode, const std::vector<int>& capture_sizes, int rows) {
  if (mode == GraphMode::none) return rows;
  for (int size : capture_sizes) {
    if (size >= rows) return size;
  }
  return rows;  // larger than every capture size: runs eagerly, unpadded
}

Engine::Engine(int vocab_size, EngineOptions options, std::unique_ptr<ForwardBackend> forward)
    : vocab_size_(vocab_size),
      options_(std::move(options)),
      forward_(std::move(forward)),
      blocks_(kv_pool_blocks(options_), options_.block_size, options_.prefix_caching) {}

Engine::Engine(std::shared_ptr<const ModelWeights> weights, EngineOptions options,
               std::vector<Communicator*> comms)
    : Engine(weights->config.vocab_size, options,
             std::make_unique<CpuForward>(weights, options, std::move(comms))) {}

Engine::~Engine() = default;

void Engine::pad_step(StepBatch& step) const {
  step.rows_real = static_cast<int>(step.tokens.size());
  int rows = graph_padded_rows(options_.graph_mode, options_.capture_sizes, step.rows_real);
  step.graph_padded = options_.graph_mode != GraphMode::none && !options_.capture_sizes.empty() &&
                      step.rows_real <= options_.capture_sizes.back();
  // SP pads to a multiple of tp and applies only from min_tokens (vLLM's sp_min_token_num).
  const int sp_rows = round_up(rows, options_.tp);
  step.sp = options_.sp_enabled && options_.tp > 1 && sp_rows >= options_.sp_min_tokens;
  if (step.sp) rows = sp_rows;
  step.rows_padded = rows;
  step.tokens.resize(rows, 0);  // padding rows: token 0 at position 0, no KV slot
  step.positions.resize(rows, 0);
  step.slots.resize(rows, -1);
}

void Engine::check_sequence(const char* who, const std::vector<int32_t>& prompt,
                            int max_tokens) const {
  const std::string at = std::string(who) + ": ";
  if (prompt.empty()) throw std::invalid_argument(at + "empty prompt");
  if (max_tokens < 1) {
    throw std::invalid_argument(at + "max_tokens " + std::to_string(max_tokens) + " is below 1");
  }
  if (int64_t{static_cast<int64_t>(prompt.size())} + max_tokens > options_.max_model_len) {
    throw std::invalid_argument(at + "prompt of " + std::to_string(prompt.size()) + " tokens + " +
                                std::to_string(max_tokens) +
                                " exceeds max_model_len=" + std::to_string(options_.max_model_len));
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab_size_) {
      throw std::invalid_argument(at + "token id " + std::to_string(t) +
                                  " outside the vocabulary [0, " + std::to_string(vocab_size_) +
                                  ")");
    }
  }
}

void Engine::check(const std::vector<int32_t>& prompt, int max_tokens) const {
  check_sequence("add", prompt, max_tokens);
}

SequenceId Engine::add(std::vector<int32_t> prompt, int max_tokens) {
  check(prompt, max_tokens);
  if (idle()) next_index_ = 0;
  Seq s;
  s.id = next_id_++;
  s.index = next_index_++;
  s.max_tokens = max_tokens;
  s.prompt_len = static_cast<int>(prompt.size());
  s.tokens = std::move(prompt);
  waiting_.push_back(std::move(s));
  return waiting_.back().id;
}

bool Engine::done(SequenceId id) const { return finished_.count(id) != 0; }

SequenceResult Engine::take(SequenceId id) {
  auto it = finished_.find(id);
  if (it == finished_.end()) {
    throw std::logic_error("take: sequence " + std::to_string(id) + " is not done");
  }
  SequenceResult r = std::move(it->second);
  finished_.erase(it);
  return r;
}

void Engine::abort_all() {
  for (Seq& s : running_) blocks_.release(s.table);
  running_.clear();
  waiting_.clear();
  finished_.clear();
}

StepReport Engine::step(GenerateStats* stats) {
  GenerateStats local_stats;
  GenerateStats& st = stats ? *stats : local_stats;
  // Admission: the prefix cache gives a sequence its cached blocks as it joins.
  while (!waiting_.empty() && static_cast<int>(running_.size()) < options_.max_num_seqs) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    Seq& s = running_.back();
    s.num_computed = blocks_.acquire_prefix(s.tokens, s.table);
    s.registered = s.num_computed / options_.block_size;
    st.prefix_hit_tokens += s.num_computed;
  }
  StepReport report;
  if (running_.empty()) return report;

  StepBatch step;
  struct RowSpan {
    int seq;
    int count;
    bool samples;
  };
  std::vector<RowSpan> spans;
  int budget =
      options_.chunked_prefill_max_tokens > 0 ? options_.chunked_prefill_max_tokens : 1 << 30;
  auto add_rows = [&](int si, int count, bool decode) {
    Seq& s = running_[si];
    blocks_.ensure_capacity(s.num_computed + count, s.table);
    for (int j = 0; j < count; ++j) {
      const int pos = s.num_computed + j;
      step.tokens.push_back(s.tokens[pos]);
      step.positions.push_back(pos);
      step.slots.push_back(static_cast<int64_t>(s.table[pos / options_.block_size]) *
                               options_.block_size +
                           pos % options_.block_size);
      step.queries.push_back(cpu::AttentionQuery{s.table.data(), pos + 1, decode});
    }
    const bool samples = s.num_computed + count == static_cast<int>(s.tokens.size());
    if (samples) step.logit_rows.push_back(static_cast<int>(step.tokens.size()) - 1);
    // Trace every row of the traced sequence in the step that samples its traced token.
    if (samples && trace_sink_ && s.index == trace_request_.sequence &&
        static_cast<int>(s.out.tokens.size()) == trace_request_.step) {
      for (int j = 0; j < count; ++j) {
        step.trace_rows.push_back(static_cast<int>(step.tokens.size()) - count + j);
        step.trace_positions.push_back(s.num_computed + j);
      }
      step.trace = trace_sink_;
    }
    spans.push_back(RowSpan{si, count, samples});
    budget -= count;
  };
  // Decode rows first, then prefill chunks, as a serving scheduler orders them.
  const int n = static_cast<int>(running_.size());
  for (int i = 0; i < n && budget > 0; ++i) {
    if (running_[i].num_computed >= running_[i].prompt_len) {
      add_rows(i, 1, true);
      ++step.num_decode;
    }
  }
  for (int i = 0; i < n && budget > 0; ++i) {
    Seq& s = running_[i];
    if (s.num_computed >= s.prompt_len) continue;
    add_rows(i, std::min(s.prompt_len - s.num_computed, budget), false);
  }
  pad_step(step);
  step.keep_logits = extras_.any();
  forward_->run(step);
  ++st.steps;
  st.rows += step.rows_padded;
  st.real_rows += step.rows_real;
  st.sp_steps += step.sp ? 1 : 0;
  report.ran.reserve(spans.size());
  for (const RowSpan& span : spans) report.ran.push_back(running_[span.seq].id);

  size_t sample_index = 0;
  std::vector<bool> finished(running_.size(), false);
  for (const RowSpan& span : spans) {
    Seq& s = running_[span.seq];
    s.num_computed += span.count;
    if (span.samples) {
      s.out.tokens.push_back(step.sampled[sample_index]);
      s.out.logprobs.push_back(step.sampled_logprob[sample_index]);
      append_row_extras(step, sample_index, s.out);
      ++sample_index;
      s.tokens.push_back(s.out.tokens.back());
      finished[span.seq] = static_cast<int>(s.out.tokens.size()) == s.max_tokens;
    }
    blocks_.register_full_blocks(s.tokens, s.num_computed, s.table, s.registered);
    if (finished[span.seq]) {
      blocks_.release(s.table);
      report.finished.push_back(s.id);
      finished_.emplace(s.id, std::move(s.out));
    }
  }
  // Finished sequences leave; the rest keep their order.
  size_t kept = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!finished[i]) {
      if (kept != i) running_[kept] = std::move(running_[i]);
      ++kept;
    }
  }
  running_.resize(kept);
  return report;
}

std::vector<SequenceResult> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                             int max_tokens, GenerateStats* stats,
                                             const StepCallback& on_step) {
  if (!idle()) {
    throw std::logic_error("generate: " + std::to_string(running() + waiting()) +
                           " sequences added with add() are unfinished");
  }
  if (static_cast<int>(prompts.size()) > options_.max_num_seqs) {
    throw std::invalid_argument(
        "generate: " + std::to_string(prompts.size()) +
        " prompts exceed max_num_seqs=" + std::to_string(options_.max_num_seqs));
  }
  for (const auto& prompt : prompts) check_sequence("generate", prompt, max_tokens);
  GenerateStats local_stats;
  GenerateStats& st = stats ? *stats : local_stats;
  std::vector<SequenceId> ids;
  ids.reserve(prompts.size());
  for (const auto& prompt : prompts) ids.push_back(add(prompt, max_tokens));
  int finished = 0;
  try {
    while (finished < static_cast<int>(ids.size())) {
      finished += static_cast<int>(step(&st).finished.size());
      if (on_step) on_step(st.steps, finished, static_cast<int>(ids.size()));
    }
  } catch (...) {
    abort_all();
    throw;
  }
  std::vector<SequenceResult> results;
  results.reserve(ids.size());
  for (SequenceId id : ids) results.push_back(take(id));
  return results;
}

void Engine::append_row_extras(const StepBatch& step, size_t row, SequenceResult& out) const {
  if (!extras_.any()) return;
  const size_t V = static_cast<size_t>(vocab_size_);
  if (step.logits.size() < (row + 1) * V) {
    throw std::logic_error("the forward backend returned no logits for the row extras");
  }
  const bf16* logits = step.logits.data() + row * V;
  if (extras_.top_k > 0) {
    out.top_k_ids.emplace_back();
    out.top_k_values.emplace_back();
    row_top_k(logits, vocab_size_, extras_.top_k, out.top_k_ids.back(), out.top_k_values.back());
  }
  if (extras_.row_digest) out.row_digests.push_back(row_digest(logits, vocab_size_));
}

std::vector<SequenceResult> Engine::score(const std::vector<ScoreRequest>& requests) {
  if (!idle()) throw std::logic_error("score: the engine has sequences in flight");
  if (static_cast<int>(requests.size()) > options_.max_num_seqs) {
    throw std::invalid_argument(
        "score: " + std::to_string(requests.size()) +
        " sequences exceed max_num_seqs=" + std::to_string(options_.max_num_seqs));
  }
  for (const ScoreRequest& r : requests) {
    if (r.tokens.empty()) throw std::invalid_argument("score: no tokens to score");
    check_sequence("score", r.prompt, static_cast<int>(r.tokens.size()));
    for (int32_t t : r.tokens) {
      if (t < 0 || t >= vocab_size_) {
        throw std::invalid_argument("score: forced token id " + std::to_string(t) +
                                    " outside the vocabulary");
      }
    }
  }
  // Block tables first: the queries point into them, so they must not move.
  std::vector<std::vector<int32_t>> tables(requests.size());
  StepBatch step;
  step.keep_logits = true;  // the forced token's logprob where the argmax differs
  for (size_t i = 0; i < requests.size(); ++i) {
    const ScoreRequest& r = requests[i];
    const int prompt_len = static_cast<int>(r.prompt.size());
    const int T = prompt_len + static_cast<int>(r.tokens.size()) - 1;
    blocks_.ensure_capacity(T, tables[i]);
    for (int pos = 0; pos < T; ++pos) {
      step.tokens.push_back(pos < prompt_len ? r.prompt[pos] : r.tokens[pos - prompt_len]);
      step.positions.push_back(pos);
      step.slots.push_back(static_cast<int64_t>(tables[i][pos / options_.block_size]) *
                               options_.block_size +
                           pos % options_.block_size);
      step.queries.push_back(cpu::AttentionQuery{tables[i].data(), pos + 1, false});
      if (pos >= prompt_len - 1)
        step.logit_rows.push_back(static_cast<int>(step.tokens.size()) - 1);
    }
  }
  pad_step(step);
  try {
    forward_->run(step);
  } catch (...) {
    for (auto& table : tables) blocks_.release(table);
    throw;
  }
  for (auto& table : tables) blocks_.release(table);
  std::vector<SequenceResult> results(requests.size());
  size_t row = 0;
  const size_t V = static_cast<size_t>(vocab_size_);
  for (size_t i = 0; i < requests.size(); ++i) {
    SequenceResult& out = results[i];
    for (int32_t forced : requests[i].tokens) {
      out.tokens.push_back(step.sampled[row]);
      // Where the prefill agrees with the decode, its logprob is the backend's own sampled one
      // (the value decode reported came from the same kernel); elsewhere it is computed here.
      out.logprobs.push_back(
          forced == step.sampled[row]
              ? step.sampled_logprob[row]
              : token_logprob(step.logits.data() + row * V, vocab_size_, forced));
      append_row_extras(step, row, out);
      ++row;
    }
  }
  return results;
}

std::vector<bf16> Engine::prefill_logits(const std::vector<int32_t>& tokens) {
  std::vector<int32_t> table;
  blocks_.ensure_capacity(static_cast<int>(tokens.size()), table);
  StepBatch step;
  step.sample = false;
  const int T = static_cast<int>(tokens.size());
  for (int pos = 0; pos < T; ++pos) {
    step.tokens.push_back(tokens[pos]);
    step.positions.push_back(pos);
    step.slots.push_back(static_cast<int64_t>(table[pos / options_.block_size]) *
                             options_.block_size +
                         pos % options_.block_size);
    step.queries.push_back(cpu::AttentionQuery{table.data(), pos + 1, false});
    step.logit_rows.push_back(pos);
  }
  pad_step(step);
  forward_->run(step);
  blocks_.release(table);
  return std::move(step.logits);
}

}  // namespace bih
