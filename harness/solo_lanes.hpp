// solo_lanes.hpp: plan.solo_lanes, the bs=1 generation on several engines at once.
//
// Every request still runs alone: lane k's engine gets prompts k, k + lanes, k + 2 lanes, ...,
// one batch of one at a time, so each request's bits are those of a bs=1 run (the engines are
// deterministic and share nothing they write). Lane 0 is the worker's own engine, on the calling
// thread; every other lane makes its engine the same way on a thread of its own. The lanes make
// their engines (side by side), then generate, then shut down, each phase done on every lane
// before the next begins: making or shutting down a CUDA engine while another captures a graph
// on the same GPU invalidates that capture. A lane that cannot make its engine is left out (lanes
// change how long the requests alone take, not their bits). The first failure of a request stops
// every lane before its next request and is rethrown once all lanes' engines are shut down.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engines/engine.hpp"
#include "models/engine.hpp"
#include "spec/scenario.hpp"

namespace bih {

// The lanes the scenario's bs=1 generation of `prompts` requests runs on: plan.solo_lanes, at
// most one per request, and 1 where the engine is not this process's to multiply (an adapter or
// a server is one engine outside the worker; an NCCL rank owns its GPU's communicator).
int solo_lanes_for(const Scenario& s, int prompts);

// run_one(engine, i, stats): prompt i alone on `engine`, its result stored by the caller (each
// i is run exactly once, so callers may write a slot per prompt without a lock). on_done(n)
// runs under a lock after each request, n counting the finished ones. `stats` gets the lanes'
// sums (max_in_flight: their largest).
// make_engine() makes another engine exactly as the worker made its own (the same knobs and
// row extras). A lane whose make_engine() throws is left out, its requests spread over the
// lanes that have an engine, and on_lane_not_made(why) says which lane, why, and how many run.
// Returns the number of lanes that ran.
int run_solo_lanes(TestedEngine& own_engine,
                   const std::function<std::unique_ptr<TestedEngine>()>& make_engine, int lanes,
                   int total,
                   const std::function<void(TestedEngine&, int, GenerateStats&)>& run_one,
                   const std::function<void(int)>& on_done,
                   const std::function<void(const std::string&)>& on_lane_not_made,
                   GenerateStats& stats);

}  // namespace bih
