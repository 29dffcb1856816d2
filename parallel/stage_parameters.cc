#include "parallel/stage_parameters.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// Name prefixes of what `stage` reads.
std::vector<std::string> StagePrefixes(const ModelConfig& config,
                                       const StageSlice& stage) {
  std::vector<std::string> prefixes;
  const bool mtp = stage.mtp_layers > 0;
  if (stage.has_embedding || mtp) prefixes.push_back("model.embed_tokens.");
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    prefixes.push_back(absl::StrCat("model.layers.", layer - 1, "."));
  }
  if (stage.has_loss) {
    prefixes.push_back("model.norm.");
    // The output head: lm_head, or the embedding table when tied.
    prefixes.push_back(config.tie_word_embeddings ? "model.embed_tokens."
                                                  : "lm_head.");
  }
  for (int k = 0; k < stage.mtp_layers; ++k) {
    prefixes.push_back(
        absl::StrCat("model.layers.", config.num_hidden_layers + k, "."));
  }
  return prefixes;
}

}  // namespace

std::set<std::string> StageTensorNames(ModelParameters& params,
                                       const std::vector<StageSlice>& stages) {
  std::vector<std::string> prefixes;
  for (const StageSlice& stage : stages) {
    for (std::string& prefix : StagePrefixes(params.config(), stage)) {
      prefixes.push_back(std::move(prefix));
    }
  }
  std::set<std::string> names;
  for (const NamedTensor& tensor : params.Named()) {
    for (const std::string& prefix : prefixes) {
      if (absl::StartsWith(tensor.name, prefix)) {
        names.insert(tensor.name);
        break;
      }
    }
  }
  return names;
}

PipelineTensors PipelineTensorsOf(ModelParameters& params,
                                  const std::vector<StageSlice>& plan,
                                  int pp_rank) {
  std::map<int, std::vector<StageSlice>> by_rank;
  for (const StageSlice& stage : plan) by_rank[stage.pp_rank].push_back(stage);
  // For each tensor, the pp ranks reading it, lowest first.
  std::map<std::string, std::vector<int>> readers;
  for (const auto& [rank, stages] : by_rank) {
    for (const std::string& name : StageTensorNames(params, stages)) {
      readers[name].push_back(rank);
    }
  }
  PipelineTensors tensors;
  for (const NamedTensor& tensor : params.Named()) {
    const auto found = readers.find(tensor.name);
    if (found == readers.end()) continue;
    const std::vector<int>& ranks = found->second;
    if (ranks.size() > 1) {
      tensors.shared.push_back(tensor.name);
      tensors.readers[tensor.name] = ranks;
    }
    if (std::find(ranks.begin(), ranks.end(), pp_rank) == ranks.end()) {
      continue;
    }
    tensors.used.insert(tensor.name);
    if (ranks.front() == pp_rank) tensors.owned.insert(tensor.name);
  }
  return tensors;
}

}  // namespace glm
