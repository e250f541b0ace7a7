// A minimal PNG encoder: 8-bit RGB, no interlace, filter 0 on every row, the zlib stream made of stored
// (uncompressed) deflate blocks. Enough for plots; no dependency.
//
//   std::vector<uint8_t> rgb(w * h * 3, 255);
//   std::string png = encore::io::encode_png_rgb(w, h, rgb.data());
#pragma once
#include <cstdint>
#include <string>

namespace encore::io {

// rgb: height rows of width pixels, 3 bytes each (R, G, B). Returns the whole file.
std::string encode_png_rgb(int64_t width, int64_t height, const uint8_t* rgb);

// CRC-32 (ISO 3309, polynomial 0xEDB88320 reflected, as PNG and zlib use) and Adler-32 (RFC 1950).
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

}  // namespace encore::io
