// dataloader.h: token shards in, (B, T) batches of inputs and next-token targets out.
//
// Shard format: llm.c's (so shards move freely between the two projects), with an optional set id; its bytes are
// docs/formats.md's "Token shards" (test/test_formats.cpp holds the page to write_shard below).
//
// How a batch is cut. A shard of N tokens holds W = (N - 1) / T sequences; sequence k is the T + 1 tokens
// [k*T, k*T + T] (neighbours share one token, so every token except the first is a target exactly once).
// inputs = the first T tokens of a sequence, targets = the last T. One optimizer micro-step of all ranks
// takes a *group* of B * world sequences from one shard; rank r gets sequences [r*B, r*B + B) of the group,
// so ranks never see the same sequence and together cover the group. A shard's last W mod (B * world)
// sequences are left out of that epoch (with shuffling, a different few every epoch).
//
// Shuffling (optional, seeded): each epoch visits the shards in a permuted order, and each shard's sequences
// in a permuted order. Permutations come from our own SplitMix64 stream keyed by (seed, epoch, shard), not
// from std:: distributions, so the order is the same on every compiler and platform. Because the streams
// are keyed rather than carried along, the whole position is a small POD (LoaderState): a checkpoint saves
// it, restore() rebuilds the permutation, and next_batch continues exactly as an uninterrupted loader.
// The position is global, not per rank: (epoch, shard, sequences of that shard's order consumed by all ranks
// together), independent of the seed-keyed order's owner. So a run saved by 8 ranks resumes on 4 (or with
// another B): the same shard, the same sequence order, continuing from the first whole group of B * world
// sequences at or after the saved sequence (at most one group's sequences are skipped; none when B * world is
// unchanged, where the continuation is exact).
//
// Checked again each time the loader enters a shard: that the file under its path is still the one checked at
// the start (the same set id and token count; for a shard without a set id, the same file and modification time), so
// that a set replaced under a running trainer (prepare_shards --overwrite) stops the run with one line when it
// reaches the new data, instead of training on a mixture of two sets. A file still open is read as it was.
// Checked once, when the loader opens the shards: every header and size, and every token of every shard
// below the vocabulary V (read in large blocks and scanned in parallel), so a bad token fails at the start of
// a run, not hours in when training reaches it; and that the shards of one set (one prefix, PREFIX_val_*
// and PREFIX_train_*) were written together: all with one set id, or all without (llm.c's), never a mixture
// (what an interrupted replacement of a set leaves). A stop signal (stop_signal.h) cuts the token check short;
// such a loader refuses to read (the trainer exits before it would).
//
// What it does not do: it never holds a whole shard in memory (each sequence is one pread at a 64-bit offset,
// so shards above 2 GiB work), never splits a sequence across shards, and is not thread-safe (one loader per
// rank / per purpose). Errors throw std::runtime_error with a one-line message naming the file.
// Its body is dataloader.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

static_assert(sizeof(off_t) == 8, "dataloader.h needs a 64-bit off_t (shards above 2 GiB)");

constexpr int32_t SHARD_MAGIC = 20240520;
constexpr int32_t SHARD_VERSION = 1;  // uint16 tokens (llm.c uses 2 for uint32 tokens; not supported)
constexpr int SHARD_HEADER_INTS = 256;
constexpr uint64_t SHARD_HEADER_BYTES = SHARD_HEADER_INTS * sizeof(int32_t);  // 1024
constexpr int GPT2_EOT = 50256;
constexpr int GPT2_VOCAB = 50257;
constexpr int32_t SHARD_SET_TAG = 0x54455350;  // "PSET": header words [4..5] hold the set id

// Byte offset of token `index` in a shard. All arithmetic is 64-bit: llm.c once computed this in int and
// broke every shard above 2 GiB (index > ~1.07e9 tokens).
inline uint64_t shard_token_offset(uint64_t index) { return SHARD_HEADER_BYTES + index * sizeof(uint16_t); }

// The file size a shard of `tokens` tokens must have.
inline uint64_t shard_file_bytes(uint64_t tokens) { return shard_token_offset(tokens); }

// ------------------------------------------------------------------------------------------------------
// Writing shards (used by data/prepare_shards.cpp and by the tests)

// Writes a complete shard atomically: to PATH.tmp.PID first, flushed (and fsync'ed unless sync is false),
// then renamed over PATH, so a crash never leaves a torn shard under the real name.
// set_id (not 0): the id of the set the shard belongs to, in header words [3..5] (see the top).
void write_shard(const std::string& path, const uint16_t* tokens, size_t n, bool sync = true, uint64_t set_id = 0);

void write_shard(const std::string& path, const std::vector<int>& tokens, bool sync = true, uint64_t set_id = 0);

// ------------------------------------------------------------------------------------------------------
// Reading shards

struct ShardInfo {
    std::string path;
    uint64_t tokens;       // N, from the (validated) header
    uint64_t set_id = 0;   // the set it was written with (0: none recorded, as llm.c writes them)
    int64_t mtime_ns = 0;  // its modification time and inode when read (what tells a replaced llm.c shard, which
    uint64_t inode = 0;    // has no set id)
};

// Reads and checks one shard's header and size; throws a one-line error naming the file otherwise.
ShardInfo read_shard_info(const std::string& path);

// The set a shard belongs to by its name: the path without the _val_NNNNNN.bin or _train_NNNNNN.bin that
// prepare_shards ends it with; a path of another form is a set of its own.
std::string shard_set_prefix(const std::string& path);

// The shards of one prefix (the training and the validation shards of a run together) must carry one set id,
// or none: a mixture is what a prepare_shards --overwrite cut short by a kill leaves, or files copied in.
void check_shard_sets(const std::vector<ShardInfo>& a, const std::vector<ShardInfo>& b = {});

// A fingerprint of a run's shards (16 hex digits; "" for none), what OUT/run.json records so that a resume
// onto other data is noticed: each shard's set id, token count and its first and last 4 KiB of tokens, in order
// (not its path: a data directory may move). Cheap: two small reads per shard.
std::string shards_fingerprint(const std::vector<ShardInfo>& shards);

// The shard files a glob pattern names, in byte order of their paths (so _val_000000 < _train_000001 <
// ...). A plain path is a pattern that matches itself. An empty match is an error.
std::vector<std::string> glob_shards(const std::string& pattern);

// Checks that every token of a shard is below `vocab`; throws a one-line error naming the first one that is
// not. 1M-token chunks are read with pread and scanned in parallel (OpenMP), each a vectorised max (pread
// into a per-thread buffer beats mmap's page faults by ~1.5x); only a chunk whose max is too large is scanned
// again for the position.
void validate_shard_tokens(const ShardInfo& s, int vocab);

// ------------------------------------------------------------------------------------------------------
// The deterministic random stream: SplitMix64 (Steele, Lea, Flood 2014). Tiny, fast, and its output is
// fixed by its definition, unlike std::uniform_int_distribution, whose algorithm differs between
// standard libraries.

struct SplitMix64 {
    uint64_t s;
    explicit SplitMix64(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, n) without modulo bias: reject the few draws below 2^64 mod n.
    uint64_t below(uint64_t n) {
        const uint64_t threshold = (0 - n) % n;
        for (;;) {
            const uint64_t r = next();
            if (r >= threshold) return r % n;
        }
    }
};

// Stream key for (seed, epoch, which): each epoch and each shard gets an independent stream.
uint64_t loader_stream_key(uint64_t seed, uint64_t epoch, uint64_t which);

// Fisher-Yates: a uniformly random permutation of 0..n-1.
std::vector<uint32_t> loader_permutation(uint64_t n, uint64_t key);

// ------------------------------------------------------------------------------------------------------
// The loader

// The exact position of a loader: what the next next_batch call returns is a function of this and the
// shards. Plain data, so a checkpoint writes it with one fwrite. The shape fields are checked on restore.
struct LoaderState {
    uint64_t seed;         // shuffle seed (the whole RNG state: streams are keyed by seed, epoch, shard)
    uint64_t epoch;        // completed passes over the data
    uint64_t shard_pos;    // position in this epoch's shard order
    uint64_t group_pos;    // next group of B * world sequences within that shard (sequence group_pos * B * world)
    uint64_t fingerprint;  // hash of the shard token counts, so a state is not restored onto other data
    uint32_t B, T, world;  // the batch shape it was saved under (T must match on restore; B, world may differ)
    uint32_t shuffle;      // 1 when shuffling
};
static_assert(std::is_trivially_copyable<LoaderState>::value, "LoaderState must stay plain data");
static_assert(sizeof(LoaderState) == 56, "LoaderState has a fixed on-disk size");

class DataLoader {
  public:
    // glob: shard pattern (e.g. "data/default/default_train_*.bin"); B x T batches; this is rank `rank` of
    // `world`; vocab: token ids must be below it (checked here, once: every shard with one rank, every world-th
    // shard from rank's with several).
    DataLoader(const std::string& glob, int B, int T, int rank, int world, bool shuffle, uint64_t seed,
               int vocab = GPT2_VOCAB);
    ~DataLoader() { close_fd(); }
    DataLoader(const DataLoader&) = delete;
    DataLoader& operator=(const DataLoader&) = delete;

    // inputs, targets: (B, T) each. Advances by one group; wraps into the next epoch at the end.
    void next_batch(int* inputs, int* targets);

    // Back to the very start (epoch 0, first shard, first group). Validation loaders call this before every
    // evaluation so they read the same fixed prefix each time.
    void reset();

    LoaderState state() const;

    // Continues from a saved position. T, the seed, shuffling and the data must match; B and the rank count may
    // differ (see the top: the position is rounded up to this loader's next whole group).
    void restore(const LoaderState& s);

    size_t tokens_total() const {
        size_t n = 0;
        for (const ShardInfo& s : shards_) n += s.tokens;
        return n;
    }
    size_t num_shards() const { return shards_.size(); }
    size_t batches_per_epoch() const { return batches_per_epoch_; }  // next_batch calls in one epoch
    uint64_t epoch() const { return epoch_; }
    const std::vector<ShardInfo>& shards() const { return shards_; }
    double validate_seconds() const { return validate_seconds_; }  // the up-front token check took this long

  private:
    uint64_t sequences_in(const ShardInfo& s) const { return s.tokens == 0 ? 0 : (s.tokens - 1) / T_; }
    uint64_t groups_in(const ShardInfo& s) const { return sequences_in(s) / ((uint64_t)B_ * world_); }

    // Shard index visited at position pos of epoch e.
    size_t order_at(uint64_t e, uint64_t pos) const {
        if (!shuffle_) return (size_t)pos;
        return loader_permutation(shards_.size(), loader_stream_key(seed_, e, ~0ull))[pos];
    }

    void plan_epoch();

    // The first group of the next shard in this epoch's order (wrapping into the next epoch).
    void next_shard();

    // Opens the shard at shard_pos_, skipping shards too small for a group (at least one shard is not).
    void enter_shard();

    // The shard just opened (fd_, st) is the one the loader checked at its start (see the top).
    void check_unchanged(const ShardInfo& s, const struct stat& st) const;

    void close_fd() {
        if (fd_ >= 0) close(fd_);
        fd_ = -1;
        fd_path_.clear();
    }

    // n tokens starting at token index `first` of the current shard (their range was checked up front).
    void read_tokens(uint64_t first, size_t n, uint16_t* out);

    int B_, T_, rank_, world_;
    bool shuffle_;
    uint64_t seed_;
    std::vector<ShardInfo> shards_;
    uint64_t fingerprint_ = 0;
    size_t batches_per_epoch_ = 0;
    double validate_seconds_ = 0;
    bool interrupted_ = false;  // a stop signal cut the token check short
    // position
    uint64_t epoch_ = 0, shard_pos_ = 0, group_pos_ = 0;
    // derived from the position
    std::vector<uint32_t> shard_order_;    // shard index per position in this epoch
    std::vector<uint32_t> sequence_perm_;  // sequence order in the current shard (when shuffling)
    std::vector<uint16_t> sequence_;       // (T + 1) scratch
    int fd_ = -1;
    dev_t fd_dev_ = 0;  // the open shard's identity: a file renamed over its path is another one
    ino_t fd_ino_ = 0;
    std::string fd_path_;
};
