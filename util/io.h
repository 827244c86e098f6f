// util/io.h: the byte-level file helpers our binary formats share (model.bin and the state files in run/checkpoint.h,
// the eval files in eval/eval_file.h, the trainer's small text files): a 64-bit checksum, 64-bit fields inside an
// int32 header, a write that is atomic (NAME.tmp, flushed, fsync'd, renamed over NAME, so a reader sees the
// old file or the new one, never a mix), random ids, and checked reads: of regular files only (a FIFO, a device
// or a directory is refused in one line, never waited on or read without end), never more than the file holds.
//
// Does not: know any format. Errors are IoErrors, one line naming the file and what to do; callers that want
// their own error type catch and rethrow with their context.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.h"

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

// A random 64-bit id, never 0 (a run's, in its checkpoints; a shard set's, in its shards): 8 bytes of
// /dev/urandom, else the clock and the process id mixed by SplitMix64's finalizer.
inline uint64_t random_id() {
    uint64_t x = 0;
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &x, sizeof x) != (ssize_t)sizeof x) x = 0;
        close(fd);
    }
    if (x == 0) {
        x = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count() ^ ((uint64_t)getpid() << 32);
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
    }
    return x ? x : 1;
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

// The kind of a file for messages: "a directory", "a FIFO", "a character device", ...
inline const char* file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISLNK(m)  ? "a symbolic link"
           : S_ISREG(m)  ? "a regular file"
                         : "not a regular file";
}

// Why a write failed, for messages: strerror, plus the likely cause of the two that mean "no room".
inline std::string write_error(int e) {
    std::string s = strerror(e);
    if (e == ENOSPC || e == EDQUOT) s += " (disk full or over quota?)";
    if (e == EFBIG) s += " (over the file-size limit, ulimit -f?)";
    return s;
}

// An output is written to path.tmp and renamed over path, which replaces whatever is there: so what is there must
// be a regular file (or nothing). A device, FIFO or socket (as root, -o /dev/null would replace the node itself) is
// refused in one line; `follow` = false refuses a symbolic link too (/dev/stdout: the rename replaces the link, not
// what it names). The message starts with the path.
inline void refuse_unless_regular(const std::string& path, bool follow) {
    struct stat st;
    if ((follow ? stat(path.c_str(), &st) : lstat(path.c_str(), &st)) != 0 || S_ISREG(st.st_mode) ||
        S_ISDIR(st.st_mode))
        return;
    throw IoError(path + " is " + file_kind(st.st_mode) + ", not a regular file; pass the name of the file to write");
}

// Before the work whose result goes to `path` (a --json FILE, an -o FILE): a directory there, or a directory
// above it that does not exist, is an error now rather than after the work. `flag` names the option.
inline void check_output_file(const std::string& path, const std::string& flag) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {  // the example is a file there ("/": ./out, not //out)
        const std::string in = path.substr(0, path.find_last_not_of('/') + 1);
        throw IoError(flag + " " + path + " is a directory; pass a file name (e.g. " + (in.empty() ? "." : in) +
                      "/out)");
    }
    refuse_unless_regular(path, true);
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
        throw IoError(flag + " " + path + ": " + dir + " is " + file_kind(st.st_mode) +
                      ", not a directory; pass the name of a file to write, in a directory that exists");
    if (stat(dir.c_str(), &st) != 0)
        throw IoError(flag + " " + path + ": the directory " + dir + " does not exist; create it or fix the path");
}

// Writes path through path.tmp: fill writes the open file (false when a write failed, errno saying why), then
// fsync and a rename over path. An earlier path.tmp (a crash's, or a link) is unlinked first and the new one
// created afresh, so a link there is never followed; on any failure (fill's exceptions included) no path.tmp is
// left behind and path is as it was.
inline void write_via_tmp(const std::string& path, const std::function<bool(FILE*)>& fill) {
    const std::string tmp = path + ".tmp";
    unlink(tmp.c_str());
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE* f = fd >= 0 ? fdopen(fd, "wb") : nullptr;
    if (!f) {
        const int e = errno;
        if (fd >= 0) close(fd), unlink(tmp.c_str());
        throw IoError("cannot write " + tmp + ": " + write_error(e) + "; check the output directory");
    }
    bool ok;
    try {
        ok = fill(f);
    } catch (...) {
        fclose(f), unlink(tmp.c_str());
        throw;
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0 && ok) ok = false, e = errno;
    if (!ok) {
        unlink(tmp.c_str());
        const bool had = access(path.c_str(), F_OK) == 0;
        throw IoError("writing " + tmp + " failed: " + write_error(e) +
                      (had ? "; the previous " + path + " is untouched" : std::string()));
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        e = errno;
        unlink(tmp.c_str());
        throw IoError("cannot rename " + tmp + " to " + path + ": " + strerror(e));
    }
}

// Writes the pieces to path through path.tmp (write_via_tmp); a directory at path, or anything there but a
// regular file, is refused before anything is written.
inline void write_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw IoError("cannot write " + path + ": it is a directory; pass a file name");
    refuse_unless_regular(path, false);
    write_via_tmp(path, [&](FILE* f) {
        for (auto& p : pieces)
            if (p.second != 0 && fwrite(p.first, 1, p.second, f) != p.second) return false;
        return true;
    });
}

// Opens a file for reading with its size; closed when the returned handle goes out of scope. Only a regular
// file is opened: a FIFO (opened without blocking, so that no writer is waited for), a device or a directory
// is refused in one line naming what it is, so that no read waits forever or runs without end (/dev/zero).
using FileHandle = std::unique_ptr<FILE, int (*)(FILE*)>;
inline FileHandle open_sized(const std::string& path, const char* what, size_t& size) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw IoError(std::string("cannot open ") + what + " " + path + ": " + strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        throw IoError(std::string("cannot stat ") + what + " " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        throw IoError(std::string(what) + " " + path + " is " + file_kind(st.st_mode) +
                      ", not a regular file; pass the file itself");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        throw IoError(std::string("cannot open ") + what + " " + path + ": " + strerror(errno));
    }
    size = (size_t)st.st_size;
    return FileHandle(f, fclose);
}

// The whole file (a regular one, open_sized), at most `limit` bytes of it: a larger file is an error naming
// both sizes. `what` names it in errors ("eval file").
inline std::vector<unsigned char> read_file_bytes(const std::string& path, const char* what,
                                                  size_t limit = (size_t)1 << 40) {
    size_t size;
    FileHandle fh = open_sized(path, what, size);
    if (size > limit)
        throw IoError(std::string(what) + " " + path + " is " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(limit) + " such a file can hold; is it the right file?");
    std::vector<unsigned char> buf(size);
    const size_t got = size ? fread(buf.data(), 1, size, fh.get()) : 0;
    if (got != size || ferror(fh.get())) throw IoError(std::string("error reading ") + what + " " + path);
    return buf;
}
