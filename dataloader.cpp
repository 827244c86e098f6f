// dataloader.cpp: the token shards and DataLoader (dataloader.h).
#include "dataloader.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include "run/stop_signal.h"
#include "util/io.h"

DataLoader::DataLoader(const std::string& glob, int B, int T, int rank, int world, bool shuffle, uint64_t seed,
                       int vocab)
    : B_(B), T_(T), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed) {
    if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world)
        throw std::runtime_error("data loader: bad shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                 " rank=" + std::to_string(rank) + " world=" + std::to_string(world));
    for (const std::string& p : glob_shards(glob)) shards_.push_back(read_shard_info(p));
    check_shard_sets(shards_);
    const auto t0 = std::chrono::steady_clock::now();
    // Rank r checks every world-th shard: together the ranks check every token once (their set-up agrees on
    // the verdict, train_prism.cu), rather than each reading all of a FineWeb-sized corpus.
    for (size_t i = (size_t)rank; i < shards_.size() && !interrupted_; i += (size_t)world) {
        validate_shard_tokens(shards_[i], vocab);
        interrupted_ = stop_requested();
    }
    validate_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    SplitMix64 h(0x5052534dull);  // fingerprint of the data: shard count and every shard's token count
    fingerprint_ = h.next() ^ shards_.size();
    for (const ShardInfo& s : shards_) fingerprint_ = SplitMix64(fingerprint_ ^ s.tokens).next();
    uint64_t groups = 0;
    for (const ShardInfo& s : shards_) groups += groups_in(s);
    if (groups == 0)
        throw std::runtime_error("shards " + glob + " hold " + std::to_string(tokens_total()) +
                                 " tokens, too few for one batch: a shard needs B*T*world+1 = " +
                                 std::to_string((uint64_t)B * T * world + 1) + " tokens" +
                                 (world > 1
                                      ? " with " + std::to_string(world) + " ranks; lower B or T, or use fewer ranks"
                                      : "; lower B or T"));
    batches_per_epoch_ = groups;
    sequence_.resize((size_t)T + 1);
    reset();
}

void write_shard(const std::string& path, const uint16_t* tokens, size_t n, bool sync, uint64_t set_id) {
    if (n > (size_t)INT32_MAX)
        throw std::runtime_error("shard " + path + ": " + std::to_string(n) +
                                 " tokens do not fit the int32 header count; use smaller shards");
    const std::string tmp = path + ".tmp." + std::to_string((long)getpid());
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot create " + tmp + ": " + strerror(errno) + "; check the output directory");
    int32_t header[SHARD_HEADER_INTS] = {};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    if (set_id) header[3] = SHARD_SET_TAG, memcpy(&header[4], &set_id, 8);
    bool ok = fwrite(header, sizeof(header), 1, f) == 1;
    ok = ok && (n == 0 || fwrite(tokens, sizeof(uint16_t), n, f) == n);
    ok = ok && fflush(f) == 0 && (!sync || fsync(fileno(f)) == 0);
    const int err = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = ok ? errno : err;
        const std::string why =
            std::string(strerror(e)) + (e == EFBIG ? " (over the file-size limit, ulimit -f?)" : "");
        unlink(tmp.c_str());
        throw std::runtime_error("cannot write shard " + path + ": " + why + "; check free disk space and permissions");
    }
}

void write_shard(const std::string& path, const std::vector<int>& tokens, bool sync, uint64_t set_id) {
    std::vector<uint16_t> t(tokens.size());
    for (size_t i = 0; i < tokens.size(); i++) {
        if (tokens[i] < 0 || tokens[i] > 65535)
            throw std::runtime_error("shard " + path + ": token " + std::to_string(tokens[i]) +
                                     " does not fit uint16; this format holds vocabularies up to 65536");
        t[i] = (uint16_t)tokens[i];
    }
    write_shard(path, t.data(), t.size(), sync, set_id);
}

ShardInfo read_shard_info(const std::string& path) {
    const std::string hint = "; re-run build/prepare_shards";
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        throw std::runtime_error("shard " + path + ": " + strerror(errno) + "; check the data path");
    if (S_ISDIR(st.st_mode))
        throw std::runtime_error("shard " + path + " is a directory, not a shard; pass the shard files, e.g. '" + path +
                                 "/*_train_*.bin'");
    if (!S_ISREG(st.st_mode))
        throw std::runtime_error("shard " + path + " is not a regular file; pass the shard files" + hint);
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("shard " + path + ": cannot open: " + strerror(errno));
    int32_t header[SHARD_HEADER_INTS];
    const bool got = fread(header, sizeof(header), 1, f) == 1;
    fclose(f);
    const uint64_t size = (uint64_t)st.st_size;
    if (!got)
        throw std::runtime_error("shard " + path + ": truncated, " + std::to_string(size) +
                                 " bytes is less than the 1024-byte header" + hint);
    if (header[0] != SHARD_MAGIC)
        throw std::runtime_error("shard " + path + ": bad magic " + std::to_string(header[0]) + " (expected " +
                                 std::to_string(SHARD_MAGIC) + "); not an llm.c token shard" + hint);
    if (header[1] != SHARD_VERSION)
        throw std::runtime_error("shard " + path + ": version " + std::to_string(header[1]) +
                                 " is not supported (expected 1, uint16 tokens)" + hint);
    if (header[2] < 0)
        throw std::runtime_error("shard " + path + ": negative token count " + std::to_string(header[2]) + hint);
    const uint64_t n = (uint64_t)header[2];
    const uint64_t have = (size - SHARD_HEADER_BYTES) / sizeof(uint16_t);
    if (size < shard_file_bytes(n))
        throw std::runtime_error("shard " + path + ": truncated, header says " + std::to_string(n) +
                                 " tokens but file has " + std::to_string(have) + hint);
    if (size > shard_file_bytes(n))
        throw std::runtime_error("shard " + path + ": header says " + std::to_string(n) + " tokens but file has " +
                                 std::to_string(size - SHARD_HEADER_BYTES) + " bytes of tokens (" +
                                 std::to_string(have) + " tokens)" + hint);
    uint64_t set_id = 0;
    if (header[3] == SHARD_SET_TAG) memcpy(&set_id, &header[4], 8);
    return {path, n, set_id, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, (uint64_t)st.st_ino};
}

std::string shard_set_prefix(const std::string& path) {
    for (const char* kind : {"_val_", "_train_"}) {
        const size_t at = path.rfind(kind);
        if (at == std::string::npos) continue;
        const std::string rest = path.substr(at + strlen(kind));
        if (rest.size() > 4 && rest.compare(rest.size() - 4, 4, ".bin") == 0 &&
            rest.find_first_not_of("0123456789") == rest.size() - 4)
            return path.substr(0, at);
    }
    return path;
}

void check_shard_sets(const std::vector<ShardInfo>& a, const std::vector<ShardInfo>& b) {
    std::map<std::string, const ShardInfo*> first;
    auto id = [](uint64_t x) {
        char s[40];
        snprintf(s, sizeof s, x ? "set %016llx" : "no set id", (unsigned long long)x);
        return std::string(s);
    };
    for (const std::vector<ShardInfo>* v : {&a, &b})
        for (const ShardInfo& s : *v) {
            const std::string prefix = shard_set_prefix(s.path);
            // A set prepare_shards wrote has its validation shard, renamed in last: without it (or with another set's)
            // the set was cut short, whatever part of it the globs name.
            if (s.set_id && prefix != s.path && !first.count(prefix)) {
                const std::string val = prefix + "_val_000000.bin";
                struct stat st;
                if (stat(val.c_str(), &st) != 0)
                    throw std::runtime_error(
                        "shard " + s.path + " (" + id(s.set_id) + ") has no " + val +
                        ": an interrupted "
                        "prepare_shards, or a set copied in part; run build/prepare_shards --overwrite -o " +
                        prefix + " again");
                const ShardInfo vi = read_shard_info(val);
                if (vi.set_id != s.set_id)
                    throw std::runtime_error(
                        "shards " + s.path + " (" + id(s.set_id) + ") and " + val + " (" + id(vi.set_id) +
                        ") were not written together: an interrupted prepare_shards --overwrite, or files "
                        "copied in from another set; run build/prepare_shards --overwrite -o " +
                        prefix + " again");
            }
            auto it = first.emplace(prefix, &s).first;
            if (it->second->set_id != s.set_id)
                throw std::runtime_error("shards " + it->second->path + " (" + id(it->second->set_id) + ") and " +
                                         s.path + " (" + id(s.set_id) +
                                         ") were not written together: an interrupted prepare_shards "
                                         "--overwrite, or files copied in from another set; run build/prepare_shards "
                                         "--overwrite -o " +
                                         prefix + " again");
        }
}

std::string shards_fingerprint(const std::vector<ShardInfo>& shards) {
    if (shards.empty()) return "";
    Checksum64 h;
    std::vector<unsigned char> buf(4096);
    for (const ShardInfo& s : shards) {
        const uint64_t head[2] = {s.set_id, s.tokens};
        h.update(head, sizeof head);
        const int fd = open(s.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            throw std::runtime_error("shard " + s.path + ": cannot open: " + strerror(errno) + "; check the data path");
        const uint64_t bytes = s.tokens * 2, n = std::min<uint64_t>(bytes, buf.size());
        for (const uint64_t at : {SHARD_HEADER_BYTES, SHARD_HEADER_BYTES + bytes - n}) {
            const ssize_t got = n ? pread(fd, buf.data(), (size_t)n, (off_t)at) : 0;
            if (got != (ssize_t)n) {
                close(fd);
                throw std::runtime_error("shard " + s.path +
                                         ": read failed; the file changed? re-run build/prepare_shards");
            }
            h.update(buf.data(), (size_t)n);
        }
        close(fd);
    }
    char b[20];
    snprintf(b, sizeof b, "%016llx", (unsigned long long)h.value());
    return b;
}

std::vector<std::string> glob_shards(const std::string& pattern) {
    glob_t g;
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> paths;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) paths.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) throw std::runtime_error("cannot read the shard list " + pattern);
    if (paths.empty()) {
        const size_t slash = pattern.rfind('/');
        const std::string dir = slash == std::string::npos ? "." : pattern.substr(0, slash);
        struct stat st;
        const bool dir_exists = dir.find_first_of("*?[") != std::string::npos || stat(dir.c_str(), &st) == 0;
        throw std::runtime_error("no shards match " + pattern +
                                 (dir_exists ? "" : " (directory " + dir + " does not exist)") +
                                 "; run data/get_default.sh or build/prepare_shards, or fix the path");
    }
    std::sort(paths.begin(), paths.end());
    return paths;
}

void validate_shard_tokens(const ShardInfo& s, int vocab) {
    if (s.tokens == 0 || vocab > 65535) return;  // every uint16 is below a vocabulary of 65536 or more
    const int fd = open(s.path.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("shard " + s.path + ": cannot open: " + strerror(errno));
    const uint64_t chunk = 1 << 20, chunks = (s.tokens + chunk - 1) / chunk, none = ~0ull;
    std::vector<uint64_t> first_bad(chunks, none);  // per chunk: the first bad token's index
    std::vector<uint16_t> bad_value(chunks, 0);
    std::vector<int> read_error(chunks, 0);  // errno of a failed read (EIO for an early end of file)
#pragma omp parallel
    {
        std::vector<uint16_t> buf(chunk);
#pragma omp for schedule(dynamic, 1)
        for (uint64_t c = 0; c < chunks; c++) {
            const uint64_t n = std::min(chunk, s.tokens - c * chunk);
            size_t got = 0;
            while (got < n * 2) {
                const ssize_t r =
                    pread(fd, (char*)buf.data() + got, n * 2 - got, (off_t)(shard_token_offset(c * chunk) + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) {
                    read_error[c] = r < 0 ? errno : EIO;
                    break;
                }
                got += (size_t)r;
            }
            if (read_error[c]) continue;
            uint16_t m = 0;
#pragma omp simd reduction(max : m)
            for (uint64_t i = 0; i < n; i++) m = std::max(m, buf[i]);
            if (m < vocab) continue;
            for (uint64_t i = 0; i < n; i++)
                if (buf[i] >= vocab) {
                    first_bad[c] = c * chunk + i, bad_value[c] = buf[i];
                    break;
                }
        }
    }
    close(fd);
    for (uint64_t c = 0; c < chunks; c++) {
        if (read_error[c])
            throw std::runtime_error("shard " + s.path + ": read failed: " + strerror(read_error[c]) +
                                     "; the file changed while it was being checked? re-run build/prepare_shards");
        if (first_bad[c] != none)
            throw std::runtime_error("shard " + s.path + ": token " + std::to_string(bad_value[c]) + " at position " +
                                     std::to_string(first_bad[c]) + " is outside the vocabulary (" +
                                     std::to_string(vocab) +
                                     "); the shard is corrupt or from another tokenizer; re-run build/prepare_shards");
    }
}

uint64_t loader_stream_key(uint64_t seed, uint64_t epoch, uint64_t which) {
    SplitMix64 a(seed);
    SplitMix64 b(a.next() ^ epoch);
    SplitMix64 c(b.next() ^ which);
    return c.next();
}

std::vector<uint32_t> loader_permutation(uint64_t n, uint64_t key) {
    std::vector<uint32_t> p(n);
    for (uint64_t i = 0; i < n; i++) p[i] = (uint32_t)i;
    SplitMix64 rng(key);
    for (uint64_t i = n; i > 1; i--) std::swap(p[i - 1], p[rng.below(i)]);
    return p;
}

void DataLoader::next_batch(int* inputs, int* targets) {
    if (interrupted_)
        throw std::runtime_error("data loader: the check of the shards' tokens was cut short by a stop signal");
    const uint64_t per_group = (uint64_t)B_ * world_;
    for (int b = 0; b < B_; b++) {
        const uint64_t w = group_pos_ * per_group + (uint64_t)rank_ * B_ + b;
        const uint64_t k = shuffle_ ? sequence_perm_[w] : w;
        read_tokens(k * T_, (size_t)T_ + 1, sequence_.data());
        for (int t = 0; t < T_; t++) {
            inputs[(size_t)b * T_ + t] = sequence_[t];
            targets[(size_t)b * T_ + t] = sequence_[t + 1];
        }
    }
    group_pos_++;
    if (group_pos_ >= groups_in(shards_[shard_order_[shard_pos_]])) {
        group_pos_ = 0;
        next_shard();
    }
}

void DataLoader::reset() {
    epoch_ = 0;
    shard_pos_ = 0;
    group_pos_ = 0;
    plan_epoch();
    enter_shard();
}

LoaderState DataLoader::state() const {
    LoaderState s;
    memset(&s, 0, sizeof(s));
    s.seed = seed_;
    s.epoch = epoch_;
    s.shard_pos = shard_pos_;
    s.group_pos = group_pos_;
    s.fingerprint = fingerprint_;
    s.B = (uint32_t)B_;
    s.T = (uint32_t)T_;
    s.world = (uint32_t)world_;
    s.shuffle = shuffle_ ? 1 : 0;
    return s;
}

void DataLoader::restore(const LoaderState& s) {
    if (s.T != (uint32_t)T_ || s.shuffle != (shuffle_ ? 1u : 0u) || s.seed != seed_ || s.B == 0 || s.world == 0)
        throw std::runtime_error("data position was saved with T=" + std::to_string(s.T) +
                                 " shuffle=" + std::to_string(s.shuffle) + " seed=" + std::to_string(s.seed) +
                                 "; resume with the same values");
    if (s.fingerprint != fingerprint_)
        throw std::runtime_error(
            "data position was saved on different shards (the token counts differ); "
            "resume on the same data");
    const uint64_t sequence = s.group_pos * s.B * s.world;  // sequences of the shard consumed by all ranks
    if (s.shard_pos >= shards_.size() || sequence >= sequences_in(shards_[order_at(s.epoch, s.shard_pos)]))
        throw std::runtime_error("data position (shard " + std::to_string(s.shard_pos) + ", group " +
                                 std::to_string(s.group_pos) + ") is outside the data; the state is corrupt");
    const uint64_t group = (uint64_t)B_ * world_;
    epoch_ = s.epoch;
    shard_pos_ = s.shard_pos;
    group_pos_ = (sequence + group - 1) / group;
    plan_epoch();
    if (group_pos_ >= groups_in(shards_[shard_order_[shard_pos_]])) {  // this shard has no whole group left
        group_pos_ = 0;
        next_shard();
    } else {
        enter_shard();
    }
}

void DataLoader::plan_epoch() {
    if (shuffle_) {
        shard_order_ = loader_permutation(shards_.size(), loader_stream_key(seed_, epoch_, ~0ull));
    } else {
        shard_order_.resize(shards_.size());
        for (size_t i = 0; i < shards_.size(); i++) shard_order_[i] = (uint32_t)i;
    }
}

void DataLoader::next_shard() {
    shard_pos_++;
    if (shard_pos_ >= shards_.size()) {
        shard_pos_ = 0;
        epoch_++;
        plan_epoch();
    }
    enter_shard();
}

void DataLoader::enter_shard() {
    while (groups_in(shards_[shard_order_[shard_pos_]]) == 0) {
        shard_pos_++;
        if (shard_pos_ >= shards_.size()) {
            shard_pos_ = 0;
            epoch_++;
            plan_epoch();
        }
    }
    const size_t idx = shard_order_[shard_pos_];
    const ShardInfo& s = shards_[idx];
    if (shuffle_) sequence_perm_ = loader_permutation(sequences_in(s), loader_stream_key(seed_, epoch_, idx));
    struct stat st;
    const bool same = fd_ >= 0 && fd_path_ == s.path && stat(s.path.c_str(), &st) == 0 && st.st_dev == fd_dev_ &&
                      st.st_ino == fd_ino_;
    if (same && (uint64_t)st.st_size != shard_file_bytes(s.tokens)) check_unchanged(s, st);  // cut or grown in place
    if (!same) {
        close_fd();
        fd_ = open(s.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd_ < 0)
            throw std::runtime_error("shard " + s.path + ": cannot open: " + strerror(errno) + "; check the data path");
        fd_path_ = s.path;
        if (fstat(fd_, &st) != 0) st = {};
        fd_dev_ = st.st_dev, fd_ino_ = st.st_ino;
        check_unchanged(s, st);
    }
}

void DataLoader::check_unchanged(const ShardInfo& s, const struct stat& st) const {
    int32_t h[SHARD_HEADER_INTS] = {};
    const bool got = S_ISREG(st.st_mode) && pread(fd_, h, sizeof h, 0) == (ssize_t)sizeof h;
    uint64_t id = 0;
    if (got && h[3] == SHARD_SET_TAG) memcpy(&id, &h[4], 8);
    const int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    const bool ok = got && h[0] == SHARD_MAGIC && h[1] == SHARD_VERSION && (uint64_t)(uint32_t)h[2] == s.tokens &&
                    (uint64_t)st.st_size == shard_file_bytes(s.tokens) && id == s.set_id &&
                    (s.set_id != 0 || (mtime == s.mtime_ns && (uint64_t)st.st_ino == s.inode));
    if (ok) return;
    auto set = [](uint64_t x) {
        char b[40];
        snprintf(b, sizeof b, x ? "set %016llx" : "no set id", (unsigned long long)x);
        return std::string(b);
    };
    const std::string now = !got ? "now unreadable or not a shard"
                                 : "now " + set(id) + ", " + std::to_string(h[2]) + " tokens" +
                                       (s.set_id == 0 && id == 0 ? ", modified" : "");
    throw std::runtime_error("shard " + s.path + " changed while the run used it (" + set(s.set_id) + ", " +
                             std::to_string(s.tokens) + " tokens at the start; " + now +
                             "): its set was replaced "
                             "(prepare_shards --overwrite?); stopping, the last checkpoint is kept: resume once the "
                             "data is what the run recorded, or with --allow-data-change to go on with the new data");
}

void DataLoader::read_tokens(uint64_t first, size_t n, uint16_t* out) {
    const ShardInfo& s = shards_[shard_order_[shard_pos_]];
    char* dst = (char*)out;
    size_t left = n * sizeof(uint16_t);
    off_t off = (off_t)shard_token_offset(first);
    while (left > 0) {
        const ssize_t got = pread(fd_, dst, left, off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            throw std::runtime_error("shard " + s.path + ": read failed at byte " + std::to_string((uint64_t)off) +
                                     ": " + (got == 0 ? std::string("unexpected end of file") : strerror(errno)) +
                                     "; the file changed while training? re-run build/prepare_shards");
        dst += got;
        left -= (size_t)got;
        off += got;
    }
}
