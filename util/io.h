// util/io.h: the byte-level file helpers our binary formats share (model.bin and the state files in run/checkpoint.h,
// the eval files in eval/eval_file.h, the trainer's small text files): a 64-bit checksum, 64-bit fields inside an
// int32 header, a write that is atomic (NAME.tmp, flushed, fsync'd, renamed over NAME, so a reader sees the
// old file or the new one, never a mix), and checked reads.
//
// Does not: know any format. Errors are IoErrors, one line naming the file and what to do; callers that want
// their own error type catch and rethrow with their context.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"

// The checksum of our binary formats: FNV-1a's constants over 8-byte little-endian words, with a xorshift
// so that high bits reach low ones. Over bytes b[0..n):
//   h = 0xcbf29ce484222325
//   for each whole word w = b[8i..8i+8) (little-endian uint64):  h = (h ^ w) * 0x100000001b3; h ^= h >> 29
//   for each of the n mod 8 bytes left, in order:              h = (h ^ byte) * 0x100000001b3
// (all arithmetic mod 2^64). Every step is a bijection of h, so any change confined to one word always
// changes the result; it is fast enough for GB-sized files. It is not a cryptographic hash.
// checksum64(b, nb, checksum64(a, na)) hashes a then b with each piece's words counted from the piece's own
// first byte (version 1 checkpoints chain their pieces this way); Checksum64 below hashes a stream of pieces
// as the one byte string they form (version 2).
inline uint64_t checksum64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
    const unsigned char* p = (const unsigned char*)data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// checksum64 of the concatenation of every piece given to update(), whatever the pieces' lengths: a word that
// straddles two pieces is assembled first. value() equals checksum64(all bytes).
class Checksum64 {
  public:
    void update(const void* data, size_t n) {
        const unsigned char* p = (const unsigned char*)data;
        while (n > 0 && part_n_ > 0) {  // complete a word begun by the previous piece
            part_[part_n_++] = *p++, n--;
            if (part_n_ == 8) h_ = checksum64(part_, 8, h_), part_n_ = 0;
        }
        if (part_n_ > 0) return;  // the piece ended inside that word
        size_t whole = n / 8 * 8;
        h_ = checksum64(p, whole, h_);
        memcpy(part_, p + whole, n - whole);
        part_n_ = n - whole;
    }
    uint64_t value() const { return checksum64(part_, part_n_, h_); }

  private:
    uint64_t h_ = 0xcbf29ce484222325ull;
    unsigned char part_[8] = {};
    size_t part_n_ = 0;
};

// `s` with every control byte (and DEL) written as \xNN, for names read from files that go into one-line
// messages: a NUL would cut the message short, a newline would split it. Other bytes (UTF-8) are kept.
inline std::string printable(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
        if (c >= 0x20 && c != 0x7f) {
            out += (char)c;
        } else {
            char b[8];
            snprintf(b, sizeof b, "\\x%02x", c);
            out += b;
        }
    }
    return out;
}

// A 64-bit value in two consecutive int32 slots h[at], h[at + 1] of a header (little-endian, as the files are).
inline void put64(int32_t* h, int at, int64_t v) { memcpy(h + at, &v, 8); }
inline int64_t get64(const int32_t* h, int at) {
    int64_t v;
    memcpy(&v, h + at, 8);
    return v;
}
inline void putf64(int32_t* h, int at, double v) { memcpy(h + at, &v, 8); }
inline double getf64(const int32_t* h, int at) {
    double v;
    memcpy(&v, h + at, 8);
    return v;
}

// Writes the pieces to path.tmp, fsyncs and renames over path.
inline void write_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) throw IoError("cannot write " + tmp + ": " + strerror(errno) + "; check the output directory");
    bool ok = true;
    for (auto& p : pieces) ok = ok && (p.second == 0 || fwrite(p.first, 1, p.second, f) == p.second);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        int e = errno;
        unlink(tmp.c_str());
        const bool had = access(path.c_str(), F_OK) == 0;
        throw IoError("writing " + tmp + " failed: " + strerror(e) + " (disk full?)" +
                      (had ? "; the previous " + path + " is untouched" : std::string()));
    }
    if (rename(tmp.c_str(), path.c_str()) != 0)
        throw IoError("cannot rename " + tmp + " to " + path + ": " + strerror(errno));
}

// The whole file. `what` names it in errors ("eval file").
inline std::vector<unsigned char> read_file_bytes(const std::string& path, const char* what) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw IoError(std::string("cannot open ") + what + " " + path + ": " + strerror(errno));
    std::vector<unsigned char> buf;
    unsigned char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf.insert(buf.end(), chunk, chunk + n);
    bool err = ferror(f);
    fclose(f);
    if (err) throw IoError(std::string("error reading ") + what + " " + path);
    return buf;
}

// Opens a file for reading with its size; closed when the returned handle goes out of scope. For files too
// large to buffer twice (a checkpoint is read straight into its vectors).
using FileHandle = std::unique_ptr<FILE, int (*)(FILE*)>;
inline FileHandle open_sized(const std::string& path, const char* what, size_t& size) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw IoError(std::string("cannot open ") + what + " " + path + ": " + strerror(errno));
    FileHandle h(f, fclose);
    struct stat st;
    if (fstat(fileno(f), &st) != 0) throw IoError(std::string("cannot stat ") + what + " " + path);
    size = (size_t)st.st_size;
    return h;
}
