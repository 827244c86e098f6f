// test_layout.cpp: the tree's shape, as docs/walkthrough.md's "The map of the code" draws it: no product file
// includes anything under test/, the includes form no cycle, and every product binary's rule is the top Makefile's
// (no other make file defines one); make test-build builds every dev/ tool; the scans read the project's files
// (test/project_files.h). Files are split by idea, not by a line count. Run from the checkout's root (make test
// does); reads the sources, builds nothing.
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

#include "test/project_files.h"
#include "test/shard_test_util.h"
#include "test/test_util.h"

namespace fs = std::filesystem;

namespace {

bool is_source(const fs::path& p) {
    const std::string e = p.extension().string();
    return e == ".h" || e == ".cuh" || e == ".cu" || e == ".cpp";
}

// Every source file of the project (test/project_files.h: git's list; what a user makes in the checkout is not read).
std::vector<std::string> sources() {
    std::vector<std::string> out;
    for (const std::string& f : project_files())
        if (is_source(f)) out.push_back(f);
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
    for (const std::string& f : project_files()) {
        const std::string name = fs::path(f).filename().string();
        const bool make_file = fs::path(f).extension() == ".mk" || name == "Makefile" || name == "GNUmakefile";
        if (!make_file || f == "Makefile") continue;
        const std::set<std::string> targets = rule_targets(read_file(f));
        for (const std::string& p : products) {
            INFO(f << ": " << p);
            CHECK(!targets.count(p));
        }
    }
}

TEST_CASE("make test-build builds every developer's tool of dev/, so that each keeps building as its header says",
          "[layout]") {
    // The Makefile's DEV_TOOLS (continuation lines joined): $(BUILD)/NAME for each dev/*.cpp tool NAME, or NAME_cpu
    // (the executor's build of a GPU benchmark), and test-build's list takes it.
    const std::string text = read_file("Makefile");
    const size_t at = text.find("\nDEV_TOOLS := ");
    REQUIRE(at != std::string::npos);
    std::string def;
    for (size_t p = at + 1; p < text.size();) {
        const size_t e = std::min(text.find('\n', p), text.size());
        def += text.substr(p, e - p);
        p = e + 1;
        if (def.empty() || def.back() != '\\') break;
        def.pop_back();
    }
    static const std::regex tool(R"(\b([a-z_]+)\b)");
    std::set<std::string> tools;
    for (auto it = std::sregex_iterator(def.begin(), def.end(), tool); it != std::sregex_iterator(); ++it)
        tools.insert((*it)[1].str());
    int n = 0;
    for (const std::string& f : project_files()) {
        if (f.rfind("dev/", 0) != 0 || fs::path(f).extension() != ".cpp" || fs::path(f).parent_path() != "dev")
            continue;
        const std::string name = fs::path(f).stem().string();
        INFO(f << " is not in the Makefile's DEV_TOOLS (make test-build would not build it)");
        CHECK((tools.count(name) || tools.count(name + "_cpu")));
        n++;
    }
    CHECK(n >= 7);
    static const std::regex test_build(R"(\nTEST_BUILD := [^\n]*(\\\n[^\n]*)*\$\(DEV_TOOLS\))");
    CHECK(std::regex_search(text, test_build));
}

TEST_CASE("the tree's scans read the project's files, not what the docs have a user make in the checkout", "[layout]") {
    // A checkout as a user leaves it after README.md and docs/live.md: a virtual environment (docs/live.md's
    // venv-live/, and one under another name), runs/, out/, build/, the downloaded data, each with files the scans
    // would read (sources, markdown, a Makefile), beside the project's own files.
    TempDir d;
    const std::vector<std::string> own = {".ci/run", ".gitignore", "Makefile", "docs/a.md", "ref/ops.h", "train.cu"};
    const std::vector<std::string> made = {"venv-live/pyvenv.cfg", "venv-live/lib/site/x.py", "venv-live/lib/README.md",
                                           "venv/pyvenv.cfg",      "venv/bin/Makefile",       "env2/pyvenv.cfg",
                                           "env2/lib/y.h",         "runs/tiny/a.cpp",         "out/tiny/b.md",
                                           "build/deps/c.h",       "data/cache/d.py",         "wandb/run/e.py"};
    for (const std::string& f : own) {
        fs::create_directories(fs::path(d / f).parent_path());
        write_file(d / f, "x\n");
    }
    for (const std::string& f : made) {
        fs::create_directories(fs::path(d / f).parent_path());
        write_file(d / f, "x\n");
    }
    std::vector<std::string> want = own;
    std::sort(want.begin(), want.end());
    // Outside git: the walk leaves out every directory a user makes (env2/ by its pyvenv.cfg).
    CHECK(project_files_in(d.path, false) == want);
    // In a git checkout: git's list, with the repository's .gitignore, less any virtual environment (env2/ is not in
    // .gitignore). A file not yet added is the project's too.
    if (sh("command -v git").rc != 0) return;
    write_file(d / ".gitignore", read_file(".gitignore"));
    REQUIRE(sh("git -C " + d.path + " init -q && git -C " + d.path + " add Makefile docs").rc == 0);
    CHECK(project_files_in(d.path) == want);
    // Where git is at work, not the walk: a file .gitignore names is left out, a hidden folder git lists is kept.
    write_file(d / "notes.tmp.o", "x\n");
    fs::create_directories(d / ".github");
    write_file(d / ".github/ci.yml", "x\n");
    want.push_back(".github/ci.yml");
    std::sort(want.begin(), want.end());
    CHECK(project_files_in(d.path) == want);
    // The checkout's own list: the scans' files, none of a user's.
    for (const std::string& f : project_files()) {
        INFO(f);
        for (const char* dir : {"venv-live/", "venv/", "runs/", "out/", "build/", "wandb/", "data/default/"})
            CHECK(f.rfind(dir, 0) != 0);
    }
    CHECK(std::count(project_files().begin(), project_files().end(), "train_prism.cu") == 1);
}
