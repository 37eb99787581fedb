// test_matrix.cpp: `bih matrix` from the fixture reports in tests/data/matrix (real CPU reports
// plus an edited `error` and `unsupported` report and a manifest naming one scenario without a
// report) into every format: where each report lands, what its cell says, and that the formats
// carry the missing scenarios and the mixed-environment warning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "base/errors.hpp"
#include "harness/matrix_render.hpp"
#include "harness/matrix_view.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "test_files.hpp"
#include "tests/cpu/run_bih.hpp"

#if __has_include(<valijson/validator.hpp>)
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>
#define BIH_HAVE_VALIJSON 1
#endif

namespace bih::test_matrix {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using json = nlohmann::json;

const fs::path kFixtures = fs::path(BIH_SOURCE_DIR) / "tests/data/matrix";
const std::string kRingId =
    "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kErrorId =
    "tp=8,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kUnsupportedId = kRingId + ",ranks=nccl";
const std::string kVendorId =
    "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=vendor,model=tiny";
const std::string kMissingId =
    "tp=3,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";

// The fixture report of `id`, straight from its file (the truth the matrix is checked against).
json fixture_report(const std::string& id) {
  return read_report((kFixtures / report_file_name(id)).string());
}

json batch_comparison(const json& report) {
  for (const json& c : report.at("comparisons")) {
    if (c.at("kind") == "batch") return c;
  }
  throw std::runtime_error("no batch comparison in " + report.at("id").get<std::string>());
}

struct Located {
  const MatrixTable* table = nullptr;
  size_t row = 0, col = 0;
  const CellEntry* entry = nullptr;
};

Located locate(const MatrixView& view, const std::string& id) {
  for (const MatrixTable& t : view.tables) {
    for (size_t r = 0; r < t.rows.size(); ++r) {
      for (size_t c = 0; c < t.cols.size(); ++c) {
        for (const CellEntry& e : t.cells[r][c].entries) {
          if (e.id == id) return {&t, r, c, &e};
        }
      }
    }
  }
  return {};
}

MatrixView fixture_view(const MatrixOptions& options = {}) {
  return build_matrix_view(load_report_set({kFixtures.string()}), options);
}

// RFC 4180: quoted fields may hold commas, doubled quotes and line breaks; records end in CRLF.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
      ++i;
    } else {
      field += c;
    }
  }
  if (rows.back().empty() && field.empty()) rows.pop_back();
  return rows;
}

// A copy of the fixtures in which one report claims another bih commit.
fs::path mixed_environment_copy() {
  const fs::path dir = testing::fresh_dir("matrix-mixed-" + std::to_string(::getpid()));
  for (const auto& e : fs::directory_iterator(kFixtures))
    fs::copy(e.path(), dir / e.path().filename());
  const fs::path victim = dir / report_file_name(kVendorId);
  json report = read_report(victim.string());
  report["environment"]["bih"]["commit"] = "0123456789ab";
  std::ofstream(victim) << report.dump(2);
  return dir;
}

#if BIH_HAVE_VALIJSON
TEST(MatrixFixtures, EveryFixtureReportValidatesAgainstTheSchema) {
  const json schema_json =
      json::parse(read_text(fs::path(BIH_SOURCE_DIR) / "reports/report.schema.json"));
  valijson::Schema schema;
  valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
  valijson::adapters::NlohmannJsonAdapter schema_adapter(schema_json);
  parser.populateSchema(schema_adapter, schema);
  int checked = 0;
  for (const auto& path : testing::report_files(kFixtures)) {
    const json doc = json::parse(read_text(path));
    valijson::Validator validator;
    valijson::ValidationResults results;
    valijson::adapters::NlohmannJsonAdapter target(doc);
    EXPECT_TRUE(validator.validate(schema, target, &results)) << path;
    EXPECT_EQ(path.filename().string(), report_file_name(doc.at("id"))) << "file named by its id";
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}
#endif

TEST(MatrixView, PlacesEachReportByItsScenarioKeys) {
  const MatrixView view = fixture_view();
  ASSERT_EQ(view.report_count, 13);
  ASSERT_EQ(view.tables.size(), 2u);  // kernels=invariant and kernels=vendor, both on cpu
  EXPECT_EQ(view.tables[0].split.label, "kernels=invariant, backend=cpu");
  EXPECT_EQ(view.tables[1].split.label, "kernels=vendor, backend=cpu");

  const Located ring = locate(view, kRingId);
  ASSERT_NE(ring.entry, nullptr);
  EXPECT_EQ(ring.table->rows[ring.row].label, "tp=4, sp=on");
  EXPECT_EQ(ring.table->cols[ring.col].label, "graph=none, prefix=off");
  EXPECT_EQ(ring.entry->verdict, "batch_variant");
  const json batch = batch_comparison(fixture_report(kRingId));
  EXPECT_GT(batch.at("logprobs_differ").get<int>(), 0);
  EXPECT_EQ(ring.entry->counts, batch.at("logprobs_differ").dump() + "/" +
                                    batch.at("logprobs_compared").dump() + " logprobs");

  // Rows sort numerically by tp, then sp off before on.
  std::vector<std::string> rows;
  for (const auto& r : view.tables[0].rows) rows.push_back(r.label);
  EXPECT_EQ(rows, (std::vector<std::string>{"tp=2, sp=on", "tp=4, sp=off", "tp=4, sp=on",
                                            "tp=8, sp=on"}));
  // Graph modes in their natural order (none before full), not the alphabet's.
  std::vector<std::string> cols;
  for (const auto& c : view.tables[0].cols) cols.push_back(c.label);
  EXPECT_EQ(cols, (std::vector<std::string>{"graph=none, prefix=off", "graph=full, prefix=on"}));
  const Located vendor = locate(view, kVendorId);
  ASSERT_NE(vendor.entry, nullptr);
  EXPECT_EQ(vendor.table, &view.tables[1]);
  EXPECT_EQ(vendor.entry->distinguishing, "") << "alone in its cell";
}

TEST(MatrixView, NondeterministicCountsComeFromTheRunToRunComparison) {
  const MatrixView view = fixture_view();
  const std::string id =
      "tp=4,sp=off,ar=arrival,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
  const Located arrival = locate(view, id);
  ASSERT_NE(arrival.entry, nullptr);
  EXPECT_EQ(arrival.entry->verdict, "nondeterministic");
  // Named, not iterated in place: a range-for over `fixture_report(id).at(...)` would walk a
  // member of a temporary that dies before the loop body runs (ASan: heap-use-after-free).
  const json report = fixture_report(id);
  for (const json& c : report.at("comparisons")) {
    if (c.at("kind") != "repeat") continue;
    EXPECT_EQ(arrival.entry->counts, c.at("logprobs_differ").dump() + "/" +
                                         c.at("logprobs_compared").dump() +
                                         " logprobs, run to run");
  }
}

TEST(MatrixView, ErrorAndUnsupportedCellsShowTheirReason) {
  const MatrixView view = fixture_view();
  const Located error = locate(view, kErrorId);
  ASSERT_NE(error.entry, nullptr);
  EXPECT_EQ(error.entry->verdict, "error");
  EXPECT_EQ(error.entry->counts, "rank 5 killed by signal 11 (SIGSEGV)") << "first reason line";
  EXPECT_EQ(error.entry->expect_met, false);
  EXPECT_EQ(error.table->rows[error.row].label, "tp=8, sp=on");

  const Located unsupported = locate(view, kUnsupportedId);
  ASSERT_NE(unsupported.entry, nullptr);
  EXPECT_EQ(unsupported.entry->verdict, "unsupported");
  EXPECT_EQ(unsupported.entry->reason, fixture_report(kUnsupportedId).at("reason"));
  EXPECT_TRUE(unsupported.entry->comparisons.empty());
}

TEST(MatrixView, ReportsSharingACellAreNamedByTheKnobsThatDiffer) {
  const MatrixView view = fixture_view();
  const Located ring = locate(view, kRingId);
  const Located nccl = locate(view, kUnsupportedId);
  ASSERT_NE(ring.entry, nullptr);
  ASSERT_NE(nccl.entry, nullptr);
  ASSERT_EQ(ring.table, nccl.table);
  ASSERT_EQ(ring.row, nccl.row);
  ASSERT_EQ(ring.col, nccl.col);
  const auto& entries = ring.table->cells[ring.row][ring.col].entries;
  EXPECT_EQ(entries.size(), 5u);  // rs ring/fixed, sp_min 1/64, ranks emulated/nccl
  EXPECT_NE(ring.entry->distinguishing.find("rs=ring"), std::string::npos);
  EXPECT_NE(ring.entry->distinguishing.find("ranks=emulated"), std::string::npos);
  EXPECT_NE(nccl.entry->distinguishing.find("ranks=nccl"), std::string::npos);
  // Axis keys and the free-text name never tell entries apart.
  for (const auto& e : entries) {
    EXPECT_EQ(e.distinguishing.find("tp="), std::string::npos) << e.distinguishing;
    EXPECT_EQ(e.distinguishing.find("name="), std::string::npos) << e.distinguishing;
  }
}

TEST(MatrixView, HeatMapMarksEveryFirstDivergence) {
  const MatrixView view = fixture_view();
  const Located ring = locate(view, kRingId);
  ASSERT_NE(ring.entry, nullptr);
  const json batch = batch_comparison(fixture_report(kRingId));
  const ComparisonView* shown = nullptr;
  for (const auto& c : ring.entry->comparisons) {
    if (c.kind == "batch") shown = &c;
  }
  ASSERT_NE(shown, nullptr);
  const HeatMap& map = shown->heat_map;
  EXPECT_EQ(map.prompts, batch.at("sequences_compared").get<int>());
  EXPECT_EQ(map.steps, batch.at("logprobs_compared").get<int>() / map.prompts);
  ASSERT_EQ(map.marks.size(), batch.at("first_divergences").size());
  for (size_t i = 0; i < map.marks.size(); ++i) {
    const json& d = batch.at("first_divergences")[i];
    EXPECT_EQ(map.marks[i].prompt, d.at("prompt").get<int>());
    EXPECT_EQ(map.marks[i].step, d.at("step").get<int>());
    EXPECT_EQ(map.marks[i].token_differs, d.at("token_a") != d.at("token_b"));
  }
  EXPECT_EQ(map.capped, map.marks.size() >= 16);
}

TEST(MatrixView, MissingScenariosAndCustomAxes) {
  MatrixOptions options;
  options.rows = {"collectives.reduce_scatter"};
  options.cols = {"parallel.tp"};
  options.split = {};
  const MatrixView view = fixture_view(options);
  EXPECT_EQ(view.missing_ids, std::vector<std::string>{kMissingId});
  ASSERT_EQ(view.tables.size(), 1u);
  std::vector<std::string> cols;
  for (const auto& c : view.tables[0].cols) cols.push_back(c.label);
  EXPECT_EQ(cols, (std::vector<std::string>{"tp=1", "tp=2", "tp=4", "tp=8"}));
  const Located ring = locate(view, kRingId);
  ASSERT_NE(ring.entry, nullptr);
  EXPECT_EQ(ring.table->rows[ring.row].label, "rs=ring");

  options.cols = {"parallel.tp", "parallel.tp"};
  EXPECT_THROW(fixture_view(options), InputError);
  options.cols = {"parallel..tp"};
  EXPECT_THROW(fixture_view(options), InputError);
}

TEST(MatrixMarkdown, CellsLinkToDetailsAndMissingScenariosAreListed) {
  const MatrixView view = fixture_view();
  const std::string md = render_markdown(view);
  const Located ring = locate(view, kRingId);
  ASSERT_NE(ring.entry, nullptr);
  EXPECT_NE(md.find("## kernels=invariant, backend=cpu"), std::string::npos);
  EXPECT_NE(md.find("🟧 [batch_variant " + ring.entry->counts + "](#" + ring.entry->anchor + ")"),
            std::string::npos);
  EXPECT_NE(md.find("<a id=\"" + ring.entry->anchor + "\"></a>"), std::string::npos);
  EXPECT_NE(md.find("🟥 [error rank 5 killed by signal 11 (SIGSEGV)]"), std::string::npos);
  EXPECT_NE(md.find("⬜ [unsupported "), std::string::npos);
  EXPECT_NE(md.find("**Missing scenarios**"), std::string::npos);
  EXPECT_NE(md.find("`" + kMissingId + "`"), std::string::npos);
  EXPECT_EQ(md.find("different environments"), std::string::npos);
  // The row of tp=4, sp=on is one table line holding all five entries of its crowded cell.
  const std::regex row_line(R"(\n\| tp=4, sp=on \|[^\n]*\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(md, m, row_line));
  EXPECT_NE(m.str().find("ranks=nccl"), std::string::npos);
  EXPECT_NE(m.str().find(ring.entry->anchor), std::string::npos);
}

TEST(MatrixCsv, ParsesToOneRowPerReportPlusMissing) {
  const MatrixView view = fixture_view();
  const auto rows = parse_csv(render_csv(view));
  ASSERT_EQ(rows.size(), 1u + 13u + 1u);  // header, reports, the missing scenario
  EXPECT_EQ(rows[0], csv_columns());
  for (const auto& row : rows) ASSERT_EQ(row.size(), csv_columns().size());
  auto column = [&](const std::string& name) {
    return std::find(csv_columns().begin(), csv_columns().end(), name) - csv_columns().begin();
  };
  int found = 0;
  for (const auto& row : rows) {
    if (row[column("id")] == kRingId) {
      ++found;
      const json batch = batch_comparison(fixture_report(kRingId));
      EXPECT_EQ(row[column("verdict")], "batch_variant");
      EXPECT_EQ(row[column("row")], "tp=4, sp=on");
      EXPECT_EQ(row[column("batch_logprobs_differ")], batch.at("logprobs_differ").dump());
      EXPECT_EQ(row[column("batch_logprobs_compared")], batch.at("logprobs_compared").dump());
    } else if (row[column("id")] == kErrorId) {
      ++found;
      EXPECT_EQ(row[column("verdict")], "error");
      EXPECT_EQ(row[column("reason")], fixture_report(kErrorId).at("reason")) << "multi-line";
    } else if (row[column("id")] == kMissingId) {
      ++found;
      EXPECT_EQ(row[column("verdict")], "missing");
    }
  }
  EXPECT_EQ(found, 3);
}

TEST(MatrixJson, HasTheDocumentedStructure) {
  const MatrixView view = fixture_view();
  const json j = render_json(view);
  EXPECT_EQ(j.at("schema"), "bih.matrix/1");
  EXPECT_EQ(j.at("axes").at("rows"), json({"parallel.tp", "sequence_parallel.enabled"}));
  EXPECT_EQ(j.at("mixed_environment"), false);
  EXPECT_EQ(j.at("missing_ids"), json({kMissingId}));
  EXPECT_EQ(j.at("totals").at("batch_variant"), 5);
  EXPECT_EQ(j.at("totals").at("error"), 1);
  EXPECT_EQ(j.at("totals").at("unsupported"), 1);
  ASSERT_EQ(j.at("tables").size(), 2u);
  int entries = 0;
  for (const json& t : j.at("tables")) {
    for (const json& cell : t.at("cells")) {
      ASSERT_LT(cell.at("row").get<size_t>(), t.at("rows").size());
      ASSERT_LT(cell.at("column").get<size_t>(), t.at("columns").size());
      for (const json& e : cell.at("entries")) {
        ++entries;
        if (e.at("id") != kRingId) continue;
        EXPECT_EQ(t.at("rows")[cell.at("row").get<size_t>()].at("values"),
                  json({{"parallel.tp", 4}, {"sequence_parallel.enabled", true}}));
        EXPECT_EQ(e.at("verdict"), "batch_variant");
        EXPECT_EQ(e.at("comparisons")[0].at("first_divergences"),
                  batch_comparison(fixture_report(kRingId)).at("first_divergences"));
      }
    }
  }
  EXPECT_EQ(entries, 13);
}

TEST(MatrixHtml, ColourClassPerVerdictDetailsAndNoNetwork) {
  const MatrixView view = fixture_view();
  const std::string html = render_html(view);
  for (const char* v : {"invariant", "batch_variant", "nondeterministic", "error", "unsupported"}) {
    const std::string cls = std::string("v-") + v;
    EXPECT_NE(html.find("." + cls + " { background-color: rgb("), std::string::npos) << cls;
    EXPECT_NE(html.find("class=\"entry " + cls + "\""), std::string::npos) << cls;
  }
  const Located ring = locate(view, kRingId);
  ASSERT_NE(ring.entry, nullptr);
  const size_t at = html.find("id=\"" + ring.entry->anchor + "\"");
  ASSERT_NE(at, std::string::npos);
  const std::string entry = html.substr(at, html.find("</details>", at) - at);
  EXPECT_NE(entry.find("<span class=\"verdict\">batch_variant</span> <span class=\"counts\">" +
                       ring.entry->counts + "</span>"),
            std::string::npos);
  EXPECT_NE(entry.find("<svg class=\"heatmap\""), std::string::npos);
  const size_t marks = batch_comparison(fixture_report(kRingId)).at("first_divergences").size();
  size_t rects = 0;
  for (size_t p = entry.find("class=\"mark\""); p != std::string::npos;
       p = entry.find("class=\"mark\"", p + 1)) {
    ++rects;
  }
  EXPECT_GE(rects, marks);  // batch plus any other comparison with divergences
  EXPECT_NE(html.find("id=\"missing\""), std::string::npos);
  EXPECT_NE(html.find(escape_html(kMissingId)), std::string::npos);
  EXPECT_EQ(html.find("id=\"mixed-environment\""), std::string::npos);
  EXPECT_NE(html.find("&lt;injected fault for the matrix fixture&gt;"), std::string::npos);
  // Self-contained: nothing to fetch.
  for (const char* fetch : {"<script src", "<link", "<img", "url(", "@import", "https://"}) {
    EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
  }
}

TEST(MatrixEnvironment, MixedEnvironmentsAreFlaggedInEveryFormat) {
  const fs::path dir = mixed_environment_copy();
  const MatrixView view = build_matrix_view(load_report_set({dir.string()}), {});
  ASSERT_EQ(view.environment_differences.size(), 1u);
  EXPECT_EQ(view.environment_differences[0].rfind("bih.commit: ", 0), 0u);
  EXPECT_NE(render_markdown(view).find("**Warning: these reports come from different "
                                       "environments.**"),
            std::string::npos);
  EXPECT_NE(render_html(view).find("id=\"mixed-environment\""), std::string::npos);
  const json j = render_json(view);
  EXPECT_EQ(j.at("mixed_environment"), true);
  EXPECT_EQ(j.at("environment_differences").size(), 1u);

  const fs::path out = dir / "matrix-out";
  const auto warned = testing::run_bih({"matrix", dir.string(), "--out", out.string()});
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_NE(warned.output.find("different environments"), std::string::npos);
  const auto strict = testing::run_bih(
      {"matrix", dir.string(), "--out", (dir / "strict").string(), "--strict-environment"});
  EXPECT_EQ(strict.exit_code, 2) << strict.output;
  EXPECT_NE(strict.output.find("bih.commit"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "strict" / "matrix.html"));
  fs::remove_all(dir);
}

TEST(MatrixCli, WritesEveryFormatOrTheChosenOnes) {
  const fs::path out = testing::fresh_dir("matrix-cli-" + std::to_string(::getpid()));
  const auto all = testing::run_bih(
      {"matrix", kFixtures.string(), "--out", out.string(), "--title", "Fixture <matrix>"});
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find(kMissingId), std::string::npos) << "missing scenarios on stderr";
  for (const char* name : {"matrix.md", "matrix.csv", "matrix.json", "matrix.html"}) {
    EXPECT_TRUE(fs::exists(out / name)) << name;
  }
  EXPECT_NE(read_text(out / "matrix.html").find("<title>Fixture &lt;matrix&gt;</title>"),
            std::string::npos);
  // Report links are relative to the matrix folder, and resolve.
  const json j = json::parse(read_text(out / "matrix.json"));
  const std::string report = j.at("tables")[0].at("cells")[0].at("entries")[0].at("report");
  EXPECT_NE(report.front(), '/');
  EXPECT_TRUE(fs::exists(out / report)) << report;

  const fs::path csv_only = out / "csv-only";
  const auto csv = testing::run_bih(
      {"matrix", kFixtures.string(), "--out", csv_only.string(), "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_TRUE(fs::exists(csv_only / "matrix.csv"));
  EXPECT_FALSE(fs::exists(csv_only / "matrix.html"));

  EXPECT_EQ(
      testing::run_bih({"matrix", kFixtures.string(), "--out", out.string(), "--format", "pdf"})
          .exit_code,
      2);
  EXPECT_EQ(testing::run_bih({"matrix", (out / "nowhere").string()}).exit_code, 2);
  EXPECT_EQ(testing::run_bih({"matrix", kFixtures.string(), "--out", out.string(), "--rows",
                              "parallel.tp", "--cols", "parallel.tp"})
                .exit_code,
            2);
  fs::remove_all(out);
}

TEST(MatrixEscaping, EachFormatEscapesItsSpecialCharacters) {
  EXPECT_EQ(escape_html("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  EXPECT_EQ(escape_markdown("a|b*c_d\nnext [x]"), "a\\|b\\*c\\_d next \\[x\\]");
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\"\nbye"), "\"say \"\"hi\"\"\nbye\"");
}

}  // namespace
}  // namespace bih::test_matrix

namespace bih::test_matrix {
namespace {

TEST(MatrixLocalization, ExplainSummaryShowsInTheCellDetails) {
  // The ring report with a localization section, as `bih run --set localize=true` writes it.
  const auto dir = fs::temp_directory_path() / ("bih-matrix-loc-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  json report = fixture_report(kRingId);
  const std::string summary =
      "first divergence of prompt 0 token 0 (bs=1 vs bs=16): layer 0 attn_reduce <rs>";
  report["localization"] = {{"comparison", "batch"}, {"a", "bs=1"},       {"b", "bs=16"},
                            {"prompt", 0},           {"step", 0},         {"diverged", true},
                            {"entries_compared", 9}, {"summary", summary}};
  std::ofstream(dir / report_file_name(kRingId)) << report.dump(2);
  const MatrixView view = build_matrix_view(load_report_set({dir.string()}), {});
  const Located at = locate(view, kRingId);
  ASSERT_NE(at.entry, nullptr);
  EXPECT_EQ(at.entry->localization, summary);
  EXPECT_NE(render_html(view).find("layer 0 attn_reduce &lt;rs&gt;"), std::string::npos);
  EXPECT_NE(render_markdown(view).find(summary), std::string::npos);
  const json rendered = render_json(view);
  EXPECT_NE(rendered.dump().find("layer 0 attn_reduce <rs>"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bih::test_matrix
