// A JSON file read whole; errors name the file (missing, unreadable, invalid JSON with the parser's position).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

namespace encore::io {

nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace encore::io
