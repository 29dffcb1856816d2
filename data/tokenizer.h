// Tokenizers for data preparation: text to token ids and back, plus the
// special tokens the datasets need (end of document, padding, and the chat
// role markers the SFT template uses).
#ifndef GLM_DATA_TOKENIZER_H_
#define GLM_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/sentencepiece_model.h"

namespace glm {

// Single-token markers of the chat template (chat_sft.h).
struct ChatMarkers {
  int32_t system = -1;
  int32_t user = -1;
  int32_t assistant = -1;
  int32_t end = -1;  // ends every message
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text to ids. The byte tokenizer never reads special-token names out of
  // text; a SentencePiece model does extract its user-defined pieces.
  virtual std::vector<int32_t> Encode(std::string_view text) const = 0;
  // Ids to text; special tokens are written as their names.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t eod_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual const ChatMarkers& chat_markers() const = 0;
  // "byte" or "sentencepiece:PATH".
  virtual std::string name() const = 0;
};

// UTF-8 bytes as ids 0..255, then the special tokens below: 262 ids in all,
// within the glm5.2-tiny vocabulary of 512.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;  // <|endoftext|>
  static constexpr int32_t kPad = 257;  // <|pad|>
  static constexpr int32_t kSystem = 258;
  static constexpr int32_t kUser = 259;
  static constexpr int32_t kAssistant = 260;
  static constexpr int32_t kEnd = 261;
  static constexpr int32_t kVocabSize = 262;

  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return kVocabSize; }
  int32_t eod_id() const override { return kEod; }
  int32_t pad_id() const override { return kPad; }
  const ChatMarkers& chat_markers() const override { return markers_; }
  std::string name() const override { return "byte"; }

 private:
  ChatMarkers markers_{kSystem, kUser, kAssistant, kEnd};
};

// The names of the special tokens, shared by both tokenizers; a SentencePiece
// model gets its chat markers from user-defined pieces with these names.
inline constexpr char kEodPiece[] = "<|endoftext|>";
inline constexpr char kPadPiece[] = "<|pad|>";
inline constexpr char kSystemPiece[] = "<|system|>";
inline constexpr char kUserPiece[] = "<|user|>";
inline constexpr char kAssistantPiece[] = "<|assistant|>";
inline constexpr char kEndPiece[] = "<|end|>";

// A SentencePiece .model file. The end-of-document id is the model's eos
// (or the <|endoftext|> piece), padding is its pad (or eos when it has
// none); chat markers are the pieces named above, -1 when the model lacks
// them (ChatTemplate then refuses it).
class SentencePieceTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path);

  std::vector<int32_t> Encode(std::string_view text) const override;
  std::string Decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eod_id() const override { return eod_; }
  int32_t pad_id() const override { return pad_; }
  const ChatMarkers& chat_markers() const override { return markers_; }
  std::string name() const override { return "sentencepiece:" + path_; }

 private:
  SentencePieceTokenizer() = default;

  std::string path_;
  SentencePieceModel model_;
  int32_t vocab_size_ = 0;
  int32_t eod_ = -1;
  int32_t pad_ = -1;
  ChatMarkers markers_;
};

// "byte" gives the ByteTokenizer; anything else is a SentencePiece model path.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& spec);

}  // namespace glm

#endif  // GLM_DATA_TOKENIZER_H_
