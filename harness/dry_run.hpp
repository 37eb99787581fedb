// dry_run.hpp: `bih run FILE --dry-run`: what each selected scenario would run, running nothing.
//
// Per scenario its id, the engine kind and name, and what would be started: for bih its backend;
// for a command engine the adapter's argv, folder and environment; for a launched server the
// exact command line and environment of the profile's mapping (the port left as "{port}"); for a
// running server its url. A scenario this build or machine cannot run says why.
#pragma once

#include <string>
#include <vector>

#include "spec/scenario.hpp"

namespace bih {

std::string dry_run_text(const std::vector<Scenario>& scenarios);

}  // namespace bih
