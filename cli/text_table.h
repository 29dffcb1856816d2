// Left-aligned text columns for glmctl's human-readable output.
#ifndef GLM_CLI_TEXT_TABLE_H_
#define GLM_CLI_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace glm {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  // Each column as wide as its widest cell, two spaces apart; one line per row.
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace glm

#endif  // GLM_CLI_TEXT_TABLE_H_
