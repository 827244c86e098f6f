// checkpoint.h: model.bin (the config and the fp32 parameters) and the per-rank optimizer state file, written
// so that a crash never leaves a torn checkpoint, and read back with every field checked.
//
// model.bin, little-endian:
//   bytes [0, 1024)       256 x int32 header
//       [0] magic 0x4D535250 ("PRSM")   [1] version 1   [2] d   [3] V   [4] T   [5] L   [6] h_base
//       [7] norm (0 layernorm, 1 rmsnorm)   [8] tied   [9] mup_attn   [10] init_width_scale   [11] mlp_multiple
//       [12] dtype of the parameters (0 = fp32)   [13] reserved 0
//       [14..15] parameter count P as int64   [16..17] mlp_ratio as float64   [18..19] rope_theta as float64
//       [20..21] norm_eps as float64   [22..23] training step as int64   [24..25] payload checksum as uint64
//       the rest zero
//   bytes [1024, 1024 + 8L)            L x {int32 width w_l, int32 heads h_l}
//   bytes [1024 + 8L, 1024 + 8L + 4P)  P x fp32 parameters in schedule.h's param_layout order (V rows, never Vp)
// The file size must be exactly 1024 + 8L + 4P; the checksum covers the layer table and the parameters.
//
// state file (state_rank<r>.bin), little-endian:
//   bytes [0, 1024)  256 x int32 header: [0] magic 0x5453524D ("MRST")  [1] version 1  [2..3] step (int64)
//       [4..5] n, the moments in this file (P for a single process)   [6..7] tokens seen (int64)
//       [8..9] RNG state (uint64)   [10] size in bytes of the data-loader position that follows
//       [11..12] payload checksum (uint64)
//       data parallelism, all zero for a single process (whose file holds the moments of every parameter):
//       [13] rank that wrote the file   [14] world: the number of state files of the checkpoint
//       [16..17] first parameter whose moments this file holds (int64)   [18..19] the model's P (int64)
//   then the data-loader position (a POD, see dataloader.h), then n x fp32 AdamW m, then n x fp32 AdamW v.
//   The files of a checkpoint hold consecutive ranges that together cover [0, P) (run_dir.h reads them into
//   any number of ranks).
//
// Atomic writes: every file is written to NAME.tmp, flushed, fsync'd and renamed over NAME, so a reader sees
// the old file or the new one, never a mix (io.h's write_atomically; the checksum and the 64-bit header fields
// are io.h's too). Errors are CheckpointErrors with one line naming the file, or io.h's IoError when the file
// cannot be opened, read or written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "io.h"
#include "schedule.h"

struct CheckpointError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

static const int32_t kModelMagic = 0x4D535250;
static const int32_t kStateMagic = 0x5453524D;
static const int32_t kCheckpointVersion = 1;

inline void save_model(const std::string& path, const ModelConfig& c, const float* params, size_t P, int64_t step) {
    int32_t h[256] = {0};
    h[0] = kModelMagic;
    h[1] = kCheckpointVersion;
    h[2] = c.d, h[3] = c.V, h[4] = c.T, h[5] = c.L(), h[6] = c.h_base;
    h[7] = (int)c.norm, h[8] = c.tied, h[9] = c.mup_attn, h[10] = c.init_width_scale, h[11] = c.mlp_multiple;
    h[12] = 0;
    put64(h, 14, (int64_t)P);
    putf64(h, 16, c.mlp_ratio);
    putf64(h, 18, c.rope_theta);
    putf64(h, 20, c.norm_eps);
    put64(h, 22, step);
    std::vector<int32_t> table;
    for (auto& s : c.layers) table.push_back(s.width), table.push_back(s.heads);
    uint64_t sum = checksum64(table.data(), table.size() * 4);
    sum = checksum64(params, P * 4, sum);
    put64(h, 24, (int64_t)sum);
    write_atomically(path, {{h, sizeof h}, {table.data(), table.size() * 4}, {params, P * 4}});
}

struct LoadedModel {
    ModelConfig cfg;
    std::vector<float> params;
    int64_t step = 0;
};

// Reads the header and layer table, checks them and the file size, then reads the parameters straight into
// their vector (a multi-GB checkpoint is never held twice in memory).
inline LoadedModel load_model(const std::string& path) {
    auto bad = [&](const std::string& why) {
        return CheckpointError("checkpoint " + path + ": " + why);
    };
    size_t size;
    FileHandle fh = open_sized(path, "checkpoint", size);
    FILE* f = fh.get();
    if (size < 1024) throw bad("truncated (" + std::to_string(size) + " bytes, header needs 1024)");
    int32_t h[256];
    if (fread(h, sizeof h, 1, f) != 1) throw bad("error reading the header");
    if (h[0] != kModelMagic) throw bad("not a Prism model file (bad magic); pass a model.bin written by train_prism");
    if (h[1] != kCheckpointVersion)
        throw bad("version " + std::to_string(h[1]) + ", this build reads version " + std::to_string(kCheckpointVersion));
    if (h[12] != 0) throw bad("unknown parameter dtype " + std::to_string(h[12]));
    int L = h[5];
    if (L <= 0 || L > 10000) throw bad("corrupt header (L = " + std::to_string(L) + ")");
    if (size < 1024 + 8 * (size_t)L) throw bad("truncated inside the layer table");
    std::vector<int32_t> table(2 * (size_t)L);
    if (fread(table.data(), 8, (size_t)L, f) != (size_t)L) throw bad("error reading the layer table");
    LoadedModel m;
    ModelConfig& c = m.cfg;
    c.d = h[2], c.V = h[3], c.T = h[4], c.h_base = h[6];
    if (h[7] != 0 && h[7] != 1) throw bad("corrupt header (norm = " + std::to_string(h[7]) + ")");
    c.norm = (NormType)h[7];
    c.tied = h[8], c.mup_attn = h[9], c.init_width_scale = h[10], c.mlp_multiple = h[11];
    c.mlp_ratio = getf64(h, 16), c.rope_theta = getf64(h, 18), c.norm_eps = getf64(h, 20);
    m.step = get64(h, 22);
    for (int l = 0; l < L; l++) c.layers.push_back({table[2 * l], table[2 * l + 1]});
    try {
        validate_config(c);
    } catch (const ConfigError& e) {
        throw bad(std::string("corrupt config: ") + e.what());
    }
    if (!(c.mlp_ratio > 0 && c.mlp_ratio < 1000) || c.mlp_multiple <= 0) throw bad("corrupt header (MLP rule)");
    size_t P = param_layout(c).total;
    if ((int64_t)P != get64(h, 14)) throw bad("parameter count in the header does not match its config");
    size_t want = 1024 + 8 * (size_t)L + 4 * P;
    if (size != want)
        throw bad((size < want ? "truncated: " : "trailing bytes: ") + std::to_string(size) + " bytes, expected " +
                  std::to_string(want));
    m.params.resize(P);
    if (fread(m.params.data(), 4, P, f) != P) throw bad("error reading the parameters");
    uint64_t sum = checksum64(table.data(), 8 * (size_t)L);
    sum = checksum64(m.params.data(), 4 * P, sum);
    if ((int64_t)sum != get64(h, 24)) throw bad("checksum mismatch: the file is corrupt");
    return m;
}

// Everything besides the parameters that a bit-identical resume needs.
struct TrainState {
    int64_t step = 0;         // optimizer steps done
    int64_t tokens = 0;       // training tokens seen (all ranks)
    uint64_t rng = 0;         // sampling RNG state
    std::vector<unsigned char> loader;  // the data loader's position, as raw POD bytes
    std::vector<float> m, v;  // AdamW moments, n each
    // Data parallelism (header words 13..19): zero for a single process, whose m and v cover every parameter.
    int32_t rank = 0, world = 0;
    int64_t first_param = 0, model_params = 0;
};

inline void save_state(const std::string& path, const TrainState& s) {
    int32_t h[256] = {0};
    h[0] = kStateMagic;
    h[1] = kCheckpointVersion;
    put64(h, 2, s.step);
    put64(h, 4, (int64_t)s.m.size());
    put64(h, 6, s.tokens);
    put64(h, 8, (int64_t)s.rng);
    h[10] = (int32_t)s.loader.size();
    h[13] = s.rank, h[14] = s.world;
    put64(h, 16, s.first_param);
    put64(h, 18, s.model_params);
    uint64_t sum = checksum64(s.loader.data(), s.loader.size());
    sum = checksum64(s.m.data(), s.m.size() * 4, sum);
    sum = checksum64(s.v.data(), s.v.size() * 4, sum);
    put64(h, 11, (int64_t)sum);
    write_atomically(path, {{h, sizeof h},
                            {s.loader.data(), s.loader.size()},
                            {s.m.data(), s.m.size() * 4},
                            {s.v.data(), s.v.size() * 4}});
}

// The moments a state file holds, from its header alone: [first, first + n) of the model's P parameters, so
// that a rank reads only the files it needs. A single process's file (world 0) holds [0, n).
struct StateRange {
    int64_t step = 0, first = 0, n = 0, P = 0;
    int32_t rank = 0, world = 0;
};
inline StateRange load_state_range(const std::string& path) {
    auto bad = [&](const std::string& why) { return CheckpointError("optimizer state " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "optimizer state", size);
    int32_t h[256];
    if (size < 1024 || fread(h, sizeof h, 1, fh.get()) != 1) throw bad("truncated");
    if (h[0] != kStateMagic) throw bad("bad magic; pass the state file written next to model.bin");
    if (h[1] != kCheckpointVersion) throw bad("unsupported version " + std::to_string(h[1]));
    StateRange r;
    r.step = get64(h, 2), r.n = get64(h, 4), r.rank = h[13], r.world = h[14], r.first = get64(h, 16), r.P = get64(h, 18);
    if (r.world == 0 ? (r.rank != 0 || r.first != 0 || r.P != 0)
                     : (r.world < 0 || r.rank < 0 || r.rank >= r.world || r.n < 0 || r.first < 0 || r.n > r.P ||
                        r.first > r.P - r.n))
        throw bad("corrupt header: rank " + std::to_string(r.rank) + " of world " + std::to_string(r.world) +
                  ", moments of parameters [" + std::to_string(r.first) + ", +" + std::to_string(r.n) + ") of " +
                  std::to_string(r.P));
    if (r.world == 0) r.P = r.n;
    return r;
}

// Reads and checks the header (the file must hold the moments of P parameters), then the loader position and
// the moments straight into their vectors.
inline TrainState load_state(const std::string& path, size_t P) {
    auto bad = [&](const std::string& why) { return CheckpointError("optimizer state " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "optimizer state", size);
    FILE* f = fh.get();
    if (size < 1024) throw bad("truncated");
    int32_t h[256];
    if (fread(h, sizeof h, 1, f) != 1) throw bad("error reading the header");
    if (h[0] != kStateMagic) throw bad("bad magic; pass the state file written next to model.bin");
    if (h[1] != kCheckpointVersion) throw bad("unsupported version " + std::to_string(h[1]));
    if (get64(h, 4) != (int64_t)P)
        throw bad("holds the moments of " + std::to_string(get64(h, 4)) + " parameters but " + std::to_string(P) +
                  " were expected; it belongs to a different model");
    size_t lsz = (size_t)h[10];
    size_t want = 1024 + lsz + 8 * P;
    if (h[10] < 0 || size != want)
        throw bad("size " + std::to_string(size) + " bytes, expected " + std::to_string(want) + " (truncated?)");
    TrainState s;
    s.step = get64(h, 2);
    s.tokens = get64(h, 6);
    s.rng = (uint64_t)get64(h, 8);
    s.rank = h[13], s.world = h[14], s.first_param = get64(h, 16), s.model_params = get64(h, 18);
    s.loader.resize(lsz);
    s.m.resize(P);
    s.v.resize(P);
    if (fread(s.loader.data(), 1, lsz, f) != lsz || fread(s.m.data(), 4, P, f) != P || fread(s.v.data(), 4, P, f) != P)
        throw bad("error reading the file");
    uint64_t sum = checksum64(s.loader.data(), lsz);  // chained piece by piece, exactly as save_state hashed them
    sum = checksum64(s.m.data(), 4 * P, sum);
    sum = checksum64(s.v.data(), 4 * P, sum);
    if ((int64_t)sum != get64(h, 11)) throw bad("checksum mismatch: the file is corrupt");
    return s;
}
