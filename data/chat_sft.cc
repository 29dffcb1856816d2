#include "data/chat_sft.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/quote.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

using Json = nlohmann::json;

// A conversation nests three deep (object, messages, message).
constexpr int kMaxJsonDepth = 16;

// Parses one non-blank line; errors carry the field path, the caller adds
// "SOURCE:LINE: ".
absl::StatusOr<Conversation> ParseConversation(absl::string_view line) {
  bool too_deep = false;
  // Values nested too deep are dropped as they are read.
  Json::parser_callback_t depth_limit =
      [&too_deep](int depth, Json::parse_event_t, Json&) {
        too_deep |= depth > kMaxJsonDepth;
        return depth <= kMaxJsonDepth;
      };
  Json object = Json::parse(line.begin(), line.end(), depth_limit,
                            /*allow_exceptions=*/false);
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("nests more than ", kMaxJsonDepth, " levels deep"));
  }
  if (object.is_discarded()) return absl::InvalidArgumentError("not JSON");
  if (!object.is_object()) {
    return absl::InvalidArgumentError("expected a JSON object");
  }
  auto messages = object.find("messages");
  if (messages == object.end()) {
    return absl::InvalidArgumentError("missing field \"messages\"");
  }
  if (!messages->is_array() || messages->empty()) {
    return absl::InvalidArgumentError("\"messages\" must be a non-empty array");
  }
  Conversation conversation;
  bool has_assistant = false;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected an object"));
    }
    ChatMessage parsed;
    auto read_string = [&](const char* field, std::string* out) {
      auto value = message.find(field);
      if (value == message.end() || !value->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".", field, ": missing or not a string"));
      }
      *out = value->get<std::string>();
      return absl::OkStatus();
    };
    if (absl::Status status = read_string("role", &parsed.role); !status.ok()) {
      return status;
    }
    if (absl::Status status = read_string("content", &parsed.content);
        !status.ok()) {
      return status;
    }
    if (parsed.role != "system" && parsed.role != "user" &&
        parsed.role != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".role: expected system, user or assistant, got ",
                       Quote(parsed.role)));
    }
    has_assistant |= parsed.role == "assistant";
    conversation.messages.push_back(std::move(parsed));
  }
  if (!has_assistant) {
    return absl::InvalidArgumentError(
        "messages: no assistant message, so nothing to learn");
  }
  return conversation;
}

}  // namespace

absl::StatusOr<std::vector<Conversation>> ParseChatJsonl(
    const std::string& text, const std::string& source) {
  std::vector<Conversation> conversations;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<Conversation> conversation = ParseConversation(line);
    if (!conversation.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", line_number, ": ", conversation.status().message()));
    }
    conversation->line = line_number;
    conversations.push_back(std::move(*conversation));
  }
  return conversations;
}

absl::StatusOr<std::vector<Conversation>> ReadChatJsonl(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseChatJsonl(*text, path);
}

absl::StatusOr<SftSequence> RenderConversation(const Conversation& conversation,
                                               const Tokenizer& tokenizer) {
  const ChatMarkers& markers = tokenizer.chat_markers();
  if (markers.system < 0 || markers.user < 0 || markers.assistant < 0 ||
      markers.end < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tokenizer ", tokenizer.name(), " lacks the chat pieces ", kSystemPiece,
        " ", kUserPiece, " ", kAssistantPiece, " ", kEndPiece));
  }
  SftSequence sequence;
  auto append = [&sequence](const std::vector<int32_t>& ids, bool supervised) {
    sequence.tokens.insert(sequence.tokens.end(), ids.begin(), ids.end());
    sequence.loss_mask.insert(sequence.loss_mask.end(), ids.size(),
                              supervised ? 1 : 0);
  };
  for (const ChatMessage& message : conversation.messages) {
    const bool assistant = message.role == "assistant";
    const int32_t marker = message.role == "system" ? markers.system
                           : message.role == "user" ? markers.user
                                                    : markers.assistant;
    append({marker}, false);
    append(tokenizer.Encode("\n"), false);
    append(tokenizer.Encode(message.content), assistant);
    append({markers.end}, assistant);
  }
  return sequence;
}

}  // namespace glm
