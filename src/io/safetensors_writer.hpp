// safetensors writer: what SafetensorsFile (and the Python safetensors library) read back.
//
//   std::vector<encore::io::TensorToWrite> t = {{"w", encore::io::StDType::F32, {2, 3}, data, 24}};
//   encore::io::write_safetensors("out/model.safetensors", t, {{"format", "pt"}});
//
// Layout: 8-byte little-endian header length, the JSON header padded with spaces so the data section starts
// at a multiple of 8, then the tensors back to back without holes (the format forbids them), ordered by
// element size (8-byte types first, then 4, 2, 1) and name, so every tensor starts aligned to its element size
// (F32 tensors can be mapped zero-copy). The file is written to a temporary file in the same directory,
// fsynced, renamed over `path` and the directory fsynced: a reader sees the old file or the complete new one.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"

namespace encore::io {

struct TensorToWrite {
  std::string name;
  StDType dtype;
  Shape shape;
  const void* data;  // numel x st_dtype_bytes(dtype) bytes, little-endian; must stay valid during the write
  uint64_t bytes;    // checked against shape and dtype
};

// Throws encore::Error (naming the file) on invalid input (duplicate or empty names, sizes that disagree with
// the shape, the reserved name __metadata__) or I/O failure; `path` is then left untouched.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace encore::io
