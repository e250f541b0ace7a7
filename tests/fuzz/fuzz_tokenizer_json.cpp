// libFuzzer: tokenizer.json loading (every component type and field), then encoding and decoding a few fixed
// texts with whatever loaded. Errors must be encore::Error; offsets must stay inside the input.
#include <string>

#include "encore/error.hpp"
#include "encore/tokenizer.hpp"
#include "fuzz_util.hpp"

static void check_offsets(const encore::Encoding& e, size_t n) {
  FUZZ_ASSERT(e.ids.size() == e.offsets.size() && e.ids.size() == e.attention_mask.size());
  for (const auto& [b, en] : e.offsets) FUZZ_ASSERT(0 <= b && b <= en && static_cast<size_t>(en) <= n);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    encore::Tokenizer tok = encore::Tokenizer::from_json(json);
    for (const std::string text : {"Hello, world! 123", "ünïcødé \xe4\xb8\xad\xe6\x96\x87 text", "", "\xff\xfe bad"}) {
      try {
        encore::Encoding e = tok.encode(text);
        check_offsets(e, text.size());
        (void)tok.decode(e.ids, false);
        (void)tok.encode_pair(text, "second", true);
      } catch (const encore::Error&) {
      }
    }
  } catch (const encore::Error&) {
  }
  return 0;
}
