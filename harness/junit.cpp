#include "harness/junit.hpp"

#include <fmt/core.h>

#include <cstdint>

#include "base/atomic_file.hpp"

namespace bih {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr int kDivergencesShown = 8;                  // per comparison, in the failure text

// The length of the valid UTF-8 sequence at text[i] and its code point; 0 when invalid.
size_t utf8_sequence(std::string_view text, size_t i, uint32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length;
  uint32_t min;
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  } else if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and values past Unicode are not UTF-8.
  if (code_point < min || (code_point >= 0xD800 && code_point <= 0xDFFF) || code_point > 0x10FFFF) {
    return 0;
  }
  return length;
}

std::string attr(std::string_view text) { return xml_escape(text, true); }

// The id's "key=value" part, e.g. id_part(id, "kernels") -> "invariant"; empty when absent.
std::string id_part(const std::string& id, const std::string& key) {
  size_t start = 0;
  while (start <= id.size()) {
    size_t end = id.find(',', start);
    if (end == std::string::npos) end = id.size();
    const std::string part = id.substr(start, end - start);
    if (part.rfind(key + "=", 0) == 0) return part.substr(key.size() + 1);
    start = end + 1;
  }
  return "";
}

// "bih.<kernels>.<backend>": CI systems group test cases by classname, so the kernel family and
// backend become the tree a reader opens. From the report's scenario, else from the id (missing
// scenarios have no report; the id leaves out backend=cpu).
std::string classname(const GateCase& c) {
  std::string kernels, backend;
  if (c.report && c.report->contains("scenario")) {
    const auto& s = c.report->at("scenario");
    // A command or http engine has no kernel family or backend of bih's: it is grouped by its
    // kind and name ("bih.command.llama_cpp"), dots in the name kept out of the class tree.
    if (s.contains("engine") && s["engine"].is_object()) {
      const auto& e = s["engine"];
      const std::string kind = e.contains("kind") && e["kind"].is_string() ? e["kind"] : "";
      if (!kind.empty() && kind != "bih") {
        std::string name = e.contains("name") && e["name"].is_string() ? e["name"] : "unnamed";
        for (char& ch : name) {
          if (ch == '.') ch = '_';
        }
        return "bih." + kind + "." + name;
      }
    }
    if (s.contains("kernels") && s["kernels"].is_string()) kernels = s["kernels"];
    if (s.contains("backend") && s["backend"].is_string()) backend = s["backend"];
  }
  if (kernels.empty()) kernels = id_part(c.id, "kernels");
  if (backend.empty()) backend = id_part(c.id, "backend");
  return "bih." + (kernels.empty() ? "unknown" : kernels) + "." +
         (backend.empty() ? "cpu" : backend);
}

std::string hex_or(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "?";
}

std::string number_or(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  return j[key].dump();
}

// The failure's text: what was expected and where, every comparison's counts and first
// divergences, the reason, the fix and the report file.
std::string failure_text(const GateCase& c) {
  std::string text =
      fmt::format("scenario: {}\nexpected: {} ({})\ngot: {}\n", c.id, to_string(c.expected),
                  c.expectation_source, c.got ? to_string(*c.got) : "no report");
  if (c.report) {
    const auto& r = *c.report;
    if (r.contains("reason") && r["reason"].is_string()) {
      text += "reason: " + r["reason"].get<std::string>() + "\n";
    }
    for (const auto& cmp : r.at("comparisons")) {
      text += fmt::format("comparison {} ({} vs {}): {}\n", cmp.value("kind", "?"),
                          cmp.value("a", "?"), cmp.value("b", "?"), cmp.value("summary", "?"));
      text += fmt::format(
          "  tokens differ {}/{}, logprobs differ {}/{}, sequences diverged {}/{}, max |delta| "
          "{}, max ulp {}\n",
          number_or(cmp, "tokens_differ"), number_or(cmp, "tokens_compared"),
          number_or(cmp, "logprobs_differ"), number_or(cmp, "logprobs_compared"),
          number_or(cmp, "sequences_diverged"), number_or(cmp, "sequences_compared"),
          number_or(cmp, "max_abs_delta"), number_or(cmp, "max_ulp"));
      if (cmp.value("kind", "") == "config" && cmp.contains("reference") &&
          cmp["reference"].is_string()) {
        text +=
            "  against the reference configuration " + cmp["reference"].get<std::string>() + "\n";
      }
      const auto divergences = cmp.value("first_divergences", nlohmann::json::array());
      int shown = 0;
      for (const auto& d : divergences) {
        if (shown++ == kDivergencesShown) {
          text +=
              fmt::format("  ... {} more in the report\n", divergences.size() - kDivergencesShown);
          break;
        }
        text += fmt::format(
            "  first divergence: prompt {} step {}: token {} vs {}, logprob bits {} vs {} ({} "
            "ulp)\n",
            number_or(d, "prompt"), number_or(d, "step"), number_or(d, "token_a"),
            number_or(d, "token_b"), hex_or(d, "logprob_a_bits"), hex_or(d, "logprob_b_bits"),
            number_or(d, "ulp"));
      }
    }
  }
  if (!c.fix.empty()) text += "fix: " + c.fix + "\n";
  return text;
}

// The one-line message CI systems show next to the test name.
std::string failure_message(const GateCase& c) {
  if (c.outcome == GateOutcome::missing) {
    return "no report: scenario missing from the run (shard not gathered?)";
  }
  std::string message =
      fmt::format("expected {}, got {}", to_string(c.expected), to_string(*c.got));
  if (c.report) {
    const std::string evidence = verdict_evidence(*c.report);
    if (!evidence.empty()) message += ": " + evidence;
  }
  return message;
}

double wall_s(const GateCase& c) {
  if (!c.report || !c.report->contains("wall_s") || !(*c.report)["wall_s"].is_number()) return 0;
  return (*c.report)["wall_s"].get<double>();
}

}  // namespace

std::string xml_escape(std::string_view text, bool attribute) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t length = utf8_sequence(text, i, cp);
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    const bool forbidden =
        (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0xFFFE || cp == 0xFFFF;
    if (forbidden) {
      out += kReplacement;
    } else if (cp == '&') {
      out += "&amp;";
    } else if (cp == '<') {
      out += "&lt;";
    } else if (cp == '>') {
      out += "&gt;";
    } else if (attribute && cp == '"') {
      out += "&quot;";
    } else if (attribute && cp == '\'') {
      out += "&apos;";
    } else if (attribute && (cp == '\t' || cp == '\n' || cp == '\r')) {
      out += fmt::format("&#{};", cp);
    } else if (cp == '\r') {
      out += "&#13;";  // a raw CR in text is normalized away by parsers
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

std::string render_junit(const GateResult& result, const std::string& suite_name) {
  int failures = 0, skipped = 0;
  double total_s = 0;
  std::string cases;
  for (const GateCase& c : result.cases) {
    const double t = wall_s(c);
    total_s += t;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"",
                         attr(classname(c)), attr(c.id), t);
    if (c.failure) {
      ++failures;
      cases += fmt::format(
          ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
          attr(failure_message(c)), to_string(c.outcome), xml_escape(failure_text(c), false));
    } else if (c.outcome == GateOutcome::unchecked) {  // allowed: check_expectation said so
      ++skipped;
      const std::string reason = c.report ? first_reason_line(*c.report) : "";
      cases += fmt::format(
          ">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
          attr(fmt::format("not checked on this machine (expected {}, got unsupported): {}",
                           to_string(c.expected), reason.empty() ? "no reason given" : reason)));
    } else if (c.outcome == GateOutcome::pass && c.expected == Verdict::unsupported) {
      ++skipped;
      std::string reason;
      if (c.report && c.report->contains("reason") && (*c.report)["reason"].is_string()) {
        reason = (*c.report)["reason"];
      }
      cases += fmt::format(
          ">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
          attr("unsupported on this machine, as expected" + (reason.empty() ? "" : ": " + reason)));
    } else if (c.outcome != GateOutcome::pass) {  // a tolerated unexpected pass
      cases += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n",
                           xml_escape("warning: " + to_string(c.outcome) + ": " +
                                          failure_message(c) + "\n" + failure_text(c),
                                      false));
    } else {
      cases += "/>\n";
    }
  }
  const int tests = static_cast<int>(result.cases.size());
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format(
      "<testsuites name=\"bih\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      tests, failures, skipped, total_s);
  xml += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      attr(suite_name), tests, failures, skipped, total_s);
  xml += cases;
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

void write_junit(const std::string& path, const GateResult& result, const std::string& suite_name) {
  write_file_atomically(path, render_junit(result, suite_name));
}

}  // namespace bih
