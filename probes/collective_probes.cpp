// collective_probes.cpp: probe cases for every collective x order model of the emulated group,
// and the NCCL order fingerprint (run by the CUDA leaf where this build has NCCL).
//
// One token's per-rank hidden vector is placed at the probed rows of batches of M rows, the rest
// random, and the collective runs on an emulated group of tp threads (probe_backend.hpp: in CPU
// memory, or on one GPU with a stream per rank), as the engine calls it:
//   all_reduce      the whole [M, H] message (SP off): the ring's chunk boundaries follow M*H;
//   reduce_scatter  SP style: M padded to a multiple of tp, rank r gets rows [r*M/tp, (r+1)*M/tp),
//                   so the rank that owns (and adds last to) the token's row follows its position;
//   all_gather      SP style: the row lives in its owner's shard and is gathered to every rank.
// Values span 2^-8..2^8 with random signs and mantissas, so every bf16 rounding after a hop
// moves bits and two chains that differ in order give different sums for most elements. The sweep
// runs twice; `arrival` differs between the runs (its chain follows thread timing).
// Claims (DESIGN.md's table): ring and arrival are variant from tp=3 on; at tp=2 a sum is one
// commutative add, so every order is invariant; tree and fixed are invariant; all_gather copies.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "probes/probe.hpp"
#include "probes/probe_backend.hpp"

namespace bih::probe {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
  }
  return "?";
}

namespace {

// A bf16 value of magnitude 2^-8..2^8, random sign and mantissa: sums of such values in different
// orders round differently.
bf16 spread_value(std::mt19937& rng) {
  const int exponent = std::uniform_int_distribution<int>(-8, 8)(rng);
  const float mantissa = 1.0f + std::uniform_int_distribution<int>(0, 127)(rng) / 128.0f;
  const float sign = std::uniform_int_distribution<int>(0, 1)(rng) ? -1.0f : 1.0f;
  return to_bf16(sign * std::ldexp(mantissa, exponent));
}

std::vector<bf16> spread_values(std::mt19937& rng, size_t n) {
  std::vector<bf16> v(n);
  for (auto& e : v) e = spread_value(rng);
  return v;
}

Expect claimed(Collective c, ReduceOrder order, int tp) {
  if (c == Collective::all_gather || tp == 2) return Expect::invariant;
  return order == ReduceOrder::ring || order == ReduceOrder::arrival ? Expect::variant
                                                                     : Expect::invariant;
}

BatchRunner collective_runner(const std::shared_ptr<ProbeBackend>& backend, Collective c,
                              ReduceOrder order, int tp, int H, uint32_t seed) {
  std::mt19937 rng(seed + 101u);
  // token[r]: rank r's [H] contribution to the probed row.
  auto token = std::make_shared<std::vector<std::vector<bf16>>>();
  for (int r = 0; r < tp; ++r) token->push_back(spread_values(rng, H));
  const ProbeBackend::CollectiveOp collective = backend->bind_collective(c, order, tp);
  return [=, keep_alive = backend](const Batch& b, std::mt19937& filler) {
    const size_t h = static_cast<size_t>(H);
    const int padded = c == Collective::all_reduce ? b.M : (b.M + tp - 1) / tp * tp;
    const int shard_rows = padded / tp;
    std::vector<std::vector<bf16>> in(tp), out(tp);  // per rank
    for (int r = 0; r < tp; ++r) {
      if (c == Collective::all_gather) {
        // Rank r's shard [shard_rows, H]: padding rows stay zero.
        in[r].assign(shard_rows * h, bf16{});
        for (int row = 0; row < shard_rows; ++row) {
          const int global = r * shard_rows + row;
          if (global >= b.M) break;
          const bool probed =
              std::find(b.positions.begin(), b.positions.end(), global) != b.positions.end();
          const std::vector<bf16> values = probed ? (*token)[0] : spread_values(filler, h);
          std::copy(values.begin(), values.end(), in[r].begin() + row * h);
        }
        out[r].resize(padded * h);
        continue;
      }
      in[r] = spread_values(filler, padded * h);                // [padded, H]
      std::fill(in[r].begin() + b.M * h, in[r].end(), bf16{});  // SP padding rows
      for (int p : b.positions)
        std::copy((*token)[r].begin(), (*token)[r].end(), in[r].begin() + p * h);
      out[r].resize(c == Collective::all_reduce ? 0 : shard_rows * h);
    }
    // Per rank, as Communicator counts: the whole message, or one shard.
    const size_t count = c == Collective::all_reduce ? padded * h : shard_rows * h;
    collective(in, out, count);
    RowBits rows;
    for (int p : b.positions) {
      const bf16* row = nullptr;
      switch (c) {
        case Collective::all_reduce:  // every rank holds the sum; read the last rank's copy
          row = in[tp - 1].data() + p * h;
          break;
        case Collective::reduce_scatter:  // the row's owner holds it
          row = out[p / shard_rows].data() + (p % shard_rows) * h;
          break;
        case Collective::all_gather:  // every rank holds all rows; read the last rank's copy
          row = out[tp - 1].data() + p * h;
          break;
      }
      std::vector<uint32_t> bits(h);
      for (size_t j = 0; j < h; ++j) bits[j] = row[j].bits;
      rows.push_back(std::move(bits));
    }
    return rows;
  };
}

Result nccl_unsupported(const std::string& id) {
  Result r;
  r.id = id;
  r.op = "nccl";
  r.expect = Expect::model_match;
  r.status = Status::unsupported;
  r.detail = "this build has no NCCL (configure where CUDA and NCCL are installed)";
  return r;
}

}  // namespace

std::vector<Case> collective_cases() {
  const int H = preset_config("tiny")->hidden_size;
  std::vector<Case> cases;
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    const BackendChoice choice = backend_choice(backend);
    for (Collective c :
         {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather}) {
      for (ReduceOrder order :
           {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed, ReduceOrder::arrival}) {
        for (int tp : {2, 3, 4, 8}) {
          Case k;
          k.op = collective_name(c);
          k.expect = claimed(c, order, tp);
          const std::string head = k.op + "(order=" + to_string(order) +
                                   ",tp=" + std::to_string(tp) +
                                   ",dtype=bf16,h=" + std::to_string(H);
          k.id = [head, backend](const SweepOptions& o) {
            return head + ",m=" + format_batch_sizes(o.batch_sizes) +
                   ",pos=" + format_positions(o.exhaustive) + ",backend=" + to_string(backend) +
                   ",comm=emulated)";
          };
          if (!choice.make) {
            k.unsupported_reason = choice.unavailable;
          } else {
            k.run = [id = k.id, op = k.op, expect = k.expect, make = choice.make, c, order, tp,
                     H](const SweepOptions& o) {
              return sweep(id(o), op, expect, SweepSpec{16, 2},
                           collective_runner(make(), c, order, tp, H, o.seed), o);
            };
          }
          cases.push_back(std::move(k));
        }
      }
    }
  }
  Case nccl;
  nccl.op = "nccl";
  nccl.expect = Expect::model_match;
  nccl.id = [](const SweepOptions&) {
    return std::string(
        "nccl(collectives=all_reduce|reduce_scatter,dtype=bf16,op=sum,backend=cuda,comm=nccl)");
  };
  nccl.run = [id = nccl.id](const SweepOptions& o) {
    const auto& runner = nccl_runner();
    if (!runner) return nccl_unsupported(id(o));
    Result r = runner(o);
    r.id = id(o);
    r.op = "nccl";
    r.expect = Expect::model_match;
    return r;
  };
  cases.push_back(std::move(nccl));
  return cases;
}

}  // namespace bih::probe
