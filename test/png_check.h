// png_check.h: just enough PNG reading to tell a rendered page from a blank one: 8-bit RGB or RGBA,
// non-interlaced (what chromium --screenshot writes), inflated with zlib, the five scanline filters undone.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

struct Image {
    int width = 0, height = 0;
    std::vector<uint8_t> rgb;  // (height, width, 3)
    std::string error;         // "" when read
};

inline Image read_png(const std::string& path) {
    Image im;
    std::ifstream f(path, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (b.size() < 8 || b[1] != 'P' || b[2] != 'N' || b[3] != 'G') return im.error = "not a PNG", im;
    auto be32 = [&](size_t at) {
        return (uint32_t)b[at] << 24 | (uint32_t)b[at + 1] << 16 | (uint32_t)b[at + 2] << 8 | b[at + 3];
    };
    std::vector<uint8_t> z;
    int depth = 0, type = 0, interlace = 0;
    for (size_t at = 8; at + 8 <= b.size();) {
        const uint32_t len = be32(at);
        const std::string kind(b.begin() + at + 4, b.begin() + at + 8);
        if (at + 12 + len > b.size()) return im.error = "truncated chunk " + kind, im;
        const uint8_t* d = b.data() + at + 8;
        if (kind == "IHDR") {
            im.width = (int)be32(at + 8), im.height = (int)be32(at + 12);
            depth = d[8], type = d[9], interlace = d[12];
        } else if (kind == "IDAT") {
            z.insert(z.end(), d, d + len);
        }
        at += 12 + len;
    }
    if (depth != 8 || (type != 2 && type != 6) || interlace) return im.error = "not 8-bit RGB(A), non-interlaced", im;
    const int bpp = type == 6 ? 4 : 3;
    const size_t stride = (size_t)im.width * bpp;
    std::vector<uint8_t> raw((stride + 1) * im.height);
    uLongf got = raw.size();
    if (uncompress(raw.data(), &got, z.data(), z.size()) != Z_OK || got != raw.size())
        return im.error = "bad image data", im;
    std::vector<uint8_t> cur(stride), prev(stride, 0);
    im.rgb.resize((size_t)im.width * im.height * 3);
    for (int y = 0; y < im.height; y++) {
        const uint8_t filter = raw[y * (stride + 1)];
        const uint8_t* line = raw.data() + y * (stride + 1) + 1;
        for (size_t x = 0; x < stride; x++) {
            const int a = x >= (size_t)bpp ? cur[x - bpp] : 0, up = prev[x], c = x >= (size_t)bpp ? prev[x - bpp] : 0;
            int pred = 0;
            if (filter == 1) pred = a;
            else if (filter == 2) pred = up;
            else if (filter == 3) pred = (a + up) / 2;
            else if (filter == 4) {
                const int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - c);
                pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
            }
            cur[x] = (uint8_t)(line[x] + pred);
        }
        for (int x = 0; x < im.width; x++)
            for (int k = 0; k < 3; k++) im.rgb[((size_t)y * im.width + x) * 3 + k] = cur[(size_t)x * bpp + k];
        prev.swap(cur);
    }
    return im;
}
