#include "bench/selected_keys.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "base/command_flags.h"

namespace glm {

std::optional<SelectedKeysBenchFlags> ParseSelectedKeysBenchFlags(
    int argc, char** argv, const std::string& usage, int* exit_code) {
  CommandFlags flags(usage);
  flags.Add("device", "the GPU", "cuda:0");
  flags.Add("queries", "queries per call (the last of each sequence)", "4096");
  flags.Add("seqs", "sequence lengths, comma-separated",
            "4096,16384,32768,65536");
  flags.Add("iterations", "timed calls of each op", "5");
  SelectedKeysBenchFlags parsed;
  absl::Status status =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (status.ok()) status = flags.GetInt("queries", &parsed.queries);
  if (status.ok()) status = flags.GetInt("iterations", &parsed.iterations);
  if (status.ok() && (parsed.queries < 1 || parsed.iterations < 1))
    status = absl::InvalidArgumentError("--queries and --iterations: >= 1");
  for (absl::string_view s : absl::StrSplit(flags.Get("seqs"), ',')) {
    int64_t seq = 0;
    if (status.ok() && (!absl::SimpleAtoi(s, &seq) || seq < parsed.queries)) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "--seqs: '", s, "' is not a length of at least ", parsed.queries));
    }
    parsed.seqs.push_back(seq);
  }
  if (!status.ok() || flags.HelpRequested()) {
    if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
    std::fprintf(stderr, "%s", flags.Help().c_str());
    *exit_code = status.ok() ? kExitOk : kExitUsage;
    return std::nullopt;
  }
  parsed.device = flags.Get("device");
  return parsed;
}

void PrintTimeHeader(const char* keys_label) {
  std::printf("%-8s %7s  %-8s %9s %10s %9s %9s\n", "pass", "seq", "keys",
              "ms/call", "us/query", keys_label, "TFLOP/s");
}

void PrintTimeRow(const char* pass, int64_t seq, const char* selection,
                  int64_t queries, double ms, double bytes, double flops) {
  std::printf("%-8s %7lld  %-8s %9.2f %10.2f %9.0f %9.1f\n", pass,
              static_cast<long long>(seq), selection, ms, ms * 1e3 / queries,
              bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12);
}

std::vector<float> NormalValues(int64_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

Tensor TensorOf(Backend& be, int64_t rows, int64_t cols, ElementType type,
                const std::vector<float>& values) {
  Tensor t({rows, cols}, be.allocator(), type);
  if (type == ElementType::kBF16) {
    std::vector<uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(),
                   Float32ToBfloat16);
    be.allocator()->CopyFromHost(t.Matrix().data, bits.data(),
                                 bits.size() * sizeof(uint16_t));
  } else {
    be.allocator()->CopyFromHost(t.Matrix().data, values.data(),
                                 values.size() * sizeof(float));
  }
  return t;
}

Tensor RandomTensor(Backend& be, int64_t rows, int64_t cols, ElementType type,
                    std::mt19937& rng, float scale) {
  return TensorOf(be, rows, cols, type, NormalValues(rows * cols, rng, scale));
}

std::vector<int32_t> Selection(int64_t seq, int64_t queries, int64_t topk,
                               bool nearest, std::mt19937& rng) {
  std::vector<int32_t> keys(queries * topk);
  std::unordered_set<int32_t> chosen;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t t = seq - queries + i, visible = t + 1;
    int32_t* row = keys.data() + i * topk;
    if (nearest || visible <= topk) {
      for (int64_t j = 0; j < topk; ++j)
        row[j] = j < visible ? static_cast<int32_t>(t - j) : -1;
      continue;
    }
    chosen.clear();
    for (int64_t j = visible - topk; j < visible; ++j) {
      const int32_t pick = std::uniform_int_distribution<int32_t>(
          0, static_cast<int32_t>(j))(rng);
      chosen.insert(chosen.count(pick) ? static_cast<int32_t>(j) : pick);
    }
    std::copy(chosen.begin(), chosen.end(), row);
  }
  return keys;
}

IndexTensor IndicesOn(Backend& be, const std::vector<int32_t>& keys) {
  IndexTensor on({static_cast<int64_t>(keys.size())}, 0, be.allocator());
  be.allocator()->CopyFromHost(on.data(), keys.data(),
                               keys.size() * sizeof(int32_t));
  return on;
}

}  // namespace glm
