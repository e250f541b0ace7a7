// libFuzzer: the safetensors reader (header parsing, offsets, dtypes, conversions) on arbitrary bytes.
// Every input must either load or throw encore::Error; every tensor that loads must be readable in full.
#include <sys/stat.h>

#include "encore/error.hpp"
#include "fuzz_util.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = encore_fuzz::write_input(data, size, "model.safetensors");
  try {
    auto f = encore::io::SafetensorsFile::open(path);
    for (const auto& [name, info] : f->tensors()) {
      try {
        encore::Tensor t = info.dtype == encore::io::StDType::I64 || info.dtype == encore::io::StDType::I32
                               ? f->get_i64(name)
                               : info.dtype == encore::io::StDType::I8 ? f->get_i8(name) : f->get_f32(name);
        // touch every byte the tensor claims (ASan reports reads past the mapping)
        const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
        uint8_t sum = 0;
        for (int64_t i = 0; i < t.numel() * static_cast<int64_t>(encore::dtype_size(t.dtype())); ++i) sum ^= p[i];
        asm volatile("" : : "r"(sum));  // keeps the reads
      } catch (const encore::Error&) {
      }
    }
  } catch (const encore::Error&) {
  }
  return 0;
}
