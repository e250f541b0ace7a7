#include "io/json_file.hpp"

#include <fstream>

#include "encore/error.hpp"

namespace encore::io {

nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  ENCORE_CHECK(in.good(), "cannot read '", p.string(), "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("'", p.string(), "' is not valid JSON: ", e.what()));
  }
}

}  // namespace encore::io
