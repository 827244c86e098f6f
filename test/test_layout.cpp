// test_layout.cpp: the tree's shape, as the README's "The code" section draws it: no product file includes anything under test/, the includes form no cycle,
// and every product binary's rule is the top Makefile's (no other make file defines one). Files are split by idea,
// not by a line count. Run from the checkout's root (make test does); reads the sources, builds nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test/test_util.h"

namespace fs = std::filesystem;

namespace {

bool is_source(const fs::path& p) {
    const std::string e = p.extension().string();
    return e == ".h" || e == ".cuh" || e == ".cu" || e == ".cpp";
}

bool skipped_dir(const fs::directory_entry& e) {
    const std::string name = e.path().filename().string();
    return e.is_directory() && (name == "build" || name == "out" || (name.size() > 1 && name[0] == '.'));
}

// Every source file of the checkout (relative paths), build/ and hidden directories left out.
std::vector<std::string> sources() {
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator("."); it != fs::recursive_directory_iterator(); ++it) {
        if (skipped_dir(*it)) {
            it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file() && is_source(it->path())) out.push_back(fs::relative(it->path(), ".").string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The quoted includes of a file, as the compiler resolves them: relative to the file's directory, else to the
// root (-I.).
std::vector<std::string> includes_of(const std::string& file) {
    static const std::regex inc(R"(^\s*#\s*include\s*"([^"]+)\")");
    std::vector<std::string> out;
    std::istringstream in(read_file(file));
    std::string line;
    const fs::path dir = fs::path(file).parent_path();
    while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, inc)) continue;
        const fs::path local = dir / m[1].str();
        out.push_back(fs::exists(local) && !dir.empty() ? fs::path(local).lexically_normal().string() : m[1].str());
    }
    return out;
}

bool is_product(const std::string& f) { return f.rfind("test/", 0) != 0 && f.rfind("dev/", 0) != 0; }

}  // namespace

TEST_CASE("no product file includes anything under test/", "[layout]") {
    for (const std::string& f : sources()) {
        if (!is_product(f)) continue;
        for (const std::string& inc : includes_of(f)) {
            INFO(f << " includes " << inc);
            CHECK(inc.rfind("test/", 0) != 0);
        }
    }
}

namespace {
// Every project file `file` includes, directly or through others (system and generated headers left out).
std::set<std::string> closure_of(const std::string& file) {
    std::set<std::string> seen;
    std::function<void(const std::string&)> walk = [&](const std::string& f) {
        for (const std::string& g : includes_of(f))
            if (fs::exists(g) && seen.insert(g).second) walk(g);
    };
    walk(file);
    return seen;
}
}  // namespace

TEST_CASE("the arrows match the folders: what each side of the tree may not include", "[layout]") {
    // {file, headers or folders (a trailing '/') that must not be in its include closure, why}
    const std::vector<std::tuple<std::string, std::vector<std::string>, std::string>> rules = {
        {"data/prepare_shards.cpp", {"model_config.h", "engine.h"}, "a data tool never compiles the model"},
        {"data/prepare_eval.cpp", {"model_config.h", "engine.h"}, "a data tool never compiles the model"},
        {"cuda_engine.cuh", {"inspect/", "eval/", "run/"}, "the engine includes no tool and no run directory"},
        {"train_prism.cu",
         {"cuda_engine.cuh", "model.cuh", "ref/", "model/layer_columns.h", "run/run_dir.h", "run/run_record.h",
          "run/checkpoint.h", "eval/scoring.h", "inspect/sampling.h", "inspect/cuda_decoder.cuh", "text/tokenizer.h"},
         "the loop reaches the engine interface, the step, the run type and the interfaces of what it calls"},
        {"run/run.h",
         {"eval/scoring.h", "inspect/", "text/tokenizer.h", "ref/", "cuda_engine.cuh"},
         "a run's life knows its directory and record, not the sampler, the scorer or an engine's insides"},
        {"run/run.cpp",
         {"eval/scoring.h", "inspect/", "text/tokenizer.h", "ref/", "cuda_engine.cuh"},
         "a run's life knows its directory and record, not the sampler, the scorer or an engine's insides"},
        {"inspect/report.cpp", {"engine.h", "dataloader.h", "dist/"}, "a tool that reads run directories"},
        {"hf/export.cpp", {"engine.h", "dataloader.h", "dist/"}, "a tool that reads run directories"},
        {"hf/import.cpp", {"engine.h", "dataloader.h", "dist/"}, "a tool that reads run directories"},
        {"studies/study.cpp", {"run/run.h", "engine.h"}, "study runs train_prism, it does not train"},
    };
    for (const auto& [file, banned, why] : rules) {
        const std::set<std::string> c = closure_of(file);
        for (const std::string& b : banned)
            for (const std::string& f : c) {
                INFO(file << " includes " << f << " (" << why << ")");
                CHECK(!(b.back() == '/' ? f.rfind(b, 0) == 0 : f == b));
            }
    }
    // The check itself: the trainer's closure holds the engine and the run.
    const std::set<std::string> t = closure_of("train_prism.cu");
    CHECK(t.count("engine.h"));
    CHECK(t.count("run/run.h"));
}

TEST_CASE("the sources that test or time the CUDA engine compile none of its kernels", "[layout]") {
    // They hold the engine through cuda_engine_hooks.cuh and link cuda_engine.cu's one object (the Makefile), so
    // nothing they include may define a kernel: one such include compiles it again in each of them.
    static const std::regex kernel(R"(__global__\s+void)");
    for (const std::string file :
         {"cuda_engine_hooks.cuh", "test/test_model_cuda.cpp", "test/test_decode_cuda.cpp", "dev/bench_model.cpp"}) {
        std::set<std::string> c = closure_of(file);
        c.insert(file);
        for (const std::string& f : c) {
            INFO(file << " includes " << f << ", which defines a kernel");
            CHECK(!std::regex_search(read_file(f), kernel));
        }
    }
}

TEST_CASE("the includes form no cycle", "[layout]") {
    std::map<std::string, std::vector<std::string>> graph;
    for (const std::string& f : sources()) graph[f] = includes_of(f);
    // Depth-first search with colours; a grey node reached again closes a cycle, reported as its path.
    std::map<std::string, int> colour;  // 0 white, 1 grey (on the path), 2 black
    std::vector<std::string> path, cycle;
    std::function<bool(const std::string&)> visit = [&](const std::string& f) {
        colour[f] = 1;
        path.push_back(f);
        for (const std::string& g : graph[f]) {
            if (!graph.count(g)) continue;  // a system or generated header
            if (colour[g] == 1) {
                cycle.assign(std::find(path.begin(), path.end(), g), path.end());
                cycle.push_back(g);
                return true;
            }
            if (colour[g] == 0 && visit(g)) return true;
        }
        path.pop_back();
        colour[f] = 2;
        return false;
    };
    bool found = false;
    for (const auto& kv : graph)
        if (colour[kv.first] == 0 && (found = visit(kv.first))) break;
    std::string shown;
    for (const std::string& c : cycle) shown += (shown.empty() ? "" : " -> ") + c;
    INFO("cycle: " << shown);
    CHECK_FALSE(found);
    // The check itself: a planted cycle is found.
    graph["a.h"] = {"b.h"}, graph["b.h"] = {"a.h"}, colour.clear(), path.clear();
    CHECK(visit("a.h"));
}

// The targets of a make file's rules: the words before the ':' of each logical line (continuations joined) that
// starts a rule, not a recipe, a comment or an assignment.
static std::set<std::string> rule_targets(const std::string& text) {
    std::set<std::string> targets;
    std::istringstream in(text);
    std::string line, logical;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\\') {
            logical += line.substr(0, line.size() - 1) + " ";
            continue;
        }
        logical += line;
        const size_t colon = logical.find(':');
        const bool rule = !logical.empty() && logical[0] != '\t' && logical[0] != '#' && colon != std::string::npos &&
                          logical.find('=') > colon && logical.compare(colon, 2, ":=") != 0;
        if (rule) {
            std::istringstream words(logical.substr(0, colon));
            for (std::string w; words >> w;) targets.insert(w);
        }
        logical.clear();
    }
    return targets;
}

TEST_CASE("the top Makefile has every product binary's rule, and no other make file does", "[layout]") {
    REQUIRE(fs::exists("train_prism.cu"));  // run from the checkout's root
    const std::vector<std::string> products = {"train_prism",
                                               "eval_zeroshot",
                                               "generate",
                                               "analyze",
                                               "report",
                                               "export",
                                               "import",
                                               "study",
                                               "$(BUILD)/prepare_shards",
                                               "$(BUILD)/prepare_eval"};
    const std::set<std::string> top = rule_targets(read_file("Makefile"));
    for (const std::string& p : products) {
        INFO(p);
        CHECK(top.count(p));
    }
    // The reading itself: a rule over continued lines, a static pattern rule; not an assignment or a recipe.
    CHECK(rule_targets("a b \\\n c: %: x\nV := d: e\nW = f:g\n\th: i\n# j: k\n") ==
          std::set<std::string>{"a", "b", "c"});
    // A fragment or sub-make may build tests and tools, never a product: one place to look for a product's build.
    for (auto it = fs::recursive_directory_iterator("."); it != fs::recursive_directory_iterator(); ++it) {
        if (skipped_dir(*it)) {
            it.disable_recursion_pending();
            continue;
        }
        const std::string name = it->path().filename().string();
        const bool make_file = it->path().extension() == ".mk" || name == "Makefile" || name == "GNUmakefile";
        if (!it->is_regular_file() || !make_file || fs::relative(it->path(), ".") == "Makefile") continue;
        const std::set<std::string> targets = rule_targets(read_file(it->path()));
        for (const std::string& p : products) {
            INFO(it->path().string() << ": " << p);
            CHECK(!targets.count(p));
        }
    }
}
