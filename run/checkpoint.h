// run/checkpoint.h: model.bin (the config and the fp32 parameters) and the per-rank optimizer state file, written
// so that a crash never leaves a torn checkpoint, and read back with every header field range-checked and
// every byte of the file, header included, covered by the checksum.
//
// model.bin (docs/formats.md has its every byte): a 1024-byte header of int32 words (the config, the parameter
// count, the step, the checksum, the run id), the layer table, then the fp32 parameters in model_config.h's
// param_layout order. Version 5 names its columns: header word 28 holds their count C, words 32 + 4k.. the name of
// column k (16 bytes, zero-padded; model/layer_columns.h's names), and the table is L rows of C int32 words, each
// column's default stored as 0. A reader takes the columns it knows by name; a column it does not know is
// accepted when every word is 0 (its default) and otherwise refused, naming it. Versions 2 to 4 have fixed
// tables: {width, heads} (2, 3), {width, heads, kv_heads, hidden, window, flags (bit 0 no attention, bit 1 no
// MLP)} (4). Every header field and table word is range-checked (the columns' bounds), then validate_config, then
// the size, the checksum (util/io.h's checksum64 of the whole file, its own 8 bytes read as zero), and that every
// parameter is finite.
//
// state file (state_rank<r>.bin), little-endian, version 3:
//   bytes [0, 1024)  256 x int32 header
//       [0] magic 0x5453524D ("MRST")   [1] version 3   [2..3] step (int64)
//       [4..5] n, the length of each moment vector in this file (int64; P for a single process)
//       [6..7] training tokens seen, all ranks (int64)   [8..9] sampling RNG state (uint64)
//       [10] S, bytes of the data-loader position that follows (at most 4096)   [11..12] checksum (uint64)
//       data parallelism, all zero for a single process (whose file holds the moments of every parameter):
//       [13] rank that wrote the file   [14] world size   [15] reserved 0
//       [16..17] index of the first parameter whose moments this file holds (int64)
//       [18..19] parameter count P of the whole model (int64)   (with world > 0: rank < world and
//       first + n <= P)
//       [20..21] run id (uint64, not 0; equal to model.bin's)   [22..23] global batch, tokens per optimizer
//       step of all ranks (int64, >= 0; 0: not recorded), so that a resume can tell a change of batch
//       [24..255] zero
//   then S bytes of data-loader position (a POD, see dataloader.h), then n x fp32 AdamW m, then n x fp32 v.
// The checksum covers the whole file in the same way as model.bin's. The state files of one checkpoint written by
// several ranks (run/run_dir.h) hold consecutive ranges that together cover [0, P); load_state_range reads a file's
// range from its header alone, so that a rank reads only the files it needs. The moments must be finite (and v
// >= 0).
//
// Every file of one checkpoint names the run (a random id drawn when the run started, kept across resumes) and
// the step; run_dir.h refuses a checkpoint whose files disagree (a state file copied from another run).
// Version 2 files are version 3 without the run id and batch words (they read as 0: unknown; a checkpoint
// mixing 0 and an id is refused too). Version 1 files (their checksum left the header out, so a changed header
// field that stays in range, such as a flipped attention-scale flag, cannot be detected) are refused. model.bin
// is written as version 5, the state file as version 3.
//
// Atomic writes: every file is written to NAME.tmp, flushed, fsync'd and renamed over NAME, so a reader sees
// the old file or the new one, never a mix (util/io.h's write_atomically; the checksum and the 64-bit header fields
// are util/io.h's too). Errors are CheckpointErrors with one line naming the file, or an IoError (util/errors.h) from
// util/io.h when the file cannot be opened, read or written.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/layer_columns.h"
#include "util/errors.h"
#include "model/spec.h"
#include "util/io.h"

static const int32_t kModelMagic = 0x4D535250;
static const int32_t kStateMagic = 0x5453524D;
static const int32_t kCheckpointVersion = 3;  // the state file's, written; version 2 is still read, 1 refused
static const int32_t kModelVersion = 5;       // model.bin's, written; versions 2 to 4 are still read
static const int kMaxLayerColumns = 56;       // model.bin's header words 32..255 hold 16-byte column names

// The index of the first value that is NaN or infinite, n when all are finite.
inline size_t first_nonfinite(const float* x, size_t n) {
    size_t bad = n;
#pragma omp parallel for reduction(min : bad)
    for (size_t i = 0; i < n; i++)
        if (!std::isfinite(x[i]) && i < bad) bad = i;
    return bad;
}

// Range checks of header words. `bad` builds the error naming the file.
template <class Bad> int32_t header_int(const int32_t* h, int at, const char* name, long lo, long hi, Bad bad) {
    if (h[at] < lo || h[at] > hi)
        throw bad("corrupt header: " + std::string(name) + " = " + std::to_string(h[at]) + " (word " +
                  std::to_string(at) + "), must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return h[at];
}
template <class Bad> double header_double(const int32_t* h, int at, const char* name, double lo, double hi, Bad bad) {
    double v = getf64(h, at);
    if (!(v >= lo && v <= hi)) {  // false for NaN too
        char b[160];
        snprintf(b, sizeof b, "corrupt header: %s = %g (words %d..%d), must lie in [%g, %g]", name, v, at, at + 1, lo,
                 hi);
        throw bad(b);
    }
    return v;
}

// A version 2 and 3 checksum as it starts: the 1024-byte header h hashed with its checksum field (the int64 at word
// `at`) zero, as it was when the file was written. The reader then adds the rest of the file.
inline Checksum64 header_checksum(const int32_t* h, int at) {
    int32_t z[256];
    memcpy(z, h, sizeof z);
    put64(z, at, 0);
    Checksum64 c;
    c.update(z, sizeof z);
    return c;
}

// The version word of a model.bin or state file: 2 up to `newest` (4 for model.bin, 3 for a state file) read, 1
// refused (see the top), anything else unknown.
template <class Bad> int checkpoint_version(const int32_t* h, Bad bad, int newest = kCheckpointVersion) {
    const std::string known = "versions 2 to " + std::to_string(newest);
    if (h[1] == 1)
        throw bad(
            "version 1, whose checksum does not cover its header (a changed field could not be detected); this "
            "build reads " +
            known + ": resume it once with an older train_prism, which saves the next version");
    if (h[1] < 2 || h[1] > newest) throw bad("version " + std::to_string(h[1]) + ", this build reads " + known);
    return h[1];
}

// Words [from, to) must be zero.
template <class Bad> void header_zeros(const int32_t* h, int from, Bad bad, int to = 256) {
    for (int i = from; i < to; i++)
        if (h[i] != 0)
            throw bad("corrupt header: word " + std::to_string(i) + " is " + std::to_string(h[i]) + ", must be 0");
}

// A model.bin's layer table as read: its column names in the file's order and L rows of their words.
struct LayerTable {
    std::vector<std::string> names;
    std::vector<int32_t> words;  // L x names.size(), as in the file
};

inline void save_model(const std::string& path, const ModelConfig& c, const float* params, size_t P, int64_t step,
                       uint64_t run_id = 0) {
    int32_t h[256] = {0};
    h[0] = kModelMagic;
    h[1] = kModelVersion;
    h[5] = c.L();
    for (const ModelScalar& s : model_scalars()) {
        if (s.is_double) putf64(h, s.word, s.get(c));
        else h[s.word] = (int32_t)s.get(c);
    }
    put64(h, 14, (int64_t)P);
    put64(h, 22, step);
    put64(h, 26, (int64_t)(run_id ? run_id : random_id()));
    const std::vector<LayerColumn>& cols = layer_columns();
    if (cols.size() > (size_t)kMaxLayerColumns) throw std::logic_error("save_model: more layer columns than fit");
    h[28] = (int32_t)cols.size();
    for (size_t k = 0; k < cols.size(); k++) strncpy((char*)(h + 32 + 4 * k), cols[k].name, 16);
    std::vector<int32_t> table;
    for (const LayerSpec& s : c.layers)
        for (const LayerColumn& col : cols) table.push_back(col.get(s));
    Checksum64 sum;  // over the file as written, with the checksum field still zero
    sum.update(h, sizeof h);
    sum.update(table.data(), table.size() * 4);
    sum.update(params, P * 4);
    put64(h, 24, (int64_t)sum.value());
    write_atomically(path, {{h, sizeof h}, {table.data(), table.size() * 4}, {params, P * 4}});
}

struct LoadedModel {
    ModelConfig cfg;
    std::vector<float> params;
    int64_t step = 0;
    uint64_t run_id = 0;  // 0: a version 2 file, which does not name its run
};

// The column names of a model.bin's layer table: version 5's own (header word 28 the count, words 32 + 4k.. the
// names), the fixed lists of versions 2 to 4 (version 4's "flags" word: bit 0 no attention, bit 1 no MLP; see
// columns_of_v4).
template <class Bad> std::vector<std::string> layer_table_names(const int32_t* h, int version, Bad bad) {
    if (version == 4) return {"width", "heads", "kv_heads", "hidden", "window", "flags"};
    if (version < 4) return {"width", "heads"};
    const int C = header_int(h, 28, "layer column count", 1, kMaxLayerColumns, bad);
    std::vector<std::string> names;
    for (int k = 0; k < C; k++) {
        const char* p = (const char*)(h + 32 + 4 * k);
        const std::string name(p, strnlen(p, 16));
        bool ok = !name.empty();
        for (size_t i = name.size(); i < 16; i++) ok = ok && p[i] == 0;
        for (char ch : name) ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_');
        if (!ok)
            throw bad("corrupt header: the name of layer column " + std::to_string(k) + " (words " +
                      std::to_string(32 + 4 * k) + ".." + std::to_string(35 + 4 * k) +
                      ") is not lowercase letters, digits and _ padded with zeros");
        for (const std::string& n : names)
            if (n == name) throw bad("corrupt header: layer column '" + name + "' is named twice");
        names.push_back(name);
    }
    header_zeros(h, 30, bad, 32);
    header_zeros(h, 32 + 4 * C, bad);
    return names;
}

// A version 4 table in named columns: its flags word (range-checked) as the no_attention and no_mlp columns.
template <class Bad> LayerTable columns_of_v4(const LayerTable& t, Bad bad) {
    LayerTable out;
    out.names = {"width", "heads", "kv_heads", "hidden", "window", "no_attention", "no_mlp"};
    for (size_t r = 0; r + 6 <= t.words.size(); r += 6) {
        const int32_t flags = t.words[r + 5];
        if (flags < 0 || flags > 3)
            throw bad("corrupt layer table: layer " + std::to_string(r / 6 + 1) + " flags = " + std::to_string(flags) +
                      ", must lie in [0, 3]");
        out.words.insert(out.words.end(), t.words.begin() + r, t.words.begin() + r + 5);
        out.words.insert(out.words.end(), {flags & 1, flags >> 1});
    }
    return out;
}

// The config of a model.bin header and layer table (in named columns), every field and word range-checked (see
// the top of this file).
template <class Bad> ModelConfig model_config_of(const int32_t* h, const LayerTable& table, Bad bad) {
    ModelConfig c;
    for (const ModelScalar& s : model_scalars())
        s.set(c, s.is_double ? header_double(h, s.word, s.name, s.lo, s.hi, bad)
                             : (double)header_int(h, s.word, s.name, (long)s.lo, (long)s.hi, bad));
    const size_t C = table.names.size(), L = table.words.size() / C;
    c.layers.assign(L, LayerSpec{0, 0});
    for (const LayerColumn& col : layer_columns())  // a column that has no default must be in the table
        if (col.lo > 0 && std::find(table.names.begin(), table.names.end(), col.name) == table.names.end())
            throw bad(std::string("corrupt header: the layer table has no ") + col.name + " column");
    for (size_t k = 0; k < C; k++) {
        const std::string& name = table.names[k];
        const LayerColumn* col = find_layer_column(name);
        const int lo = col ? col->lo : 0, hi = col ? col->hi : 0;
        for (size_t l = 0; l < L; l++) {
            const int32_t v = table.words[l * C + k];
            const std::string at = "layer " + std::to_string(l + 1) + " " + name + " = " + std::to_string(v);
            if (!col && v != 0)
                throw bad("its layer table sets column " + name + " (" + at +
                          "), which this build does not know; read it with the Prism that wrote it, or a newer one");
            if (v < lo || v > hi)
                throw bad("corrupt layer table: " + at + ", must lie in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
            if (col) col->set(c.layers[l], v);
        }
    }
    try {
        validate_config(c);
    } catch (const ConfigError& e) {
        throw bad(std::string("corrupt config: ") + e.what());
    }
    return c;
}

// The 256-word (1024-byte) header every checkpoint file opens with, read from the start of f into h and its
// magic checked; size: the file's. why_magic: the error for another magic.
template <class Bad>
void read_header_words(FILE* f, size_t size, int32_t (&h)[256], int32_t magic, const char* why_magic, Bad bad) {
    if (size < sizeof h) throw bad("truncated (" + std::to_string(size) + " bytes, header needs 1024)");
    if (fread(h, sizeof h, 1, f) != 1) throw bad("error reading the header");
    if (h[0] != magic) throw bad(why_magic);
}

// A model.bin's header and layer table, read from the start of f and checked: the magic, the version, the header's
// zero words, the column names, every word's range, the config. size: the file's.
struct ModelHead {
    int32_t h[256];
    int version = 0;
    LayerTable table;
    ModelConfig cfg;
};
template <class Bad> ModelHead read_model_head(FILE* f, size_t size, Bad bad) {
    ModelHead m;
    int32_t* h = m.h;
    read_header_words(f, size, m.h, kModelMagic,
                      "not a Prism model file (bad magic); pass a model.bin written by train_prism", bad);
    m.version = checkpoint_version(h, bad, kModelVersion);
    header_int(h, 12, "parameter dtype", 0, 0, bad);
    header_int(h, 13, "reserved word", 0, 0, bad);
    if (m.version < 5) header_zeros(h, m.version >= 3 ? 28 : 26, bad);
    if (m.version >= 3 && get64(h, 26) == 0) throw bad("corrupt header: run id 0");
    const int L = header_int(h, 5, "L", 1, 10000, bad);
    m.table.names = layer_table_names(h, m.version, bad);
    const size_t row = 4 * m.table.names.size();
    if (size < 1024 + row * L) throw bad("truncated inside the layer table");
    m.table.words.resize(row / 4 * (size_t)L);
    if (fread(m.table.words.data(), row, (size_t)L, f) != (size_t)L) throw bad("error reading the layer table");
    m.cfg = model_config_of(h, m.version == 4 ? columns_of_v4(m.table, bad) : m.table, bad);
    return m;
}

// Reads the header and layer table, checks them and the file size, then reads the parameters straight into
// their vector (a multi-GB checkpoint is never held twice in memory) and checks the checksum.
inline LoadedModel load_model(const std::string& path) {
    auto bad = [&](const std::string& why) { return CheckpointError("checkpoint " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "checkpoint", size);
    FILE* f = fh.get();
    const ModelHead head = read_model_head(f, size, bad);
    const int32_t* h = head.h;
    const int64_t step = get64(h, 22), P_header = get64(h, 14);
    if (step < 0) throw bad("corrupt header: step " + std::to_string(step) + " is negative");
    LoadedModel m;
    m.cfg = head.cfg;
    m.step = step;
    m.run_id = head.version >= 3 ? (uint64_t)get64(h, 26) : 0;
    const size_t P = param_layout(m.cfg).total, table_bytes = 4 * head.table.words.size();
    if ((int64_t)P != P_header)
        throw bad("corrupt header: parameter count " + std::to_string(P_header) + ", but its config has " +
                  std::to_string(P));
    const size_t want = 1024 + table_bytes + 4 * P;
    if (size != want)
        throw bad((size < want ? "truncated: " : "trailing bytes: ") + std::to_string(size) + " bytes, expected " +
                  std::to_string(want));
    m.params.resize(P);
    if (fread(m.params.data(), 4, P, f) != P) throw bad("error reading the parameters");
    Checksum64 c = header_checksum(h, 24);
    c.update(head.table.words.data(), table_bytes);
    c.update(m.params.data(), 4 * P);
    if ((int64_t)c.value() != get64(h, 24)) throw bad("checksum mismatch: the file is corrupt");
    const size_t bad_at = first_nonfinite(m.params.data(), P);
    if (bad_at < P)
        throw bad("parameter " + std::to_string(bad_at) + " of " + std::to_string(P) + " is " +
                  std::to_string(m.params[bad_at]) +
                  ": the model was saved after it diverged; use an earlier checkpoint");
    return m;
}

// Everything besides the parameters that a bit-identical resume needs.
struct TrainState {
    int64_t step = 0;                   // optimizer steps done
    int64_t tokens = 0;                 // training tokens seen (all ranks)
    uint64_t rng = 0;                   // sampling RNG state
    std::vector<unsigned char> loader;  // the data loader's position, as raw POD bytes
    std::vector<float> m, v;            // AdamW moments, n each
    // Data parallelism (header words 13..19): zero for a single process, whose m and v cover every parameter.
    int32_t rank = 0, world = 0;
    int64_t first_param = 0, model_params = 0;
    uint64_t run_id = 0;      // the run that wrote it (0: a version 2 file)
    int64_t total_batch = 0;  // tokens per optimizer step, all ranks (0: a version 2 file)
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
    put64(h, 20, (int64_t)(s.run_id ? s.run_id : random_id()));
    put64(h, 22, s.total_batch);
    Checksum64 sum;  // over the file as written, with the checksum field still zero
    sum.update(h, sizeof h);
    sum.update(s.loader.data(), s.loader.size());
    sum.update(s.m.data(), s.m.size() * 4);
    sum.update(s.v.data(), s.v.size() * 4);
    put64(h, 11, (int64_t)sum.value());
    write_atomically(path, {{h, sizeof h},
                            {s.loader.data(), s.loader.size()},
                            {s.m.data(), s.m.size() * 4},
                            {s.v.data(), s.v.size() * 4}});
}

// The header of a state file, read and checked (everything but the checksum, which covers the whole file).
struct StateHeader {
    int32_t words[256];
    int version = 0;
    int64_t n = 0;  // moments in the file
    size_t loader_bytes = 0;
    TrainState fields;  // step, tokens, rng and the data-parallel words; no loader, m or v yet
};
template <class Bad> StateHeader read_state_header(FILE* f, size_t size, Bad bad) {
    StateHeader r;
    int32_t* h = r.words;
    read_header_words(f, size, r.words, kStateMagic, "bad magic; pass the state file written next to model.bin", bad);
    r.version = checkpoint_version(h, bad);
    TrainState& s = r.fields;
    s.step = get64(h, 2);
    s.tokens = get64(h, 6);
    s.rng = (uint64_t)get64(h, 8);
    r.n = get64(h, 4);
    r.loader_bytes = (size_t)header_int(h, 10, "data-loader position size", 0, 4096, bad);
    s.rank = h[13], s.world = header_int(h, 14, "world size", 0, 1 << 20, bad);
    header_int(h, 15, "reserved word", 0, 0, bad);
    s.first_param = get64(h, 16), s.model_params = get64(h, 18);
    header_zeros(h, r.version == 3 ? 24 : 20, bad);
    if (r.version == 3) {
        s.run_id = (uint64_t)get64(h, 20), s.total_batch = get64(h, 22);
        if (s.run_id == 0 || s.total_batch < 0)
            throw bad("corrupt header: run id " + std::to_string(s.run_id) + ", global batch " +
                      std::to_string(s.total_batch));
    }
    if (s.step < 0 || s.tokens < 0)
        throw bad("corrupt header: step " + std::to_string(s.step) + ", tokens " + std::to_string(s.tokens) +
                  " (negative)");
    const int64_t n = r.n;
    if (s.world == 0 ? (s.rank != 0 || s.first_param != 0 || s.model_params != 0)
                     : (s.rank < 0 || s.rank >= s.world || n < 0 || n > s.model_params || s.first_param < 0 ||
                        s.first_param > s.model_params - n))
        throw bad("corrupt header: rank " + std::to_string(s.rank) + " of world " + std::to_string(s.world) +
                  ", moments of parameters [" + std::to_string(s.first_param) + ", +" + std::to_string(n) + ") of " +
                  std::to_string(s.model_params));
    return r;
}

// Which moments a state file holds, from its header alone: [first, first + n) of the model's P parameters (a
// single process's file, world 0: all of them, [0, n)); world: how many files the checkpoint has.
struct StateRange {
    int64_t step = 0, first = 0, n = 0, P = 0;
    int32_t rank = 0, world = 0;
    uint64_t run_id = 0;
};
inline StateRange load_state_range(const std::string& path) {
    auto bad = [&](const std::string& why) { return CheckpointError("optimizer state " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "optimizer state", size);
    const StateHeader h = read_state_header(fh.get(), size, bad);
    const TrainState& s = h.fields;
    return {s.step, s.first_param, h.n, s.world == 0 ? h.n : s.model_params, s.rank, s.world, s.run_id};
}

// Reads and checks the header (n must equal `n_expected`), then the loader position and the moments straight
// into their vectors, and checks the checksum.
inline TrainState load_state(const std::string& path, size_t n_expected) {
    auto bad = [&](const std::string& why) { return CheckpointError("optimizer state " + path + ": " + why); };
    size_t size;
    FileHandle fh = open_sized(path, "optimizer state", size);
    FILE* f = fh.get();
    StateHeader hd = read_state_header(f, size, bad);
    const int32_t* h = hd.words;
    TrainState s = hd.fields;
    const int64_t n = hd.n;
    const size_t lsz = hd.loader_bytes;
    if (n != (int64_t)n_expected)
        throw bad("holds the moments of " + std::to_string(n) + " parameters but the model has " +
                  std::to_string(n_expected) + "; it belongs to a different model");
    const size_t P = n_expected, want = 1024 + lsz + 8 * P;
    if (size != want)
        throw bad("size " + std::to_string(size) + " bytes, expected " + std::to_string(want) + " (truncated?)");
    s.loader.resize(lsz);
    s.m.resize(P);
    s.v.resize(P);
    if (fread(s.loader.data(), 1, lsz, f) != lsz || fread(s.m.data(), 4, P, f) != P || fread(s.v.data(), 4, P, f) != P)
        throw bad("error reading the file");
    Checksum64 c = header_checksum(h, 11);
    c.update(s.loader.data(), lsz);
    c.update(s.m.data(), 4 * P);
    c.update(s.v.data(), 4 * P);
    if ((int64_t)c.value() != get64(h, 11)) throw bad("checksum mismatch: the file is corrupt");
    size_t at = std::min(first_nonfinite(s.m.data(), P), first_nonfinite(s.v.data(), P));
    for (size_t i = 0; i < P && at == P; i++)
        if (s.v[i] < 0) at = i;
    if (at < P)
        throw bad("the moments of parameter " + std::to_string(at) + " are m " + std::to_string(s.m[at]) + ", v " +
                  std::to_string(s.v[at]) +
                  " (not finite, or v negative): the state was saved after it diverged; use "
                  "an earlier checkpoint");
    return s;
}
