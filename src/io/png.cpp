#include "io/png.hpp"

#include <array>

#include "encore/error.hpp"

namespace encore::io {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put_be32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

// length, type, data, CRC-32 of type + data
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_be32(out, crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
}

}  // namespace

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = crc_table()[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t* p, size_t n, uint32_t adler) {
  // a = 1 + Σ bytes, b = Σ a after each byte, both mod 65521; result b·65536 + a
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  for (size_t i = 0; i < n; ++i) {
    a = (a + p[i]) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

std::string encode_png_rgb(int64_t width, int64_t height, const uint8_t* rgb) {
  ENCORE_CHECK(width > 0 && height > 0 && width <= (1 << 20) && height <= (1 << 20),
               "PNG: image size must be within 1..2^20 pixels per side, got ", width, "x", height);
  // Raw image data: each row is a filter-type byte (0 = none) followed by its pixels.
  const size_t row = static_cast<size_t>(width) * 3;
  std::string raw;
  raw.reserve((row + 1) * static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(rgb) + y * row, row);
  }
  // zlib stream (RFC 1950): CMF 0x78 (deflate, 32K window), FLG 0x01 (check bits: 0x7801 % 31 == 0), stored
  // deflate blocks (RFC 1951 BTYPE 00: header byte BFINAL, LEN, ~LEN little-endian, bytes), Adler-32 big-endian.
  std::string z = "\x78\x01";
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(raw.size() - pos, 65535);
    const bool final_block = pos + len == raw.size();
    z.push_back(final_block ? '\x01' : '\x00');
    for (uint16_t v : {static_cast<uint16_t>(len), static_cast<uint16_t>(~len)}) {
      z.push_back(static_cast<char>(v & 0xFF));
      z.push_back(static_cast<char>(v >> 8));
    }
    z.append(raw, pos, len);
    pos += len;
  } while (pos < raw.size());
  put_be32(z, adler32(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));

  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
}

}  // namespace encore::io
