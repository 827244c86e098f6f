// util/fs.h: the file-system helpers every binary shares: is a path a directory, mkdir -p, a small text file
// read whole, a directory's names. Errors are one line (errors.h, util/io.h's checked reads).
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "errors.h"
#include "util/io.h"

inline bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir -p
inline void make_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); i++) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && !is_dir(cur) && mkdir(cur.c_str(), 0755) != 0 && !(errno == EEXIST && is_dir(cur)))
                throw ConfigError(errno == EEXIST ? cur + " exists and is not a directory; pass a directory as -o"
                                                  : "cannot create directory " + cur + ": " + strerror(errno));
        }
        if (i < path.size()) cur += path[i];
    }
}

// A text file without trailing newlines and spaces, at most `limit` bytes of it (read once); "" when it does
// not exist. A FIFO, a device or a directory there is an error (io.h's open_sized), never a read that waits or
// runs without end. A file larger than `cap` is an error naming it and its size, before anything is allocated
// (a 3 GB run.json is not a run record, and must not read as "out of memory"); the default cap is for a log.
constexpr size_t kTextFileCap = (size_t)1 << 30;
inline std::string read_text(const std::string& path, size_t limit = (size_t)-1, size_t cap = kTextFileCap) {
    if (access(path.c_str(), F_OK) != 0) return "";
    size_t size;
    FileHandle fh = open_sized(path, "file", size);
    if (size > cap && limit > cap)
        throw IoError(path + " is " + std::to_string(size) + " bytes, more than the " + std::to_string(cap >> 20) +
                      " MiB train_prism reads of such a file; it is not one train_prism wrote: move it aside");
    std::string s(std::min(size, limit), '\0');
    s.resize(fread(&s[0], 1, s.size(), fh.get()));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

// The names in a directory ("." and ".." left out); empty when it cannot be read.
inline std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    return names;
}

// The whole of a regular file as text (util/io.h's checked read: a FIFO or a device is refused), at most `limit`
// bytes: a larger one is an error naming both sizes. `what` names it in errors ("tokenizer file").
inline std::string read_file_text(const std::string& path, const char* what, size_t limit = (size_t)1 << 40) {
    const std::vector<unsigned char> b = read_file_bytes(path, what, limit);
    return std::string(b.begin(), b.end());
}
