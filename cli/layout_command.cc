#include "cli/layout_command.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/command_flags.h"
#include "nlohmann/json.hpp"
#include "parallel/layout_parser.h"
#include "parallel/layout_planner.h"
#include "parallel/pipeline_layout.h"
#include "parallel/rank_grid.h"

namespace glm {
namespace {

using nlohmann::json;

// Parses `args` into `flags`. Returns the exit code to stop with (help printed
// or bad usage reported), or -1 to go on.
int ParseOrExit(const std::string& command,
                const std::vector<std::string>& args,
                const std::vector<std::string>& required, CommandFlags* flags,
                std::ostream& out, std::ostream& err) {
  flags->Add("output", "table (for people) or json (for scripts)", "table");
  absl::Status status = flags->Parse(args);
  if (flags->HelpRequested()) {
    out << flags->Help();
    return kExitOk;
  }
  for (const std::string& name : required) {
    if (status.ok()) status = flags->Require(name);
  }
  if (status.ok() && !flags->positional().empty()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags->positional()[0], "'"));
  }
  const std::string output = flags->Get("output");
  if (status.ok() && output != "table" && output != "json") {
    status = absl::InvalidArgumentError(
        absl::StrCat("--output must be table or json, got '", output, "'"));
  }
  if (status.ok()) return -1;
  err << "glmctl " << command << ": " << status.message() << "\n"
      << flags->Help();
  return kExitUsage;
}

bool WantsJson(const CommandFlags& flags) {
  return flags.Get("output") == "json";
}

void AddSizeFlags(CommandFlags* flags) {
  flags->Add("num-layers", "decoder layers of the model");
  flags->Add("mtp-layers", "MTP layers", "0");
  flags->Add("pp", "pipeline-parallel size");
  flags->Add("vpp",
             "virtual stages per pp rank (0 or 1: none; with --layout, derived "
             "from the stage count and checked against this when above 1)",
             "1");
  flags->Add("index-topk-freq",
             "index sharing: one computing layer per this many layers (1: all "
             "compute)",
             "1");
  flags->Add("index-skip-topk-offset",
             "index sharing: layers up to this one all compute", "2");
}

// Reads an integer flag into `out`, keeping the first error in `status`.
void ReadInt(const CommandFlags& flags, const std::string& name, int* out,
             absl::Status* status) {
  if (status->ok() && flags.Has(name)) *status = flags.GetInt(name, out);
}

absl::StatusOr<LayoutRequest> RequestFromFlags(const CommandFlags& flags) {
  LayoutRequest request;
  request.layout = flags.Get("layout");
  absl::Status status;
  ReadInt(flags, "num-layers", &request.num_layers, &status);
  ReadInt(flags, "mtp-layers", &request.mtp_layers, &status);
  ReadInt(flags, "pp", &request.pp, &status);
  ReadInt(flags, "vpp", &request.vpp, &status);
  ReadInt(flags, "index-topk-freq", &request.sharing.topk_freq, &status);
  ReadInt(flags, "index-skip-topk-offset", &request.sharing.skip_topk_offset,
          &status);
  ReadInt(flags, "num-layers-in-first-stage",
          &request.num_layers_in_first_stage, &status);
  ReadInt(flags, "num-layers-in-last-stage", &request.num_layers_in_last_stage,
          &status);
  if (!status.ok()) return status;
  if (!request.layout.empty() && (request.num_layers_in_first_stage > 0 ||
                                  request.num_layers_in_last_stage > 0)) {
    return absl::InvalidArgumentError(
        "give either --layout or --num-layers-in-first/last-stage, not both");
  }
  return request;
}

// "1-3,7,11": consecutive runs collapsed.
std::string FormatLayerList(const std::vector<int>& layers) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(layers[i])
                           : absl::StrCat(layers[i], "-", layers[j]));
    i = j + 1;
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

std::string StageMarks(const StageSlice& slice) {
  std::vector<std::string> marks;
  if (slice.has_embedding) marks.push_back("E");
  if (slice.mtp_layers == 1) marks.push_back("m");
  if (slice.mtp_layers > 1)
    marks.push_back(absl::StrCat("m*", slice.mtp_layers));
  if (slice.has_loss) marks.push_back("L");
  return marks.empty() ? "-" : absl::StrJoin(marks, " ");
}

std::string StageTable(const std::vector<StageSlice>& slices) {
  std::string out = absl::StrFormat(
      "%-6s %-8s %-6s %-9s %-7s %-20s %-6s %s\n", "stage", "pp rank", "chunk",
      "layers", "count", "computing layers", "marks", "cost");
  for (const StageSlice& slice : slices) {
    const std::string range =
        slice.num_layers() == 0
            ? std::string("-")
            : absl::StrCat(slice.first_layer, "-", slice.last_layer);
    absl::StrAppend(
        &out, absl::StrFormat("%-6d %-8d %-6d %-9s %-7d %-20s %-6s %g\n",
                              slice.stage, slice.pp_rank, slice.virtual_chunk,
                              range, slice.num_layers(),
                              FormatLayerList(slice.computing_layers),
                              StageMarks(slice), StageCost(slice)));
  }
  return out;
}

json StagesJson(const std::vector<StageSlice>& slices) {
  json stages = json::array();
  for (const StageSlice& slice : slices) {
    stages.push_back({{"stage", slice.stage},
                      {"pp_rank", slice.pp_rank},
                      {"virtual_chunk", slice.virtual_chunk},
                      {"first_layer", slice.first_layer},
                      {"last_layer", slice.last_layer},
                      {"computing_layers", slice.computing_layers},
                      {"embedding", slice.has_embedding},
                      {"loss", slice.has_loss},
                      {"mtp_layers", slice.mtp_layers},
                      {"cost", StageCost(slice)}});
  }
  return stages;
}

// The layout string of validated slices, e.g. for an uneven split.
std::string LayoutOf(const LayoutRequest& request) {
  absl::StatusOr<std::vector<std::string>> stages = RequestedStages(request);
  return stages.ok() ? FormatLayout(*stages) : request.layout;
}

void PrintLayout(const std::string& layout,
                 const std::vector<StageSlice>& slices, int pp,
                 std::ostream& out) {
  out << "layout: " << layout << "\n"
      << "stages: " << slices.size() << " (pp " << pp << " x vpp "
      << slices.size() / pp << "), largest stage cost "
      << LargestStageCost(slices) << "\n\n"
      << StageTable(slices);
}

json LayoutJson(const std::string& layout,
                const std::vector<StageSlice>& slices, int pp) {
  return {{"valid", true},
          {"layout", layout},
          {"pp", pp},
          {"vpp", slices.size() / pp},
          {"largest_stage_cost", LargestStageCost(slices)},
          {"stages", StagesJson(slices)}};
}

// Prints why the request is invalid (`label`: "invalid", "no layout") plus
// `extra` fields, as text or JSON; returns kExitFailure.
int ReportFailure(const absl::Status& error, const std::string& label,
                  const json& extra, bool as_json, std::ostream& out) {
  if (as_json) {
    json report = {{"valid", false}, {"error", std::string(error.message())}};
    report.update(extra);
    out << report.dump(2) << "\n";
    return kExitFailure;
  }
  out << label << ": " << error.message() << "\n";
  if (extra.contains("suggestion")) {
    out << "suggestion (" << extra["suggestion_method"].get<std::string>()
        << "):\n  " << extra["suggestion"].get<std::string>() << "\n";
  }
  return kExitFailure;
}

int ReportInvalidLayout(const LayoutRequest& request, const absl::Status& error,
                        bool as_json, std::ostream& out) {
  json extra = json::object();
  if (absl::StatusOr<LayoutSuggestion> suggestion = SuggestLayout(request);
      suggestion.ok()) {
    extra = {{"suggestion", suggestion->layout},
             {"suggestion_method", suggestion->method}};
  }
  return ReportFailure(error, "invalid", extra, as_json, out);
}

// The planner's layout for `request` and its validated stages.
absl::StatusOr<std::vector<StageSlice>> PlannedStages(
    const LayoutRequest& request, std::string* layout) {
  absl::StatusOr<std::string> planned = PlanLayout(request);
  if (!planned.ok()) return planned.status();
  *layout = *planned;
  LayoutRequest check = request;
  check.layout = *planned;
  return PlanStages(check);
}

std::string CostModelHelp() {
  return absl::StrCat("\n", CostModelDescription());
}

}  // namespace

int RunLayoutCheck(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err) {
  CommandFlags flags(absl::StrCat(
      "glmctl layout check (--layout=STR | [--num-layers-in-first-stage=N] "
      "[--num-layers-in-last-stage=N]) --num-layers=N --pp=P [flags]\n"
      "Checks a pipeline layout (or Megatron's even/uneven split) against "
      "Megatron's rules and\nindex sharing: every stage holding decoder layers "
      "must start on a computing layer.\nExit 0 and a per-stage table when "
      "valid; exit 1, the reason and the nearest valid\nlayout when not. "
      "\"Nearest\": when only index sharing fails, each bad stage boundary\n"
      "moves to the closest computing layer (ties toward the earlier layer); "
      "otherwise the\nbalanced plan of `glmctl layout plan`.",
      CostModelHelp()));
  flags.Add("layout",
            "Megatron layout: E t m L | , (...)*n x*n (empty: even or uneven "
            "split)");
  AddSizeFlags(&flags);
  flags.Add("num-layers-in-first-stage",
            "uneven split: decoder layers on the first pp rank", "0");
  flags.Add("num-layers-in-last-stage",
            "uneven split: decoder layers on the last pp rank", "0");
  if (int code = ParseOrExit("layout check", args, {"num-layers", "pp"}, &flags,
                             out, err);
      code >= 0) {
    return code;
  }
  absl::StatusOr<LayoutRequest> request = RequestFromFlags(flags);
  if (!request.ok()) {
    err << "glmctl layout check: " << request.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<StageSlice>> slices = PlanStages(*request);
  if (!slices.ok()) {
    return ReportInvalidLayout(*request, slices.status(), WantsJson(flags),
                               out);
  }
  const std::string layout = LayoutOf(*request);
  if (WantsJson(flags)) {
    out << LayoutJson(layout, *slices, request->pp).dump(2) << "\n";
  } else {
    PrintLayout(layout, *slices, request->pp, out);
  }
  return kExitOk;
}

int RunLayoutPlan(const std::vector<std::string>& args, std::ostream& out,
                  std::ostream& err) {
  CommandFlags flags(absl::StrCat(
      "glmctl layout plan --num-layers=N --pp=P [flags]\n"
      "Prints a valid pipeline layout that balances per-stage cost, or why "
      "none exists.",
      CostModelHelp()));
  AddSizeFlags(&flags);
  if (int code = ParseOrExit("layout plan", args, {"num-layers", "pp"}, &flags,
                             out, err);
      code >= 0) {
    return code;
  }
  absl::StatusOr<LayoutRequest> request = RequestFromFlags(flags);
  if (!request.ok()) {
    err << "glmctl layout plan: " << request.status().message() << "\n";
    return kExitUsage;
  }
  std::string layout;
  absl::StatusOr<std::vector<StageSlice>> slices =
      PlannedStages(*request, &layout);
  if (!slices.ok()) {
    return ReportFailure(slices.status(), "no layout", json::object(),
                         WantsJson(flags), out);
  }
  if (WantsJson(flags)) {
    json report = LayoutJson(layout, *slices, request->pp);
    report["cost_model"] = {{"decoder_layer", kDecoderLayerCost},
                            {"embedding", kEmbeddingCost},
                            {"loss", kLossCost},
                            {"mtp_layer", kMtpLayerCost}};
    out << report.dump(2) << "\n";
  } else {
    PrintLayout(layout, *slices, request->pp, out);
    out << "\n" << CostModelDescription();
  }
  return kExitOk;
}

int RunGrid(const std::vector<std::string>& args, std::ostream& out,
            std::ostream& err) {
  CommandFlags flags(
      "glmctl grid --world=W [--tp --pp --cp --ep --etp --num-experts]\n"
      "Every rank's coordinates. Dense: world = tp*cp*dp*pp, tp fastest; "
      "experts: world =\netp*ep*edp*pp, etp fastest (Megatron order "
      "tp-cp-ep-dp-pp).");
  flags.Add("world", "number of ranks");
  for (const char* name : {"tp", "pp", "cp", "ep", "etp"}) {
    flags.Add(name, absl::StrCat(name, " parallel size"), "1");
  }
  flags.Add("num-experts",
            "routed experts, checked to divide over ep (0: skip)", "0");
  if (int code = ParseOrExit("grid", args, {"world"}, &flags, out, err);
      code >= 0) {
    return code;
  }
  GridSpec spec;
  absl::Status status;
  ReadInt(flags, "world", &spec.world, &status);
  ReadInt(flags, "tp", &spec.tp, &status);
  ReadInt(flags, "pp", &spec.pp, &status);
  ReadInt(flags, "cp", &spec.cp, &status);
  ReadInt(flags, "ep", &spec.ep, &status);
  ReadInt(flags, "etp", &spec.etp, &status);
  ReadInt(flags, "num-experts", &spec.num_experts, &status);
  if (!status.ok()) {
    err << "glmctl grid: " << status.message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  if (!grid.ok()) {
    return ReportFailure(grid.status(), "invalid", json::object(),
                         WantsJson(flags), out);
  }
  if (WantsJson(flags)) {
    json ranks = json::array();
    for (const RankCoordinates& c : grid->ranks) {
      ranks.push_back({{"rank", c.rank},
                       {"tp", c.tp},
                       {"cp", c.cp},
                       {"dp", c.dp},
                       {"pp", c.pp},
                       {"etp", c.etp},
                       {"ep", c.ep},
                       {"edp", c.edp}});
    }
    out << json{{"valid", true},
                {"dp", grid->dp},
                {"edp", grid->edp},
                {"ranks", ranks}}
               .dump(2)
        << "\n";
    return kExitOk;
  }
  out << absl::StrFormat(
      "world %d = tp %d x cp %d x dp %d x pp %d; experts: etp %d x ep %d x "
      "edp %d x pp %d\n\n",
      spec.world, spec.tp, spec.cp, grid->dp, spec.pp, spec.etp, spec.ep,
      grid->edp, spec.pp);
  out << absl::StrFormat("%-6s %-4s %-4s %-4s %-4s %-4s %-4s %s\n", "rank",
                         "tp", "cp", "dp", "pp", "etp", "ep", "edp");
  for (const RankCoordinates& c : grid->ranks) {
    out << absl::StrFormat("%-6d %-4d %-4d %-4d %-4d %-4d %-4d %d\n", c.rank,
                           c.tp, c.cp, c.dp, c.pp, c.etp, c.ep, c.edp);
  }
  return kExitOk;
}

std::vector<Command> LayoutCommands() {
  auto bind = [](int (*run)(const std::vector<std::string>&, std::ostream&,
                            std::ostream&)) {
    return [run](const std::vector<std::string>& args) {
      return run(args, std::cout, std::cerr);
    };
  };
  return {
      {"layout check", "validate a pipeline layout or split",
       bind(RunLayoutCheck)},
      {"layout plan", "balanced pipeline layout for a model",
       bind(RunLayoutPlan)},
      {"grid", "each rank's tp/cp/dp/pp/etp/ep/edp coordinates", bind(RunGrid)},
  };
}

}  // namespace glm
