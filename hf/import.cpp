// import: an exported directory (or one saved from its PrismForCausalLM with save_pretrained) back to model.bin,
// so that a model changed in PyTorch is evaluated, analysed and trained further here.
//
//   ./import out/tiny-hf -o out/tiny-ft/model.bin
//
// Reads DIR/config.json (hf/hf_config.h: every number checked against the others) and DIR/model.safetensors, or
// the shards that DIR/model.safetensors.index.json lists; every tensor of the model must be there under its
// name with its shape, and nothing else (a tied model's lm_head.weight may be present only as the embedding's
// copy). F32 tensors come back bit for bit, so an fp32 export imports to the very bytes of its model.bin;
// BF16 / F16 ones are widened exactly to fp32, with a note. Plain C++: it never touches an engine.
// Everything is checked before the parameter buffer exists: each tensor config.json describes must be in the
// headers with its shape, so the buffer is never larger than the files' own bytes allow (a config's word alone
// never sizes an allocation); a header lists at most the tensors the config needs. A weight that is not finite
// (NaN, Inf) is refused naming its tensor: every tool refuses such a model.bin.
// Errors: one line, "import: error: ...", exit status 1.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "run/cli.h"
#include "hf/hf_config.h"
#include "hf/safetensors.h"
#include "util/io.h"
#include "util/json.h"
#include "util/fs.h"

namespace {

struct Options {
    std::string dir, out;
    bool overwrite = false;
};

std::vector<Flag> make_flags(Options& o) {
    return {
        path_flag("-o, --out", "FILE",
                  "the model.bin to write, its directory created (refused when it exists, unless "
                  "--overwrite)",
                  o.out),
        switch_flag("--overwrite", "replace an existing FILE", o.overwrite),
    };
}

// config.json and the index are small (a 10000-layer model's index is about 5 MB): 64 MB at most.
constexpr size_t kJsonFileCap = (size_t)64 << 20;

// The safetensors files of DIR: model.safetensors, or the shards of model.safetensors.index.json; each may list
// at most `max_tensors` tensors.
std::vector<SafetensorsFile> open_weights(const std::string& dir, size_t max_tensors) {
    const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
    struct stat st;
    if (stat(single.c_str(), &st) == 0) return {read_safetensors_header(single, max_tensors)};
    if (stat(index.c_str(), &st) != 0)
        throw HfError(
            dir +
            " holds neither model.safetensors nor model.safetensors.index.json; pass a directory written by export "
            "or by save_pretrained");
    const std::string text = read_file_text(index, "safetensors index", kJsonFileCap);
    const size_t values = st_json_values(text), most = 8 * (max_tensors + 1) + 2 * 4096;  // a weight_map entry: 2
    if (values > most)
        throw HfError(index + " holds " + std::to_string(values) + " JSON values, more than the index of a model of " +
                      std::to_string(max_tensors) + " tensors can need (" + std::to_string(most) +
                      "); is it the right file?");
    json::Value o;
    try {
        o = json::parse(text);
    } catch (const json::Error& e) {
        throw HfError(index + ": " + e.what());
    }
    const json::Value* map = o.kind == json::Value::Object ? o.find("weight_map") : nullptr;
    if (!map || map->kind != json::Value::Object) throw HfError(index + ": no \"weight_map\" object");
    if (map->obj.size() > max_tensors)
        throw HfError(index + ": \"weight_map\" lists " + std::to_string(map->obj.size()) + " tensors, more than the " +
                      std::to_string(max_tensors) + " of the model config.json describes");
    std::vector<std::string> files;
    std::set<std::string> seen;
    for (const auto& [name, file] : map->obj) {
        if (file.kind != json::Value::String || file.str.empty() || file.str.find('/') != std::string::npos)
            throw HfError(index + ": tensor \"" + st_printable(name) + "\" maps to no file name of this directory");
        if (seen.insert(file.str).second) files.push_back(file.str);
    }
    std::vector<SafetensorsFile> out;
    for (const std::string& f : files) out.push_back(read_safetensors_header(dir + "/" + f, max_tensors));
    return out;
}

int run(const Options& o) {
    if (!is_dir(o.dir)) throw HfError(o.dir + " is not a directory; pass the directory export wrote");
    const std::string config_path = o.dir + "/config.json";
    struct stat st;
    if (stat(config_path.c_str(), &st) != 0)
        throw HfError(o.dir + " holds no config.json: it is not an export; pass the directory export wrote");
    const HfConfig hc = parse_hf_config(read_file_text(config_path, "config", kJsonFileCap), config_path);
    const ModelConfig& c = hc.cfg;
    if (!o.overwrite && stat(o.out.c_str(), &st) == 0)
        throw ConfigError(o.out + " exists; pass --overwrite to replace it, or choose another -o");

    const ParamLayout layout = param_layout(c);
    // Room for a few stray tensors (named in the error below) but not for a header of millions.
    const size_t max_tensors = 2 * layout.tensors.size() + 16;
    const std::vector<SafetensorsFile> files = open_weights(o.dir, max_tensors);
    std::vector<ReadPath> inputs = {{config_path, "the config"},  // the one output rule (util/fs.h)
                                    {o.dir + "/model.safetensors.index.json", "the safetensors index"}};
    for (const SafetensorsFile& f : files) inputs.push_back({f.path, "the weights"});
    check_output_path(o.out, "-o", inputs);
    std::map<std::string, std::pair<const SafetensorsFile*, const StTensor*>> found;
    for (const SafetensorsFile& f : files)
        for (const StTensor& t : f.tensors) {
            if (found.count(t.name))
                throw HfError("tensor " + st_printable(t.name) + " is in both " + found[t.name].first->path + " and " +
                              f.path);
            found[t.name] = {&f, &t};
        }

    // Every tensor found with its shape before anything is allocated: the buffer below then holds no more floats
    // than the files hold elements.
    struct Want {
        std::string name;
        const SafetensorsFile* file;
        const StTensor* t;
        size_t offset;
    };
    std::vector<Want> wants;
    auto want = [&](const std::string& name, const std::vector<int64_t>& shape, size_t offset) {
        auto it = found.find(name);
        if (it == found.end())
            throw HfError(o.dir + ": tensor " + name + " is missing; config.json describes a model with it");
        const StTensor& t = *it->second.second;
        if (t.shape != shape)
            throw HfError(it->second.first->path + ": tensor " + name + " has shape " + st_shape_json(t.shape) +
                          " but config.json needs " + st_shape_json(shape));
        wants.push_back({name, it->second.first, &t, offset});
        found.erase(it);
    };
    for (const ParamTensor& t : layout.tensors) want(hf_tensor_name(t), hf_tensor_shape(t), t.offset);
    const bool head_copy = c.tied && found.count("lm_head.weight");  // a tied model saved with its head: must be a copy
    if (head_copy) want("lm_head.weight", hf_tensor_shape(layout.tensors[0]), layout.total);
    if (!found.empty())
        throw HfError(found.begin()->second.first->path + ": tensor " + st_printable(found.begin()->first) +
                      " is not part of the Prism model config.json describes (" + std::to_string(found.size()) +
                      " such tensor" + (found.size() > 1 ? "s" : "") + ")");

    std::vector<float> params;
    const size_t floats = layout.total + (head_copy ? layout.tensors[0].numel() : 0);
    try {
        params.resize(floats);
    } catch (const std::bad_alloc&) {
        throw HfError("out of memory: " + config_path + " describes a model of " + std::to_string(layout.total) +
                      " parameters, and its weights need " + std::to_string(floats * 4) + " bytes as fp32 (" +
                      std::to_string(floats * 4 >> 20) +
                      " MiB), more than this machine gives; import it on one with more memory");
    }
    std::map<std::string, int> widened;  // dtype -> tensors
    for (const Want& w : wants) {
        float* dst = params.data() + w.offset;
        read_safetensors_f32(*w.file, *w.t, dst);
        const size_t n = w.t->numel(), bad = first_nonfinite(dst, n);
        if (bad < n)
            throw HfError(w.file->path + ": tensor " + w.name + " holds " + std::to_string(dst[bad]) + " at element " +
                          std::to_string(bad) +
                          "; a model.bin holds finite weights only (every tool refuses one that "
                          "does not): fix or retrain the model, then save it again");
        if (w.t->dtype != StDtype::F32) widened[st_dtype_name(w.t->dtype)]++;
    }
    if (head_copy &&
        memcmp(params.data() + layout.total, params.data() + layout.wte, layout.tensors[0].numel() * 4) != 0)
        throw HfError(
            o.dir +
            ": config.json says tie_word_embeddings but lm_head.weight differs from model.embed_tokens.weight; "
            "set tie_word_embeddings false to keep a separate head");

    const size_t slash = o.out.find_last_of('/');
    if (slash != std::string::npos && slash > 0) make_dirs(o.out.substr(0, slash));
    save_model(o.out, c, params.data(), layout.total, hc.step, hc.run_id);
    printf("import: %s (step %ld, %zu parameters) -> %s\n", o.dir.c_str(), hc.step, layout.total, o.out.c_str());
    for (const auto& [dtype, n] : widened)
        printf("import: note: %d tensors were %s, widened exactly to fp32 (the model.bin holds the %s values)\n", n,
               dtype.c_str(), dtype.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    Command cmd{"import", "DIR -o model.bin [flags]",
                "A directory written by export (or saved by its "
                "PrismForCausalLM's save_pretrained) back to a Prism model.bin.",
                make_flags(o)};
    cmd.missing = "directory", cmd.min_positional = 1, cmd.max_positional = 1;
    return command_main(cmd, argc, argv, "", [&](const Parsed& p) {
        o.dir = p.positional[0];
        if (o.out.empty()) throw ConfigError("no output file; pass -o model.bin");
        return run(o);
    });
}
