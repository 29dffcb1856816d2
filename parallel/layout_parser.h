// Megatron's pipeline layout strings (--pipeline-model-parallel-layout).
//
// Symbols: `E` embedding, `t` decoder layer, `m` MTP layer, `L` loss, `|` ends
// a stage. Commas and whitespace are cosmetic. `x*n` repeats one symbol
// (including `|`) and `(...)*n` repeats a group. Groups nest here, which
// Megatron's regex expansion does not allow; otherwise a string expands to the
// stages Megatron gives it, except that a comma inside a repeat count ("t*1,2")
// is an error here rather than silently joined.
// Example: "Et*3|(tt|)*2,mL" -> {"Ettt", "tt", "tt", "mL"}.
#ifndef GLM_PARALLEL_LAYOUT_PARSER_H_
#define GLM_PARALLEL_LAYOUT_PARSER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace glm {

// Layouts longer than this after expansion are refused: no model has that many
// layers, and a typo such as "t*99999999" must not exhaust memory.
inline constexpr int kMaxExpandedLayoutSymbols = 1 << 20;
// Bounds on the written string, so that parsing one takes little time and
// stack whatever it holds: a layout written out symbol by symbol for a
// thousand layers fits, and groups nest far deeper than any layout needs.
inline constexpr int kMaxLayoutBytes = 8192;
inline constexpr int kMaxLayoutNesting = 32;
// Symbols the parser may produce in all, counting groups repeated zero times
// ("(t*1000000)*0" expands before its count is read).
inline constexpr int64_t kMaxLayoutWork = int64_t{16} << 20;

// Expands `layout` into one symbol string per stage, in stage order. Syntax
// errors are InvalidArgument naming the offending character and its 1-based
// position.
absl::StatusOr<std::vector<std::string>> ParseLayout(absl::string_view layout);

// The layout string of `stages` with every symbol written out ("Ettt|tt|mL").
std::string FormatLayout(const std::vector<std::string>& stages);

}  // namespace glm

#endif  // GLM_PARALLEL_LAYOUT_PARSER_H_
