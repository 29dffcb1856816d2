#include "parallel/pipeline_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "parallel/layer_split.h"
#include "parallel/layout_parser.h"

namespace glm {
namespace {

absl::Status RuleError(absl::string_view rule, absl::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("layout rule '", rule, "' violated: ", detail));
}

int CountSymbol(const std::vector<std::string>& stages, char symbol) {
  int count = 0;
  for (const std::string& stage : stages) {
    count += std::count(stage.begin(), stage.end(), symbol);
  }
  return count;
}

absl::Status CheckStageCount(const std::vector<std::string>& stages,
                             const LayoutRequest& request) {
  const int n = stages.size();
  if (n % request.pp != 0) {
    return RuleError(
        "stage count divisible by pp",
        absl::StrCat("the layout has ", n, " stages, not a multiple of pp ",
                     request.pp));
  }
  if (request.vpp > 1 && n / request.pp != request.vpp) {
    return RuleError(
        "vpp = stages / pp",
        absl::StrCat("the layout has ", n, " stages = ", n / request.pp,
                     " virtual stages per pp rank at pp ", request.pp,
                     ", but vpp ", request.vpp, " was requested"));
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddingAndLoss(const std::vector<std::string>& stages) {
  if (const int e = CountSymbol(stages, 'E'); e != 1) {
    return RuleError("exactly one E",
                     absl::StrCat("the layout has ", e, " 'E'"));
  }
  if (stages.front().empty() || stages.front().front() != 'E') {
    return RuleError("E first",
                     "the embedding 'E' must be the first symbol of stage 0");
  }
  if (const int l = CountSymbol(stages, 'L'); l != 1) {
    return RuleError("exactly one L",
                     absl::StrCat("the layout has ", l, " 'L'"));
  }
  if (stages.back().empty() || stages.back().back() != 'L') {
    return RuleError(
        "L last", absl::StrCat("the loss 'L' must be the last symbol of stage ",
                               stages.size() - 1, " (the last stage)"));
  }
  return absl::OkStatus();
}

absl::Status CheckLayerCounts(const std::vector<std::string>& stages,
                              const LayoutRequest& request) {
  if (const int t = CountSymbol(stages, 't'); t != request.num_layers) {
    return RuleError(
        "decoder layer count",
        absl::StrCat("the layout has ", t, " 't' but num_layers is ",
                     request.num_layers));
  }
  if (const int m = CountSymbol(stages, 'm'); m != request.mtp_layers) {
    return RuleError("MTP layer count", absl::StrCat("the layout has ", m,
                                                     " 'm' but mtp_layers is ",
                                                     request.mtp_layers));
  }
  return absl::OkStatus();
}

absl::Status CheckMtpPlacement(const std::vector<std::string>& stages, int pp) {
  const int num_stages = stages.size();
  bool seen_mtp = false;
  for (int i = 0; i < num_stages; ++i) {
    const std::string& stage = stages[i];
    const size_t mtp = stage.find('m');
    if (seen_mtp && mtp != std::string::npos) {
      return RuleError("MTP in one stage",
                       absl::StrCat("MTP layers are spread over more than one "
                                    "stage; ",
                                    StageName(i, pp), " holds more"));
    }
    if (mtp == std::string::npos) {
      if (seen_mtp && stage.find('t') != std::string::npos) {
        return RuleError("no t after m", absl::StrCat(StageName(i, pp),
                                                      " has a decoder layer "
                                                      "after the MTP layers"));
      }
      continue;
    }
    seen_mtp = true;
    if (stage.find('t', mtp) != std::string::npos) {
      return RuleError("no t after m",
                       absl::StrCat(StageName(i, pp),
                                    " has a decoder layer after an MTP layer"));
    }
    if (i / pp != num_stages / pp - 1) {
      return RuleError(
          "MTP in last virtual chunk",
          absl::StrCat("MTP layers are in ", StageName(i, pp),
                       ", but they must be in the last virtual chunk (",
                       num_stages / pp - 1, ") of their pp rank"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string StageName(int stage, int pp) {
  return absl::StrCat("stage ", stage, " (pp rank ", stage % pp,
                      ", virtual chunk ", stage / pp, ")");
}

absl::Status ValidateRequest(const LayoutRequest& request) {
  if (request.num_layers < 0 || request.mtp_layers < 0) {
    return absl::InvalidArgumentError(
        "num_layers and mtp_layers must be non-negative");
  }
  if (request.pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp must be at least 1, got ", request.pp));
  }
  if (request.vpp < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vpp must be 0 or more, got ", request.vpp));
  }
  if (int64_t{request.num_layers} + request.mtp_layers > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers + mtp_layers must be at most ", kMaxLayers));
  }
  if (int64_t{request.pp} * std::max(request.vpp, 1) > kMaxStages) {
    return absl::InvalidArgumentError(
        absl::StrCat("pp * vpp must be at most ", kMaxStages));
  }
  if (request.num_layers_in_first_stage < 0 ||
      request.num_layers_in_last_stage < 0) {
    return absl::InvalidArgumentError(
        "num_layers_in_first_stage and num_layers_in_last_stage must be "
        "non-negative");
  }
  if (!request.layout.empty() && (request.num_layers_in_first_stage > 0 ||
                                  request.num_layers_in_last_stage > 0)) {
    return absl::InvalidArgumentError(
        "give either a layout or num_layers_in_first/last_stage, not both");
  }
  const IndexSharing& sharing = request.sharing;
  if (sharing.topk_freq < 1 || sharing.skip_topk_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "index sharing needs index_topk_freq >= 1 and index_skip_topk_offset "
        ">= 0, got ",
        sharing.topk_freq, " and ", sharing.skip_topk_offset));
  }
  if (request.num_layers > 0 && !sharing.IsComputingLayer(1)) {
    // Layer 1 would reuse the top-k of a layer that does not exist.
    return absl::InvalidArgumentError(absl::StrCat(
        "index sharing: layer 1 is a skip layer under index_topk_freq ",
        sharing.topk_freq, " and index_skip_topk_offset ",
        sharing.skip_topk_offset,
        "; with index_topk_freq > 1 the offset must be at least 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RequestedStages(
    const LayoutRequest& request) {
  if (absl::Status valid = ValidateRequest(request); !valid.ok()) return valid;
  if (request.layout.empty()) return SplitLayers(request);
  return ParseLayout(request.layout);
}

absl::Status ValidateStageRules(const std::vector<std::string>& stages,
                                const LayoutRequest& request) {
  if (absl::Status s = CheckStageCount(stages, request); !s.ok()) return s;
  if (absl::Status s = CheckEmbeddingAndLoss(stages); !s.ok()) return s;
  if (absl::Status s = CheckLayerCounts(stages, request); !s.ok()) return s;
  return CheckMtpPlacement(stages, request.pp);
}

std::vector<StageSlice> DescribeStages(const std::vector<std::string>& stages,
                                       int pp, const IndexSharing& sharing) {
  std::vector<StageSlice> slices;
  int layers_before = 0;
  for (int i = 0; i < static_cast<int>(stages.size()); ++i) {
    const std::string& symbols = stages[i];
    StageSlice slice;
    slice.stage = i;
    slice.pp_rank = i % pp;
    slice.virtual_chunk = i / pp;
    const int layers = std::count(symbols.begin(), symbols.end(), 't');
    if (layers > 0) {
      slice.first_layer = layers_before + 1;
      slice.last_layer = layers_before + layers;
      for (int n = slice.first_layer; n <= slice.last_layer; ++n) {
        if (sharing.IsComputingLayer(n)) slice.computing_layers.push_back(n);
      }
    }
    layers_before += layers;
    slice.has_embedding = symbols.find('E') != std::string::npos;
    slice.has_loss = symbols.find('L') != std::string::npos;
    slice.mtp_layers = std::count(symbols.begin(), symbols.end(), 'm');
    slices.push_back(std::move(slice));
  }
  return slices;
}

absl::Status CheckIndexSharing(const std::vector<StageSlice>& slices, int pp,
                               const IndexSharing& sharing) {
  std::vector<std::string> bad;
  for (const StageSlice& slice : slices) {
    if (slice.first_layer == 0 || sharing.IsComputingLayer(slice.first_layer)) {
      continue;
    }
    bad.push_back(absl::StrCat(
        StageName(slice.stage, pp), " starts at layer ", slice.first_layer,
        ", a skip layer whose source computing layer ",
        sharing.SourceLayer(slice.first_layer), " is on an earlier stage"));
  }
  if (bad.empty()) return absl::OkStatus();
  return RuleError(
      "stages start on computing layers",
      absl::StrCat(absl::StrJoin(bad, "; "),
                   ". Every stage holding decoder layers must begin on a "
                   "computing layer (index_topk_freq=",
                   sharing.topk_freq,
                   ", index_skip_topk_offset=", sharing.skip_topk_offset, ")"));
}

absl::StatusOr<std::vector<StageSlice>> PlanStages(
    const LayoutRequest& request) {
  absl::StatusOr<std::vector<std::string>> stages = RequestedStages(request);
  if (!stages.ok()) return stages.status();
  if (absl::Status s = ValidateStageRules(*stages, request); !s.ok()) return s;
  std::vector<StageSlice> slices =
      DescribeStages(*stages, request.pp, request.sharing);
  if (absl::Status s = CheckIndexSharing(slices, request.pp, request.sharing);
      !s.ok()) {
    return s;
  }
  return slices;
}

}  // namespace glm
