#include "kernels/cuda/activity_window.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace glm::cuda {
namespace {

using Span = std::pair<uint64_t, uint64_t>;  // [first, second)

// The length of the union of `spans` (sorted here).
uint64_t UnionLength(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end());
  uint64_t length = 0;
  uint64_t covered_to = 0;  // the union so far ends here
  for (const auto& [lo, hi] : spans) {
    const uint64_t from = std::max(lo, covered_to);
    if (hi > from) {
      length += hi - from;
      covered_to = hi;
    }
  }
  return length;
}

size_t GapClass(uint64_t length) {
  size_t index = 0;
  while (index < kGapClassBounds.size() && length >= kGapClassBounds[index]) {
    ++index;
  }
  return index;
}

double Ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// The op whose span holds `at` (spans sorted by start), kOutsideOps if none.
std::string_view OpAt(const std::vector<OpSpan>& spans, uint64_t at) {
  auto after = std::upper_bound(
      spans.begin(), spans.end(), at,
      [](uint64_t t, const OpSpan& span) { return t < span.start; });
  if (after == spans.begin()) return kOutsideOps;
  const OpSpan& span = *(after - 1);
  return at < span.end ? span.op : kOutsideOps;
}

// A kernel's name up to its parameters, at most 90 characters.
std::string_view ShortName(std::string_view name) {
  return name.substr(0, std::min<size_t>(name.find('('), 90));
}

}  // namespace

double ActivityWindow::busy_share() const {
  return window == 0 ? 0.0
                     : static_cast<double>(busy) / static_cast<double>(window);
}

double ActivityWindow::idle_share() const {
  return window == 0 ? 0.0
                     : static_cast<double>(idle) / static_cast<double>(window);
}

ActivityWindow SummarizeWindow(std::vector<ActivityInterval> intervals,
                               uint64_t start, uint64_t end, int largest,
                               std::vector<OpSpan> ops) {
  ActivityWindow summary;
  summary.window = end > start ? end - start : 0;
  std::vector<Span> inside, after;
  std::map<std::string_view, KernelTime> by_name;
  std::sort(ops.begin(), ops.end(),
            [](const OpSpan& a, const OpSpan& b) { return a.start < b.start; });
  std::map<std::pair<std::string_view, std::string_view>, OpKernelTime> by_op;
  for (const ActivityInterval& work : intervals) {
    if (work.start == 0 || work.end < work.start) {
      ++summary.untimed;
      continue;
    }
    const bool counted = work.end == work.start
                             ? work.start >= start && work.start < end
                             : work.start < end && work.end > start;
    if (counted) {
      switch (work.kind) {
        case ActivityKind::kKernel:
          ++summary.kernels;
          break;
        case ActivityKind::kCopy:
          ++summary.copies;
          break;
        case ActivityKind::kMemset:
          ++summary.memsets;
          break;
      }
    }
    const uint64_t lo = std::max(work.start, start);
    const uint64_t hi = std::min(work.end, end);
    if (lo < hi) inside.emplace_back(lo, hi);
    if (counted && work.kind == ActivityKind::kKernel && !work.name.empty()) {
      KernelTime& time = by_name[work.name];
      time.name = work.name;
      ++time.calls;
      time.total += lo < hi ? hi - lo : 0;
      if (!ops.empty()) {
        const std::string_view op = OpAt(ops, work.start);
        OpKernelTime& row = by_op[{op, work.name}];
        row.op = op;
        row.kernel = work.name;
        ++row.calls;
        row.total += lo < hi ? hi - lo : 0;
      }
    }
    if (work.end > end) after.emplace_back(std::max(work.start, end), work.end);
  }
  summary.busy_after_end = UnionLength(std::move(after));

  // One pass over the clipped intervals by start: the union grows, and every
  // stretch it has not reached when the next one starts is a gap.
  std::sort(inside.begin(), inside.end());
  std::vector<IdleGap> gaps;
  auto add_gap = [&](uint64_t from, uint64_t to) {
    gaps.push_back(IdleGap{from - start, to - from});
    summary.idle_by_gap_length[GapClass(to - from)] += to - from;
  };
  uint64_t covered_to = start;
  for (const auto& [lo, hi] : inside) {
    if (lo > covered_to) add_gap(covered_to, lo);
    const uint64_t from = std::max(lo, covered_to);
    if (hi > from) {
      summary.busy += hi - from;
      covered_to = hi;
    }
  }
  if (covered_to < end) add_gap(covered_to, end);
  summary.idle = summary.window - summary.busy;
  summary.gaps = static_cast<int64_t>(gaps.size());

  const size_t kept =
      std::min(gaps.size(), static_cast<size_t>(std::max(largest, 0)));
  std::partial_sort(gaps.begin(), gaps.begin() + kept, gaps.end(),
                    [](const IdleGap& a, const IdleGap& b) {
                      return a.length != b.length ? a.length > b.length
                                                  : a.offset < b.offset;
                    });
  summary.largest_gaps.assign(gaps.begin(), gaps.begin() + kept);
  for (const auto& [name, time] : by_name) {
    summary.kernel_times.push_back(time);
  }
  // Stable: equal totals stay in name order.
  std::stable_sort(summary.kernel_times.begin(), summary.kernel_times.end(),
                   [](const KernelTime& a, const KernelTime& b) {
                     return a.total > b.total;
                   });
  for (const auto& [key, row] : by_op) summary.kernels_by_op.push_back(row);
  // Stable: equal totals stay in (op, kernel) order.
  std::stable_sort(summary.kernels_by_op.begin(), summary.kernels_by_op.end(),
                   [](const OpKernelTime& a, const OpKernelTime& b) {
                     return a.total > b.total;
                   });
  return summary;
}

namespace {

// The `top` longest of `rows` (longest first) as a markdown table: the label
// columns `labels` writes for a row (each cell "| x "), calls, total ms, us
// per call, share of the window's busy time; then a line for the rest, whose
// label cells are "| N other <what> " and `padding`.
template <typename Row, typename Labels>
std::string TimeTable(const ActivityWindow& window,
                      const std::vector<Row>& rows, int top,
                      std::string_view header, std::string_view what,
                      std::string_view padding, Labels labels) {
  const double busy = static_cast<double>(window.busy);
  auto share = [&](uint64_t ns) {
    return busy > 0 ? 100.0 * static_cast<double>(ns) / busy : 0.0;
  };
  std::string table(header);
  uint64_t rest = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    if (static_cast<int>(i) >= top) {
      rest += row.total;
      rest_calls += row.calls;
      continue;
    }
    absl::StrAppend(
        &table, labels(row),
        absl::StrFormat("| %d | %.2f | %.1f | %.1f%% |\n", row.calls,
                        Ms(row.total), 1e3 * Ms(row.total) / row.calls,
                        share(row.total)));
  }
  if (rest_calls > 0) {
    absl::StrAppend(
        &table, absl::StrFormat("| %d other %s %s| %d | %.2f | | %.1f%% |\n",
                                rows.size() - top, what, padding, rest_calls,
                                Ms(rest), share(rest)));
  }
  return table;
}

}  // namespace

std::string FormatKernelTimes(const ActivityWindow& window, int top) {
  return TimeTable(window, window.kernel_times, top,
                   "| kernel | calls | total ms | us per call | share of busy "
                   "|\n| --- | ---: | ---: | ---: | ---: |\n",
                   "kernels", "", [](const KernelTime& time) {
                     return absl::StrFormat("| %s ", ShortName(time.name));
                   });
}

std::string FormatKernelsByOp(const ActivityWindow& window, int top) {
  return TimeTable(
      window, window.kernels_by_op, top,
      "| op group | kernel | calls | total ms | us per call | "
      "share of busy |\n| --- | --- | ---: | ---: | ---: | ---: |\n",
      "rows", "| ", [](const OpKernelTime& row) {
        return absl::StrFormat("| %s | %s ", row.op, ShortName(row.kernel));
      });
}

std::string FormatActivityWindow(const ActivityWindow& window) {
  std::vector<std::string> largest;
  for (const IdleGap& gap : window.largest_gaps) {
    largest.push_back(
        absl::StrFormat("%.3f at %.3f", Ms(gap.length), Ms(gap.offset)));
  }
  std::vector<std::string> by_length;
  for (uint64_t idle : window.idle_by_gap_length) {
    by_length.push_back(absl::StrFormat("%.3f", Ms(idle)));
  }
  return absl::StrCat(
      absl::StrFormat("window (ms): %.1f | busy: %.2f%% | idle (ms): %.3f | "
                      "launch-gap share: %.2f%% in %d gaps | ",
                      Ms(window.window), 100 * window.busy_share(),
                      Ms(window.idle), 100 * window.idle_share(), window.gaps),
      "largest gaps (ms at ms): ",
      largest.empty() ? "-" : absl::StrJoin(largest, ", "),
      " | idle by gap <10us/<100us/<1ms/>=1ms (ms): ",
      absl::StrJoin(by_length, "/"),
      absl::StrFormat(" | kernels: %d | copies: %d | memsets: %d | busy after "
                      "end (ms): %.3f | untimed: %d | dropped: %d",
                      window.kernels, window.copies, window.memsets,
                      Ms(window.busy_after_end), window.untimed,
                      window.dropped));
}

}  // namespace glm::cuda
