#include "data/chat_sft.h"

#include <string>
#include <vector>

#include "base/quote.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

void ExpectParseError(const std::string& text, const std::string& message) {
  auto conversations = ParseChatJsonl(text, "chat.jsonl");
  ASSERT_FALSE(conversations.ok()) << text;
  EXPECT_EQ(conversations.status().message(), message);
}

TEST(ChatJsonlTest, ParsesConversationsAndSkipsBlankLines) {
  const std::string text =
      R"({"messages":[{"role":"user","content":"2+2?"},)"
      R"({"role":"assistant","content":"4"}]})"
      "\n\n"
      R"({"messages":[{"role":"system","content":"Be brief."},)"
      R"({"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]})"
      "\n";
  auto conversations = ParseChatJsonl(text, "chat.jsonl");
  ASSERT_TRUE(conversations.ok()) << conversations.status();
  ASSERT_EQ(conversations->size(), 2u);
  EXPECT_EQ((*conversations)[0].line, 1);
  EXPECT_EQ((*conversations)[1].line, 3);
  ASSERT_EQ((*conversations)[1].messages.size(), 3u);
  EXPECT_EQ((*conversations)[1].messages[0].role, "system");
  EXPECT_EQ((*conversations)[1].messages[2].content, "Hello");
}

TEST(ChatJsonlTest, ErrorsNameTheLineAndField) {
  const std::string good =
      R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]})";
  ExpectParseError(good + "\n{oops\n", "chat.jsonl:2: not JSON");
  ExpectParseError("[1]", "chat.jsonl:1: expected a JSON object");
  ExpectParseError(R"({"text":"x"})",
                   "chat.jsonl:1: missing field \"messages\"");
  ExpectParseError(R"({"messages":[]})",
                   "chat.jsonl:1: \"messages\" must be a non-empty array");
  ExpectParseError(
      good + "\n" +
          R"({"messages":[{"role":"user","content":"a"},{"role":"bot","content":"b"}]})",
      "chat.jsonl:2: messages[1].role: expected system, user or assistant, "
      "got \"bot\"");
  ExpectParseError(
      R"({"messages":[{"role":"user","content":7}]})",
      "chat.jsonl:1: messages[0].content: missing or not a string");
  ExpectParseError(R"({"messages":[{"content":"a"}]})",
                   "chat.jsonl:1: messages[0].role: missing or not a string");
  ExpectParseError(R"({"messages":[{"role":"user","content":"a"}]})",
                   "chat.jsonl:1: messages: no assistant message, so nothing "
                   "to learn");
}

TEST(ChatJsonlTest, HostileLinesAreRefusedBounded) {
  ExpectParseError(R"({"messages":)" + std::string(100000, '[') +
                       std::string(100000, ']') + "}",
                   "chat.jsonl:1: nests more than 16 levels deep");
  ExpectParseError(R"({"messages":[{"role":")" + std::string(100000, 'r') +
                       R"(\u001b[2J","content":"b"}]})",
                   "chat.jsonl:1: messages[0].role: expected system, user or "
                   "assistant, got \"" +
                       std::string(kQuoteBytes, 'r') + "...\" (100004 bytes)");
}

TEST(RenderConversationTest, MasksAssistantContentAndItsEndMarkerOnly) {
  ByteTokenizer tokenizer;
  Conversation conversation;
  conversation.messages = {{"system", "S"},
                           {"user", "Hi"},
                           {"assistant", "Yo"},
                           {"user", "?"},
                           {"assistant", "!"}};
  auto sequence = RenderConversation(conversation, tokenizer);
  ASSERT_TRUE(sequence.ok()) << sequence.status();
  const int32_t sys = ByteTokenizer::kSystem, usr = ByteTokenizer::kUser,
                ast = ByteTokenizer::kAssistant, end = ByteTokenizer::kEnd;
  EXPECT_EQ(sequence->tokens,
            (std::vector<int32_t>{sys, '\n', 'S', end,       //
                                  usr, '\n', 'H', 'i', end,  //
                                  ast, '\n', 'Y', 'o', end,  //
                                  usr, '\n', '?', end,       //
                                  ast, '\n', '!', end}));
  EXPECT_EQ(sequence->loss_mask, (std::vector<uint8_t>{0, 0, 0, 0,     //
                                                       0, 0, 0, 0, 0,  //
                                                       0, 0, 1, 1, 1,  //
                                                       0, 0, 0, 0,     //
                                                       0, 0, 1, 1}));
  EXPECT_EQ(tokenizer.Decode(sequence->tokens),
            "<|system|>\nS<|end|><|user|>\nHi<|end|><|assistant|>\nYo<|end|>"
            "<|user|>\n?<|end|><|assistant|>\n!<|end|>");
}

TEST(ReadChatJsonlTest, MissingFileIsNamed) {
  auto conversations = ReadChatJsonl("/nonexistent/chat.jsonl");
  ASSERT_FALSE(conversations.ok());
  EXPECT_NE(conversations.status().message().find("/nonexistent/chat.jsonl"),
            std::string::npos);
}

}  // namespace
}  // namespace glm
