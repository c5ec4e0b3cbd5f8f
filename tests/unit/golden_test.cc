// Golden tests on IR text (after MLIR lit/FileCheck): each tests/golden/<dir>/<case>.ir file is
//
//   // RUN: <pass>[, <pass>...]        (pass names, or "pipeline" for the whole simplification pipeline;
//                                       "partition": the plan's structure; "loops": every group's
//                                       loop nest as its emitter builds it and the default schedule
//                                       leaves it, tests/golden/loops/)
//   <input graph>
//   // EXPECT:
//   <expected printed graph, or the word UNCHANGED>
//
// The input is parsed, verified, run through the passes (verifying after each), printed without
// elision, and compared line by line with the expectation; `//` lines in the expectation are
// ignored. UNCHANGED also asserts that the passes reported no change. Set KILN_UPDATE_GOLDEN=1 to
// rewrite the expectations from the actual output (then review the diff; comments after the
// "// EXPECT:" line are not kept).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fusion/explain.h"
#include "fusion/partitioner.h"
#include "loop/loop_transforms.h"
#include "loop/lower_group.h"
#include "transforms/lowering.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "transforms/pipeline.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(KILN_SOURCE_DIR) / "tests" / "golden";

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// A line diff (longest common subsequence; golden files are small): "-" expected, "+" actual.
std::string line_diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> lcs(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out += "  " + a[i++] + "\n";
      ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out += "- " + a[i++] + "\n";
    } else {
      out += "+ " + b[j++] + "\n";
    }
  }
  return out;
}

struct GoldenCase {
  std::vector<std::string> passes;
  std::string input;          // padded with newlines so parse errors carry the file's line numbers
  std::string expected;       // printed graph text, or "UNCHANGED"
  std::string header_and_input;  // the file up to and including the "// EXPECT:" line
};

GoldenCase read_case(const fs::path& file) {
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> lines = split_lines(ss.str());
  GoldenCase c;
  size_t i = 0;
  while (i < lines.size() && rtrim(lines[i]).empty()) ++i;
  const std::string run = "// RUN:";
  if (i == lines.size() || lines[i].rfind(run, 0) != 0) throw std::runtime_error("first line must be '// RUN: <pass>'");
  std::stringstream names(lines[i].substr(run.size()));
  for (std::string p; std::getline(names, p, ',');) {
    p.erase(0, p.find_first_not_of(" \t"));
    p = rtrim(p);
    if (!p.empty()) c.passes.push_back(p);
  }
  for (size_t k = 0; k <= i; ++k) c.header_and_input += lines[k] + "\n";
  c.input = std::string(i + 1, '\n');
  size_t k = i + 1;
  for (; k < lines.size() && rtrim(lines[k]) != "// EXPECT:"; ++k) {
    c.input += lines[k] + "\n";
    c.header_and_input += lines[k] + "\n";
  }
  if (k == lines.size()) throw std::runtime_error("missing '// EXPECT:' line");
  c.header_and_input += lines[k] + "\n";
  for (++k; k < lines.size(); ++k) {
    std::string l = rtrim(lines[k]);
    if (l.rfind("//", 0) == 0) continue;
    c.expected += l + "\n";
  }
  while (c.expected.size() > 1 && c.expected[c.expected.size() - 1] == '\n' && c.expected[c.expected.size() - 2] == '\n')
    c.expected.pop_back();
  c.expected.erase(0, c.expected.find_first_not_of('\n'));
  return c;
}

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  if (!fs::exists(kGoldenDir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(kGoldenDir))
    if (e.is_regular_file() && e.path().extension() == ".ir") files.push_back(fs::relative(e.path(), kGoldenDir).string());
  std::sort(files.begin(), files.end());
  return files;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, PassOutputMatches) {
  const fs::path file = kGoldenDir / GetParam();
  SCOPED_TRACE(file.string());
  GoldenCase c = read_case(file);
  std::unique_ptr<Graph> g = parse_graph(c.input);
  ASSERT_EQ(verify_graph_message(*g), "") << "the input graph is invalid";
  const PrintOptions full{-1};
  const std::string before = print_graph(*g, full);

  if (c.passes == std::vector<std::string>{"loops"}) {
    // Loop-IR goldens: per group of the plan, its emitter, member placements and printed nest
    // after the default schedule (one thread, so the nests do not depend on the machine).
    loop::Schedule sched;
    sched.threads = 1;
    std::string text;
    for (const FusionGroup& grp : partition(*g).groups) {
      loop::LoweredGroup lg = loop::lower_group(grp, grp.name, sched);
      ASSERT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
      loop::apply_default_schedule(*lg.kernel, sched);
      text += "emitter " + lg.emitter + "\n" + loop::print_kernel(*lg.kernel);
    }
    if (std::getenv("KILN_UPDATE_GOLDEN")) {
      std::ofstream(file) << c.header_and_input << text;
      return;
    }
    // As read_case reads the expectation: lines that start with "//" do not count (a nest's
    // comments are indented, so they do).
    std::string nests;
    for (const std::string& l : split_lines(text))
      if (rtrim(l).rfind("//", 0) != 0) nests += rtrim(l) + "\n";
    EXPECT_EQ(nests, c.expected) << "golden mismatch (- expected, + actual); KILN_UPDATE_GOLDEN=1 rewrites it:\n"
                                 << line_diff(split_lines(c.expected), split_lines(nests));
    return;
  }
  if (c.passes == std::vector<std::string>{"partition"}) {
    // Partitioner goldens: the expected text is the plan's structure (groups, refusals).
    const std::string plan = plan_structure(partition(*g));
    if (std::getenv("KILN_UPDATE_GOLDEN")) {
      std::ofstream(file) << c.header_and_input << plan;
      return;
    }
    EXPECT_EQ(plan, c.expected) << "golden mismatch (- expected, + actual); KILN_UPDATE_GOLDEN=1 rewrites it:\n"
                                << line_diff(split_lines(c.expected), split_lines(plan));
    return;
  }
  bool changed = false;
  for (const std::string& name : c.passes) {
    if (name == "pipeline") {
      run_pipeline(*g);  // verifies after each pass itself
      changed |= print_graph(*g, full) != before;
      continue;
    }
    changed |= create_pass(name)->run(*g);
    ASSERT_EQ(verify_graph_message(*g), "") << "after pass " << name;
  }
  const std::string actual = print_graph(*g, full);

  if (std::getenv("KILN_UPDATE_GOLDEN")) {
    std::ofstream(file) << c.header_and_input << (changed || actual != before ? actual : "UNCHANGED\n");
    return;
  }
  if (c.expected == "UNCHANGED\n") {
    EXPECT_FALSE(changed) << "the pass reported a change but the test expects none";
    EXPECT_EQ(actual, before) << line_diff(split_lines(before), split_lines(actual));
    return;
  }
  EXPECT_TRUE(changed) << "the pass reported no change";
  EXPECT_EQ(actual, c.expected) << "golden mismatch (- expected, + actual); KILN_UPDATE_GOLDEN=1 rewrites it:\n"
                                << line_diff(split_lines(c.expected), split_lines(actual));
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param.substr(0, info.param.size() - 3);  // drop ".ir"
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Files, Golden, ::testing::ValuesIn(golden_files()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

// The harness itself: every pass has golden files, including a negative (UNCHANGED) one.
TEST(GoldenHarness, EveryPassHasCasesIncludingANegativeOne) {
  std::vector<std::string> files = golden_files();
  std::vector<std::string> passes = pass_names();
  for (const std::string& p : lowering_pass_names()) passes.push_back(p);
  for (const std::string& pass : passes) {
    int cases = 0, unchanged = 0;
    for (const std::string& f : files) {
      if (f.rfind(pass + "/", 0) != 0) continue;
      ++cases;
      unchanged += read_case(kGoldenDir / f).expected == "UNCHANGED\n";
    }
    EXPECT_GE(cases, 3) << pass;
    EXPECT_GE(unchanged, 1) << pass;
  }
}

TEST(GoldenHarness, LineDiffMarksChanges) {
  EXPECT_EQ(line_diff({"a", "b", "c"}, {"a", "x", "c", "d"}), "  a\n- b\n+ x\n  c\n+ d\n");
}

}  // namespace
}  // namespace kiln
