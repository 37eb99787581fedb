// junit.hpp: the gate's result as JUnit XML, the format CI systems show as a test report.
//
// One <testcase> per scenario, named by its id, classname "bih.<kernels>.<backend>", time the
// scenario's wall_s. A failing case has <failure message="expected X, got Y: <summary>"
// type="<outcome>"> whose text holds the counts of every comparison and its first divergences
// (prompt, step, tokens, logprob bit patterns) and the fix. An expected `unsupported` is
// <skipped> (nothing was checked on this machine); a tolerated unexpected pass passes with the
// warning in <system-out>.
#pragma once

#include <string>
#include <string_view>

#include "harness/gate.hpp"

namespace bih {

// Escapes text for XML 1.0 character data (attribute=false: & < >) or a double-quoted attribute
// value (also " ' and tab/newline/CR as character references, so they survive attribute
// normalization). Characters XML 1.0 forbids (C0 controls but tab/LF/CR, U+FFFE/U+FFFF) and bytes
// that are not valid UTF-8 become U+FFFD: a stderr tail must never make the report unreadable.
std::string xml_escape(std::string_view text, bool attribute);

// The whole document: <testsuites name="bih"> with one <testsuite name=`suite_name`>.
std::string render_junit(const GateResult& result, const std::string& suite_name);

// Writes render_junit() to `path` atomically. Throws InfraError when it cannot.
void write_junit(const std::string& path, const GateResult& result, const std::string& suite_name);

}  // namespace bih
