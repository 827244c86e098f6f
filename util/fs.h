// util/fs.h: the file-system helpers every binary shares: is a path a directory, mkdir -p, a small text file
// read whole or line by line (for_each_line: any size in bounded memory), a directory's names, whether two paths are one file (same_file), and the one output rule
// (check_output_path: no output replaces an input). Errors are one line (util/errors.h, util/io.h's checked reads).
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.h"
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
                throw ConfigError(errno == EEXIST
                                      ? "cannot create directory " + printable(path) + ": " + printable(cur) +
                                            " exists and is not a directory; move it aside, or give "
                                            "a path that does not pass through it"
                                      : "cannot create directory " + printable(cur) + ": " + strerror(errno));
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

// A path as the file system resolves it: realpath when it exists, else its parent's realpath and its last name (a
// file still to be written: "e.json", "./e.json" and "$PWD/e.json" are one), else the path as given.
inline std::string resolved_path(const std::string& path) {
    char buf[PATH_MAX];
    if (realpath(path.c_str(), buf)) return buf;
    const size_t slash = path.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (!realpath(parent.c_str(), buf)) return path;
    return std::string(buf) + (std::string(buf) == "/" ? "" : "/") + name;
}

// Whether two paths name one file, for the check that two outputs of one command (or an output and an input)
// differ: the same device and inode when both exist (any spelling, a link, a hard link), else the same
// resolved_path (a file still to be written). Never the strings as given.
inline bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    const bool ea = stat(a.c_str(), &sa) == 0, eb = stat(b.c_str(), &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return ea == eb && resolved_path(a) == resolved_path(b);
}

// Reads a regular file (io.h's checked open: a FIFO or a device is refused) line by line in 64 KiB pieces, so
// that a file of any size costs at most two lines of memory: each line (without its '\n') goes to
// fn(line, number, overlong, last), number from 1, last for the file's final one (nothing but its newline after
// it). A line longer than max_line bytes is not kept: fn gets it empty with overlong set. Returns the file's size;
// a read error is an IoError naming the file.
constexpr size_t kMaxLineBytes = (size_t)1 << 20;  // longer than any line the project's JSON Lines files hold
inline size_t for_each_line(const std::string& path, const char* what,
                            const std::function<void(const std::string&, long, bool, bool)>& fn,
                            size_t max_line = kMaxLineBytes) {
    size_t size;
    FileHandle fh = open_sized(path, what, size);
    std::string line, held;  // held: the line before, given to fn once it is known whether it is the last
    bool overlong = false, held_overlong = false, holding = false, open_line = false;
    long number = 0;
    size_t total = 0;
    auto end_line = [&] {  // the line in `line` is complete: give the held one, hold this one
        if (holding) fn(held, number, held_overlong, false);
        held.swap(line), held_overlong = overlong, holding = true, number++;
        line.clear(), overlong = false, open_line = false;
    };
    std::vector<char> buf((size_t)1 << 16);
    for (size_t got; (got = fread(buf.data(), 1, buf.size(), fh.get())) > 0;) {
        total += got;
        for (size_t a = 0; a < got;) {
            const char* nl = (const char*)memchr(buf.data() + a, '\n', got - a);
            const size_t b = nl ? (size_t)(nl - buf.data()) : got;
            if (!overlong && line.size() + (b - a) <= max_line) line.append(buf.data() + a, b - a);
            else overlong = true, line.clear();
            open_line = true;
            if (nl) end_line();
            a = b + 1;
        }
    }
    if (ferror(fh.get())) throw IoError("error reading " + path + ": " + strerror(errno));
    if (open_line) end_line();
    if (holding) fn(held, number, held_overlong, true);
    return total;
}

// A path a command reads, for check_output_path: one file, or (`tree`) a directory and everything under it (a
// checkpoint directory). `what` names it in the message ("the model", "a shard").
struct ReadPath {
    std::string path, what;
    bool tree = false;
};

// The identities (device, inode) of `path` (when it exists, through links) and of every directory above where
// it resolves to (from the nearest one that exists), up to the root: the same file or directory under any name
// (./x, a link, a hard link).
inline std::vector<std::pair<dev_t, ino_t>> path_and_parents(const std::string& path) {
    std::vector<std::pair<dev_t, ino_t>> ids;
    struct stat st;
    if (stat(path.c_str(), &st) == 0) ids.push_back({st.st_dev, st.st_ino});
    auto parent_of = [](const std::string& p) {
        const size_t slash = p.find_last_of('/');
        return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : p.substr(0, slash);
    };
    char buf[PATH_MAX];
    std::string parent = parent_of(path);  // the nearest directory above that exists (mkdir -p would make the rest)
    while (!realpath(parent.c_str(), buf)) {
        if (parent == "/" || parent == ".") return ids;
        parent = parent_of(parent);
    }
    for (std::string d = buf;;) {
        if (stat(d.c_str(), &st) == 0) ids.push_back({st.st_dev, st.st_ino});
        if (d == "/" || d.empty()) break;
        const size_t s = d.find_last_of('/');
        d = s == 0 || s == std::string::npos ? "/" : d.substr(0, s);
    }
    return ids;
}

// The one output rule of every tool, called before anything is written (and before the work): `out`, given as
// `flag`, must not be one of the paths the command reads (the same file under any name), nor lie inside one
// read as a tree (a checkpoint directory); an output directory (`out_dir`: the command writes files into it)
// must not hold one of them; and no output is the file-system root (the message's example, runs/NAME for a
// directory and ./NAME otherwise, is a path the command takes). Otherwise a one-line ConfigError; --overwrite
// never makes an input writable.
inline void check_output_path(const std::string& out, const std::string& flag, const std::vector<ReadPath>& inputs,
                              bool out_dir = false) {
    if (out.empty()) return;
    char real[PATH_MAX];
    if (realpath(out.c_str(), real) && std::string(real) == "/")
        throw ConfigError(flag + " " + printable(out) + " is the file-system root; pass " +
                          (out_dir ? "a directory of its own (e.g. runs/NAME)" : "a path of its own (e.g. ./NAME)"));
    const std::vector<std::pair<dev_t, ino_t>> up = path_and_parents(out);
    struct stat ost, ist;
    const bool exists = stat(out.c_str(), &ost) == 0;
    for (const ReadPath& in : inputs) {
        if (in.path.empty() || stat(in.path.c_str(), &ist) != 0) continue;
        const std::pair<dev_t, ino_t> id{ist.st_dev, ist.st_ino};
        std::string how;
        if (exists && ost.st_dev == ist.st_dev && ost.st_ino == ist.st_ino) how = "is ";
        else if (in.tree && std::find(up.begin(), up.end(), id) != up.end()) how = "lies inside ";
        else if (out_dir && exists && S_ISDIR(ost.st_mode)) {
            const std::vector<std::pair<dev_t, ino_t>> in_up = path_and_parents(in.path);
            if (std::find(in_up.begin() + 1, in_up.end(), std::make_pair(ost.st_dev, ost.st_ino)) != in_up.end())
                how = "holds ";
        }
        if (!how.empty())
            throw ConfigError(flag + " " + printable(out) + " " + how + in.what +
                              (in.path == out ? "" : " " + printable(in.path)) +
                              ", which this command reads; write to another path (--overwrite never replaces an "
                              "input)");
    }
}
