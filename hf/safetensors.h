// hf/safetensors.h: the safetensors file format (Hugging Face's), written and read by our own code.
//
//   bytes [0, 8)          N, the header's length in bytes (uint64, little-endian)
//   bytes [8, 8 + N)      a JSON object: for each tensor  "NAME": {"dtype": "F32", "shape": [r, c],
//                         "data_offsets": [begin, end]}, plus an optional "__metadata__": {"key": "value", ...}
//                         of strings; we pad it with spaces so that the data starts 8-byte aligned
//   bytes [8 + N, size)   the data: each tensor's elements row-major, little-endian, at [begin, end) relative
//                         to the start of the data; every byte belongs to exactly one tensor (no holes, no
//                         overlaps), as the format's own validator requires
// Dtypes: F32 is written and read bit for bit; BF16 is written by rounding fp32 to nearest even (NaN stays
// NaN) and, like F16, read back by widening to fp32 (exact: every bf16 / f16 value is an fp32 value).
// Reading checks every field (JSON, dtype, shape against the byte range, ranges within the file, coverage) and
// reports a bad file as one SafetensorsError naming it; tensors are read one at a time straight into the
// caller's buffer, so a large model is never held twice. The work a header can ask for is bounded before it is
// parsed: at most 100 MB, at most `max_tensors` entries (counted in the raw text, so that a hostile header's
// millions of tiny entries are refused before any is built), names checked for duplicates in O(n log n).
// Does not: know any model (hf/hf_config.h names Prism's tensors), or write sharded checkpoints (it reads them:
// one file at a time, the index is hf/import.cpp's).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "util/bf16.h"
#include "util/io.h"
#include "util/json.h"

struct SafetensorsError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class StDtype { F32, BF16, F16 };

inline const char* st_dtype_name(StDtype t) { return t == StDtype::F32 ? "F32" : t == StDtype::BF16 ? "BF16" : "F16"; }
inline size_t st_dtype_bytes(StDtype t) { return t == StDtype::F32 ? 4 : 2; }

// IEEE half -> fp32 (subnormals, infinities and NaN included).
inline float float_from_f16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do man <<= 1, e++;
            while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline size_t st_numel(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t s : shape) n *= (size_t)s;
    return n;
}

// One tensor to write: fp32 elements, converted to the file's dtype on the way out.
struct StSource {
    std::string name;
    std::vector<int64_t> shape;
    const float* data;
    size_t numel() const { return st_numel(shape); }
};

inline std::string st_shape_json(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// Writes the tensors in the order given, every one in `dtype` (F32 or BF16), atomically (io.h).
inline void write_safetensors(const std::string& path, const std::vector<StSource>& tensors, StDtype dtype,
                              const std::vector<std::pair<std::string, std::string>>& metadata) {
    if (dtype == StDtype::F16) throw SafetensorsError("safetensors: writing F16 is not supported; use F32 or BF16");
    const size_t es = st_dtype_bytes(dtype);
    std::string h = "{\"__metadata__\": {";
    for (size_t i = 0; i < metadata.size(); i++)
        h += (i ? ", " : "") + json::quote(metadata[i].first) + ": " + json::quote(metadata[i].second);
    h += "}";
    size_t at = 0;
    for (const StSource& t : tensors) {
        const size_t n = t.numel() * es;
        h += ", " + json::quote(t.name) + ": {\"dtype\": \"" + st_dtype_name(dtype) +
             "\", \"shape\": " + st_shape_json(t.shape) + ", \"data_offsets\": [" + std::to_string(at) + ", " +
             std::to_string(at + n) + "]}";
        at += n;
    }
    h += "}";
    while ((8 + h.size()) % 8) h += ' ';
    const uint64_t hn = h.size();
    std::vector<uint16_t> half;  // BF16: every tensor converted, back to back
    if (dtype == StDtype::BF16) {
        half.reserve(at / 2);
        for (const StSource& t : tensors)
            for (size_t i = 0; i < t.numel(); i++) half.push_back(bf16_from_float(t.data[i]));
    }
    std::vector<std::pair<const void*, size_t>> pieces = {{&hn, 8}, {h.data(), h.size()}};
    if (dtype == StDtype::BF16) {
        pieces.push_back({half.data(), half.size() * 2});
    } else {
        for (const StSource& t : tensors) pieces.push_back({t.data, t.numel() * 4});
    }
    write_atomically(path, pieces);
}

// A tensor as the header describes it; begin and end are absolute file offsets.
struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
    size_t numel() const { return st_numel(shape); }
};

struct SafetensorsFile {
    std::string path;
    uint64_t size = 0;
    std::vector<StTensor> tensors;  // in header order
    std::map<std::string, std::string> metadata;

    const StTensor* find(const std::string& name) const {
        for (const StTensor& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
};

// A name or string from a file, for a one-line message: control bytes escaped, at most 200 bytes of it.
inline std::string st_printable(const std::string& s) {
    return s.size() > 200 ? printable(s.substr(0, 200)) + "..." : printable(s);
}

// At most this many tensors in one file by default: a Prism model has at most 8 per layer x 10000 layers + 4.
constexpr size_t kStMaxTensors = 80004;

// The JSON values a header's text can hold, counted without parsing it: every value but the first follows a
// '[', ',' or ':' outside a string. Each tensor entry needs at most 24 of them (8 shape sizes), a metadata
// entry 2.
inline size_t st_json_values(const std::string& h) {
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < h.size(); i++) {
        const char c = h[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == ',' || c == ':') {
            n++;
        }
    }
    return n;
}

// The errors about one file: bad(why) for a malformed file, plain(what) for one this reader will not take.
struct StFileErrors {
    const std::string& path;
    SafetensorsError plain(const std::string& what) const {
        return SafetensorsError("safetensors file " + path + ": " + what);
    }
    SafetensorsError bad(const std::string& why) const { return plain(why + "; it is not a whole safetensors file"); }
    uint64_t count(const json::Value& v, const std::string& what) const {
        if (v.kind != json::Value::Number || v.str.empty() || v.str.size() > 19 ||
            v.str.find_first_not_of("0123456789") != std::string::npos)
            throw bad(what + " is not a non-negative integer");
        return std::stoull(v.str);
    }
};

// The header's JSON text, its length checked against the file's size and its values counted (st_json_values)
// before it is parsed.
inline std::string read_st_header_text(FILE* f, size_t size, size_t max_tensors, const StFileErrors& err) {
    uint64_t hn = 0;
    if (size < 8 || fread(&hn, 8, 1, f) != 1) throw err.bad("shorter than its 8-byte header length");
    if (hn < 2 || hn > 100000000 || hn > size - 8)
        throw err.bad("header length " + std::to_string(hn) + " does not fit a file of " + std::to_string(size) +
                      " bytes");
    std::string h(hn, '\0');
    if (fread(&h[0], 1, hn, f) != hn) throw err.bad("error reading the header");
    if (h[0] != '{') throw err.bad("the header does not start with '{'");
    const size_t values = st_json_values(h), most = 24 * (max_tensors + 1) + 2 * 4096;
    if (values > most)
        throw err.plain("its header holds " + std::to_string(values) + " JSON values, more than " +
                        std::to_string(max_tensors) + " tensors can need (" + std::to_string(most) +
                        "); is it the right file?");
    return h;
}

// One tensor's entry: its dtype, its shape and its byte range within the data_bytes data bytes at data0.
inline StTensor read_st_tensor(const std::string& name, const json::Value& v, uint64_t data0, uint64_t data_bytes,
                               const StFileErrors& err) {
    const std::string at = "tensor \"" + st_printable(name) + "\": ";
    if (v.kind != json::Value::Object) throw err.bad(at + "not an object");
    const json::Value* dt = v.find("dtype");
    const json::Value* shape = v.find("shape");
    const json::Value* offs = v.find("data_offsets");
    if (!dt || !shape || !offs) throw err.bad(at + "needs dtype, shape and data_offsets");
    StTensor t;
    t.name = name;
    if (dt->kind != json::Value::String) throw err.bad(at + "dtype is not a string");
    if (dt->str == "F32") t.dtype = StDtype::F32;
    else if (dt->str == "BF16") t.dtype = StDtype::BF16;
    else if (dt->str == "F16") t.dtype = StDtype::F16;
    else
        throw err.plain(at + "dtype " + st_printable(dt->str) +
                        " is not a floating-point type we read (F32, BF16, F16); save the model in one of them");
    if (shape->kind != json::Value::Array || shape->arr.size() > 8)
        throw err.bad(at + "shape is not a list of at most 8 sizes");
    double numel = 1;  // in double first: the product of hostile sizes must not wrap
    for (const json::Value& s : shape->arr)
        t.shape.push_back((int64_t)err.count(s, at + "a shape entry")), numel *= (double)t.shape.back();
    if (offs->kind != json::Value::Array || offs->arr.size() != 2)
        throw err.bad(at + "data_offsets is not [begin, end]");
    const uint64_t b = err.count(offs->arr[0], at + "data_offsets"), e = err.count(offs->arr[1], at + "data_offsets");
    if (b > e || e > data_bytes)
        throw err.bad(at + "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] outside the " +
                      std::to_string(data_bytes) + " data bytes");
    if (numel * (double)st_dtype_bytes(t.dtype) != (double)(e - b))
        throw err.bad(at + "shape " + st_shape_json(t.shape) + " of " + dt->str + " needs " +
                      std::to_string((uint64_t)(numel * st_dtype_bytes(t.dtype))) + " bytes but data_offsets hold " +
                      std::to_string(e - b));
    t.begin = data0 + b, t.end = data0 + e;
    return t;
}

// Every data byte from data0 to the file's end belongs to exactly one tensor.
inline void check_st_coverage(const SafetensorsFile& sf, uint64_t data0, const StFileErrors& err) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const StTensor& t : sf.tensors) spans.push_back({t.begin, t.end});
    std::sort(spans.begin(), spans.end());
    uint64_t at = data0;
    for (const auto& s : spans) {
        if (s.first != at)
            throw err.bad(s.first < at ? "two tensors overlap at data byte " + std::to_string(s.first - data0)
                                       : "data bytes [" + std::to_string(at - data0) + ", " +
                                             std::to_string(s.first - data0) + ") belong to no tensor");
        at = s.second;
    }
    if (at != sf.size) throw err.bad("data bytes from " + std::to_string(at - data0) + " on belong to no tensor");
}

// The header of a safetensors file, every field checked against the file's size; at most max_tensors tensors
// (and 4096 metadata entries).
inline SafetensorsFile read_safetensors_header(const std::string& path, size_t max_tensors = kStMaxTensors) {
    const StFileErrors err{path};
    SafetensorsFile sf;
    sf.path = path;
    size_t size;
    FileHandle fh = open_sized(path, "safetensors file", size);
    sf.size = size;
    const std::string h = read_st_header_text(fh.get(), size, max_tensors, err);
    json::Value o;
    try {
        o = json::parse(h);
    } catch (const json::Error& e) {
        throw err.bad(std::string("header: ") + e.what());
    }
    if (o.kind != json::Value::Object) throw err.bad("the header is not a JSON object");
    const uint64_t data0 = 8 + h.size(), data_bytes = size - data0;
    if (o.obj.size() > max_tensors + 1)
        throw err.plain("its header lists " + std::to_string(o.obj.size()) + " entries, more than the " +
                        std::to_string(max_tensors) + " tensors it can hold here; is it the right file?");
    std::set<std::string> names;
    for (const auto& [name, v] : o.obj) {
        if (name != "__metadata__") {
            if (!names.insert(name).second) throw err.bad("tensor \"" + st_printable(name) + "\": listed twice");
            sf.tensors.push_back(read_st_tensor(name, v, data0, data_bytes, err));
            continue;
        }
        if (v.kind != json::Value::Object) throw err.bad("__metadata__ is not an object");
        if (v.obj.size() > 4096) throw err.bad("__metadata__ has more than 4096 entries");
        for (const auto& [k, s] : v.obj) {
            if (s.kind != json::Value::String)
                throw err.bad("__metadata__ \"" + st_printable(k) + "\" is not a string");
            sf.metadata[k] = s.str;
        }
    }
    check_st_coverage(sf, data0, err);
    return sf;
}

// Tensor t of file sf as fp32 into dst (t.numel() floats).
inline void read_safetensors_f32(const SafetensorsFile& sf, const StTensor& t, float* dst) {
    size_t size;
    FileHandle fh = open_sized(sf.path, "safetensors file", size);
    if (size != sf.size) throw SafetensorsError("safetensors file " + sf.path + " changed while it was being read");
    if (fseeko(fh.get(), (off_t)t.begin, SEEK_SET) != 0) throw SafetensorsError("cannot seek in " + sf.path);
    const size_t n = t.numel();
    bool ok;
    if (t.dtype == StDtype::F32) {
        ok = fread(dst, 4, n, fh.get()) == n;
    } else {  // widened a block at a time: no second copy of a large tensor
        uint16_t h[1 << 14];
        ok = true;
        for (size_t at = 0; ok && at < n; at += sizeof h / 2) {
            const size_t k = std::min(n - at, sizeof h / 2);
            ok = fread(h, 2, k, fh.get()) == k;
            for (size_t i = 0; ok && i < k; i++)
                dst[at + i] = t.dtype == StDtype::BF16 ? float_from_bf16(h[i]) : float_from_f16(h[i]);
        }
    }
    if (!ok) throw SafetensorsError("error reading tensor " + st_printable(t.name) + " of " + sf.path);
}
