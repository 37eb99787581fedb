// bih_adapter.hpp: bih's own engine served over bih.engine/1 (`bih adapter`).
//
// The reference adapter: it puts bih's engine behind the same protocol as any external engine, so
// that the command path (export, hand-off, knobs, values as bit patterns) can be proven bitwise
// against the in-process bih engine on the same scenario, and so that adapter authors have an
// implementation to read. It loads HF folders only; the knobs it is handed are scenario keys, so
// it honours all of them except ranks nccl (one process per GPU).
#pragma once

#include <istream>
#include <ostream>

namespace bih {

// Serves one adapter session: reads messages from `in`, answers on `out`. Returns the exit code.
int serve_bih_engine(std::istream& in, std::ostream& out);

}  // namespace bih
