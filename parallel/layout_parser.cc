#include "parallel/layout_parser.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"

namespace glm {
namespace {

// Recursive descent over
//   sequence := item*
//   item     := atom ('*' count)?
//   atom     := 'E' | 't' | 'm' | 'L' | '|' | '(' sequence ')'
// producing the expanded symbol string ('|' kept as the stage separator).
class LayoutParser {
 public:
  explicit LayoutParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::string> Parse() {
    if (text_.size() > kMaxLayoutBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout: ", text_.size(), " bytes, longer than the ",
                       kMaxLayoutBytes, " a layout may have: ", Quote(text_)));
    }
    absl::StatusOr<std::string> expanded = ParseSequence();
    if (!expanded.ok()) return expanded;
    SkipCosmetic();
    if (pos_ < text_.size()) return Error("unmatched ')'");
    return expanded;
  }

 private:
  static bool IsSymbol(char c) {
    return c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|';
  }

  void SkipCosmetic() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ',' ||
            std::isspace(static_cast<unsigned char>(text_[pos_])))) {
      ++pos_;
    }
  }

  absl::Status Error(absl::string_view what) const {
    std::string found = pos_ < text_.size() ? Quote(text_.substr(pos_, 1))
                                            : std::string("end of string");
    return absl::InvalidArgumentError(
        absl::StrCat("layout: ", what, " at position ", pos_ + 1, " (found ",
                     found, ") in ", Quote(text_)));
  }

  absl::StatusOr<std::string> ParseSequence() {
    std::string out;
    while (true) {
      SkipCosmetic();
      if (pos_ >= text_.size() || text_[pos_] == ')') return out;
      absl::StatusOr<std::string> item = ParseItem();
      if (!item.ok()) return item;
      if (out.size() + item->size() > kMaxExpandedLayoutSymbols) {
        return TooLong();
      }
      absl::StrAppend(&out, *item);
    }
  }

  absl::StatusOr<std::string> ParseItem() {
    absl::StatusOr<std::string> atom = ParseAtom();
    if (!atom.ok()) return atom;
    SkipCosmetic();
    if (pos_ >= text_.size() || text_[pos_] != '*') return atom;
    ++pos_;
    SkipCosmetic();
    absl::StatusOr<int> count = ParseCount();
    if (!count.ok()) return count.status();
    if (static_cast<int64_t>(atom->size()) * *count >
        kMaxExpandedLayoutSymbols) {
      return TooLong();
    }
    work_ += static_cast<int64_t>(atom->size()) * *count;
    if (work_ > kMaxLayoutWork) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout: repeats expand to more than ", kMaxLayoutWork,
          " symbols in all, counting groups repeated zero times (near "
          "position ",
          pos_ + 1, ")"));
    }
    std::string repeated;
    repeated.reserve(atom->size() * *count);
    for (int i = 0; i < *count; ++i) absl::StrAppend(&repeated, *atom);
    return repeated;
  }

  absl::StatusOr<std::string> ParseAtom() {
    const char c = text_[pos_];
    if (IsSymbol(c)) {
      ++pos_;
      return std::string(1, c);
    }
    if (c != '(') {
      return Error("expected one of E t m L | ( , (layer symbol or group)");
    }
    if (depth_ == kMaxLayoutNesting) {
      return Error(
          absl::StrCat("groups nest more than ", kMaxLayoutNesting, " deep"));
    }
    const size_t open = pos_++;
    ++depth_;
    absl::StatusOr<std::string> inner = ParseSequence();
    --depth_;
    if (!inner.ok()) return inner;
    if (pos_ >= text_.size()) {
      pos_ = open;
      return Error("unclosed '('");
    }
    ++pos_;  // ')'
    return inner;
  }

  absl::StatusOr<int> ParseCount() {
    const size_t start = pos_;
    int64_t count = 0;
    while (pos_ < text_.size() &&
           std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      count = count * 10 + (text_[pos_] - '0');
      if (count > kMaxExpandedLayoutSymbols) return TooLong();
      ++pos_;
    }
    if (pos_ == start) return Error("expected a repeat count after '*'");
    return static_cast<int>(count);
  }

  absl::Status TooLong() const {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: expands to more than ", kMaxExpandedLayoutSymbols,
                     " symbols (near position ", pos_ + 1, ")"));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open at pos_
  int64_t work_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseLayout(absl::string_view layout) {
  absl::StatusOr<std::string> expanded = LayoutParser(layout).Parse();
  if (!expanded.ok()) return expanded.status();
  return std::vector<std::string>(absl::StrSplit(*expanded, '|'));
}

std::string FormatLayout(const std::vector<std::string>& stages) {
  return absl::StrJoin(stages, "|");
}

}  // namespace glm
