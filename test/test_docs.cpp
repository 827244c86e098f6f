// test_docs.cpp: the documentation's references resolve. Every relative link in README.md and docs/*.md names a
// file that exists (and, with a #anchor into a markdown file, one of its headings), and every repository path
// named in a document or in a source comment exists, so a moved or renamed file cannot leave a stale pointer.
// A "repository path" is a token like dir/file.ext or file.ext with one of the source and document extensions
// below; a bare name must be a file somewhere in the tree. Paths a run creates (out/, build/, data/default/, ...)
// and other projects' files are on two short allow-lists, each with its reason.
// Run from the checkout's root (make test does); reads files, builds nothing.
#include <catch2/catch.hpp>

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test/project_files.h"
#include "test/test_util.h"

namespace fs = std::filesystem;

namespace {

// Every file of the project (test/project_files.h: git's list; what a user makes in the checkout is not read).
const std::vector<std::string>& repo_files() { return project_files(); }

std::vector<std::string> markdown_docs() {
    std::vector<std::string> out{"README.md"};
    for (const std::string& f : repo_files())
        if (f.rfind("docs/", 0) == 0 && fs::path(f).extension() == ".md") out.push_back(f);
    return out;
}

// GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' dropped, spaces to '-'.
std::string slug(const std::string& heading) {
    std::string s;
    for (unsigned char c : heading) {
        if (std::isalnum(c) || c == '-' || c == '_') s += (char)std::tolower(c);
        else if (c == ' ') s += '-';
        else if (c >= 0x80) s += (char)c;  // non-ASCII letters are kept as they are
    }
    return s;
}

// The text of a markdown file with its fenced code blocks blanked (lines kept, so line numbers stay right).
std::string without_fences(const std::string& text) {
    std::istringstream in(text);
    std::string line, out;
    bool fenced = false;
    while (std::getline(in, line)) {
        const bool fence = line.rfind("```", 0) == 0;
        out += (fenced || fence) ? "" : line;
        out += '\n';
        if (fence) fenced = !fenced;
    }
    return out;
}

// The anchors of a markdown file's headings, with GitHub's -1, -2 suffixes for repeats.
std::set<std::string> anchors_of(const std::string& md) {
    std::set<std::string> out;
    std::map<std::string, int> seen;
    std::istringstream in(without_fences(read_file(md)));
    std::string line;
    static const std::regex heading(R"(^#{1,6}\s+(.*?)\s*$)");
    while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_match(line, m, heading)) continue;
        const std::string s = slug(m[1].str());
        const int n = seen[s]++;
        out.insert(n ? s + "-" + std::to_string(n) : s);
    }
    return out;
}

int line_of(const std::string& text, size_t pos) { return 1 + (int)std::count(text.begin(), text.begin() + pos, '\n'); }

// Comment text of a source file, everything else blanked (newlines kept). C-family files: // and /* */ comments
// outside string, character and raw-string literals. Shell, Python and make files: from a '#' that starts a
// line or follows a blank, outside quotes, to the end of the line.
std::string comments_of(const std::string& file, const std::string& text) {
    const std::string ext = fs::path(file).extension().string();
    std::string out(text.size(), ' ');
    for (size_t i = 0; i < text.size(); i++)
        if (text[i] == '\n') out[i] = '\n';
    if (ext == ".h" || ext == ".cuh" || ext == ".cu" || ext == ".cpp") {
        size_t i = 0;
        while (i < text.size()) {
            const char c = text[i];
            if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
                const size_t e = std::min(text.find('\n', i), text.size());
                std::copy(text.begin() + i, text.begin() + e, out.begin() + i);
                i = e;
            } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
                const size_t e = std::min(text.find("*/", i + 2), text.size());
                std::copy(text.begin() + i, text.begin() + e, out.begin() + i);
                for (size_t k = i; k < e; k++)
                    if (text[k] == '\n') out[k] = '\n';
                i = e == text.size() ? e : e + 2;
            } else if (c == 'R' && i + 1 < text.size() && text[i + 1] == '"' &&
                       (i == 0 || !(std::isalnum((unsigned char)text[i - 1]) || text[i - 1] == '_'))) {
                const size_t open = text.find('(', i);
                if (open == std::string::npos) break;
                const std::string close = ")" + text.substr(i + 2, open - i - 2) + "\"";
                const size_t e = text.find(close, open);
                i = e == std::string::npos ? text.size() : e + close.size();
            } else if (c == '"' || c == '\'') {
                size_t k = i + 1;
                while (k < text.size() && text[k] != c && text[k] != '\n') k += text[k] == '\\' ? 2 : 1;
                i = k + 1;
            } else {
                i++;
            }
        }
        return out;
    }
    size_t start = 0;
    while (start < text.size()) {
        const size_t end = std::min(text.find('\n', start), text.size());
        char quote = 0;
        for (size_t k = start; k < end; k++) {
            const char c = text[k];
            if (quote) {
                if (c == '\\') k++;
                else if (c == quote) quote = 0;
            } else if (c == '"' || c == '\'') {
                quote = c;
            } else if (c == '#' && (k == start || std::isspace((unsigned char)text[k - 1]))) {
                std::copy(text.begin() + k, text.begin() + end, out.begin() + k);
                break;
            }
        }
        start = end + 1;
    }
    return out;
}

bool is_commented_source(const std::string& f) {
    static const std::set<std::string> exts{".h", ".cuh", ".cu", ".cpp", ".py", ".sh", ".mk"};
    const std::string name = fs::path(f).filename().string();
    return exts.count(fs::path(f).extension().string()) || name == "Makefile" || f == ".ci/run";
}

// Paths that exist only once something has run: each prefix with the reason.
const std::vector<std::pair<std::string, std::string>> kRunTime = {
    {"out/", "train_prism's default output directories"},
    {"runs/", "the studies' and reports' example directories"},
    {"build/", "what make builds (the test binaries, the GPU bundle and its run.sh copy)"},
    {"data/default/", "the default corpus' shards, written by setup.sh"},
    {"data/cache/", "the tokenizer file, downloaded by setup.sh"},
    {"data/eval/", "the eval files data/get_eval.sh writes"},
    {"data/fineweb", "the FineWeb shards data/get_fineweb.sh or prepare_shards writes"},
};

// Files of other projects that comments name on purpose: each with the reason.
const std::map<std::string, std::string> kElsewhere = {
    {"train_gpt2.cu", "llm.c's trainer, the style Prism follows"},
    {"cuda_runtime.h", "the CUDA toolkit's header, which the executor stands in for"},
    {"cuda_bf16.h", "the CUDA toolkit's header"},
    {"nccl.h", "NCCL's header, found by the Makefile"},
    {"mpi.h", "MPI's header"},
};

struct Ref {
    std::string file;
    int line;
    std::string token;
};

// The repository paths a text names. Tokens are runs of path characters; a candidate ends in one of the
// extensions, with trailing punctuation trimmed; URLs (a first component with a dot) and absolute paths are not
// the repository's.
std::vector<Ref> paths_named(const std::string& file, const std::string& text) {
    static const std::regex token(R"([A-Za-z0-9_./*+-]+)");
    static const std::regex candidate(R"(^(\.\.?/)*([A-Za-z0-9_*+-][A-Za-z0-9_.*+-]*/)*[A-Za-z0-9_*-][A-Za-z0-9_.*-]*)"
                                      R"(\.(h|cuh|cu|cpp|py|sh|mk|md)$)");
    std::vector<Ref> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), token); it != std::sregex_iterator(); ++it) {
        std::string t = it->str();
        const size_t pos = (size_t)it->position();
        while (!t.empty() && (t.back() == '.' || t.back() == '-')) t.pop_back();
        if (t.empty() || t[0] == '/' || (pos > 0 && (text[pos - 1] == ':' || text[pos - 1] == '$'))) continue;
        if (!std::regex_match(t, candidate)) continue;
        const size_t slash = t.find('/');
        if (slash != std::string::npos) {
            const std::string first = t.substr(0, slash);
            if (first != "." && first != ".." && first != ".ci" && first.find('.') != std::string::npos) continue;
        }
        out.push_back({file, line_of(text, pos), t});
    }
    return out;
}

// Whether a named path exists: relative to the root, or to the naming file's directory; a bare name anywhere in
// the tree; a glob (with *) matching at least one file.
bool resolves(const Ref& r) {
    std::string t = r.token;
    while (t.rfind("./", 0) == 0) t = t.substr(2);
    for (const auto& [prefix, why] : kRunTime)
        if (t.rfind(prefix, 0) == 0) return true;
    if (kElsewhere.count(t)) return true;
    const bool glob = t.find('*') != std::string::npos;
    const bool bare = t.find('/') == std::string::npos;
    const std::string dir = fs::path(r.file).parent_path().string();
    const std::string local = (fs::path(dir) / t).lexically_normal().string();
    for (const std::string& f : repo_files()) {
        const std::string name = fs::path(f).filename().string();
        if (glob) {
            if (fnmatch(t.c_str(), (bare ? name : f).c_str(), 0) == 0 || fnmatch(local.c_str(), f.c_str(), 0) == 0)
                return true;
        } else if (f == t || f == local || (bare && name == t)) {
            return true;
        }
    }
    return !glob && (fs::is_directory(t) || fs::is_directory(local));
}

// Where each struct or class is defined (the files that define a type of that name).
const std::map<std::string, std::set<std::string>>& type_homes() {
    static const std::map<std::string, std::set<std::string>> homes = [] {
        static const std::regex def(R"(\b(?:struct|class)\s+([A-Z]\w*)\s*(?:final\s*)?[:{])");
        std::map<std::string, std::set<std::string>> out;
        for (const std::string& f : repo_files()) {
            const std::string e = fs::path(f).extension().string();
            if (e != ".h" && e != ".cuh" && e != ".cu" && e != ".cpp") continue;
            const std::string text = read_file(f);
            for (auto it = std::sregex_iterator(text.begin(), text.end(), def); it != std::sregex_iterator(); ++it)
                out[(*it)[1].str()].insert(f);
        }
        return out;
    }();
    return homes;
}

// The headings of a markdown file, as written (backticks dropped).
std::vector<std::string> headings_of(const std::string& md) {
    std::vector<std::string> out;
    std::istringstream in(without_fences(read_file(md)));
    std::string line;
    static const std::regex heading(R"(^#{1,6}\s+(.*?)\s*$)");
    while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_match(line, m, heading)) continue;
        std::string h = m[1].str();
        h.erase(std::remove(h.begin(), h.end(), '`'), h.end());
        out.push_back(h);
    }
    return out;
}

// Claims a text makes about where things are: a section of a page (README "Status", docs/gpu.md, "The GPU
// bundle") must begin a heading of that page; a type said to live in a file (CudaEngine (cuda_engine.cuh),
// cuda_engine.cuh's CudaEngine) must be defined in it, when a struct or class of that name exists at all.
std::vector<Ref> wrong_claims(const std::string& file, const std::string& text) {
    static const std::regex section(R"re((README|docs/[a-z_]+\.md)(?:'s)?,? "([^"\n]+)")re");
    static const std::regex type_then_file(R"(\b([A-Z][A-Za-z0-9]+) \(([A-Za-z0-9_/]+\.(?:h|cuh|cu|cpp))\b)");
    static const std::regex file_then_type(R"(\b([A-Za-z0-9_/]+\.(?:h|cuh|cu|cpp))'s ([A-Z][A-Za-z0-9]+)\b)");
    std::vector<Ref> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), section); it != std::sregex_iterator(); ++it) {
        const std::string page = (*it)[1].str() == "README" ? "README.md" : (*it)[1].str(), name = (*it)[2].str();
        bool found = false;
        if (fs::exists(page))
            for (const std::string& h : headings_of(page)) found = found || h.rfind(name, 0) == 0;
        if (!found) out.push_back({file, line_of(text, (size_t)it->position()), it->str()});
    }
    const auto check_type = [&](const std::string& type, const std::string& path, size_t pos, const std::string& what) {
        const auto home = type_homes().find(type);
        if (home == type_homes().end()) return;
        for (const std::string& f : home->second)
            if (f == path || fs::path(f).filename() == path) return;
        out.push_back({file, line_of(text, pos), what + " (defined in " + *home->second.begin() + ")"});
    };
    for (auto it = std::sregex_iterator(text.begin(), text.end(), type_then_file); it != std::sregex_iterator(); ++it)
        check_type((*it)[1].str(), (*it)[2].str(), (size_t)it->position(), it->str());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), file_then_type); it != std::sregex_iterator(); ++it)
        check_type((*it)[2].str(), (*it)[1].str(), (size_t)it->position(), it->str());
    return out;
}

std::string describe(const std::vector<Ref>& refs) {
    std::string s;
    for (const Ref& r : refs) s += "  " + r.file + ":" + std::to_string(r.line) + ": " + r.token + "\n";
    return s;
}

}  // namespace

TEST_CASE("every relative link in README.md and docs/ resolves, anchors included", "[docs]") {
    const std::vector<std::string> docs = markdown_docs();
    REQUIRE(docs.size() > 5);  // the README and the docs/ pages
    static const std::regex link(R"(\]\(([^)\s]+)\))");
    std::vector<Ref> broken;
    int checked = 0, anchored = 0;
    for (const std::string& md : docs) {
        const std::string text = without_fences(read_file(md));
        for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
            const std::string target = (*it)[1].str();
            if (target.find("://") != std::string::npos || target.rfind("mailto:", 0) == 0) continue;
            const size_t hash = target.find('#');
            const std::string path = target.substr(0, hash);
            const std::string anchor = hash == std::string::npos ? "" : target.substr(hash + 1);
            const fs::path resolved =
                path.empty() ? fs::path(md) : (fs::path(md).parent_path() / path).lexically_normal();
            const Ref r{md, line_of(text, (size_t)it->position()), target};
            checked++;
            if (resolved.string().rfind("..", 0) == 0 || !fs::exists(resolved)) {
                broken.push_back(r);
                continue;
            }
            if (!anchor.empty()) {
                anchored++;
                if (resolved.extension() != ".md" || !anchors_of(resolved.string()).count(anchor)) broken.push_back(r);
            }
        }
    }
    INFO("links checked: " << checked << " (" << anchored << " with anchors); broken:\n" << describe(broken));
    CHECK(checked > 20);
    CHECK(anchored > 5);
    CHECK(broken.empty());
}

TEST_CASE("every repository path named in a document or a source comment exists", "[docs]") {
    std::vector<Ref> named;
    for (const std::string& md : markdown_docs()) {
        const std::vector<Ref> r = paths_named(md, read_file(md));
        named.insert(named.end(), r.begin(), r.end());
    }
    size_t from_docs = named.size();
    for (const std::string& f : repo_files()) {
        if (!is_commented_source(f)) continue;
        const std::vector<Ref> r = paths_named(f, comments_of(f, read_file(f)));
        named.insert(named.end(), r.begin(), r.end());
    }
    std::vector<Ref> missing;
    for (const Ref& r : named)
        if (!resolves(r)) missing.push_back(r);
    INFO("paths named: " << from_docs << " in documents, " << named.size() - from_docs << " in comments; missing:\n"
                         << describe(missing));
    CHECK(from_docs > 100);
    CHECK(named.size() - from_docs > 100);
    CHECK(missing.empty());
}

TEST_CASE("every section and type a document or comment points at is where it says", "[docs]") {
    std::vector<Ref> wrong;
    for (const std::string& md : markdown_docs()) {
        const std::vector<Ref> r = wrong_claims(md, read_file(md));
        wrong.insert(wrong.end(), r.begin(), r.end());
    }
    for (const std::string& f : repo_files()) {
        if (!is_commented_source(f)) continue;
        const std::vector<Ref> r = wrong_claims(f, comments_of(f, read_file(f)));
        wrong.insert(wrong.end(), r.begin(), r.end());
    }
    INFO("wrong:\n" << describe(wrong));
    CHECK(type_homes().count("CudaEngine"));
    CHECK(wrong.empty());
}

TEST_CASE("the docs checks catch what they are for", "[docs]") {
    // A stale name in a comment, a URL, a string literal and a run-time path: only the first is a claim to check.
    const std::string src =
        "// see inspect/decoders.h and model.cuh\nconst char* s = \"not/a_comment.h\";\n"
        "// https://example.com/x/y.md, out/tiny/a.py, R\"(x)\" done\n";
    const std::vector<Ref> r = paths_named("x.cpp", comments_of("x.cpp", src));
    std::vector<std::string> tokens;
    for (const Ref& x : r) tokens.push_back(x.token);
    CHECK(tokens == std::vector<std::string>{"inspect/decoders.h", "model.cuh", "out/tiny/a.py"});
    CHECK(!resolves(r[0]));
    CHECK(resolves(r[1]));
    CHECK(resolves(r[2]));
    CHECK(!resolves({"x.cpp", 1, "test_inspect.cpp"}));
    CHECK(resolves({"x.cpp", 1, "test/test_*.cpp"}));
    CHECK(comments_of("a.sh", "echo \"# no\" ${#x} # yes ref/ops.h\n") == std::string(18, ' ') + "# yes ref/ops.h\n");
    CHECK(slug("The GPU bundle: everything a GPU must confirm, in one 8-minute run") ==
          "the-gpu-bundle-everything-a-gpu-must-confirm-in-one-8-minute-run");
    CHECK(slug("state_rank<r>.bin") == "state_rankrbin");
    const std::vector<Ref> claims = wrong_claims("x.cpp",
                                                 "// CudaEngine (model.cuh), model.cuh's CudaEngine, CudaEngine "
                                                 "(cuda_engine.cuh), README \"No such section\", README "
                                                 "\"The code\", Word (model.cuh)\n");
    REQUIRE(claims.size() == 3);
    CHECK(claims[0].token == "README \"No such section\"");
    CHECK(claims[1].token.rfind("CudaEngine (model.cuh", 0) == 0);
    CHECK(claims[2].token.rfind("model.cuh's CudaEngine", 0) == 0);
    CHECK(slug("Tests: what `make test` checks") == "tests-what-make-test-checks");
}

namespace {

// The text of a markdown file from the heading line `heading` to the next heading of its level or higher.
std::string md_section(const std::string& md, const std::string& heading) {
    const std::string text = read_file(md);
    const size_t at = text.find("\n" + heading + "\n");
    INFO(md << " has no heading '" << heading << "'");
    REQUIRE(at != std::string::npos);
    const size_t level = heading.find(' ');
    for (size_t end = text.find("\n#", at + 1); end != std::string::npos; end = text.find("\n#", end + 1))
        if (text.find_first_not_of('#', end + 1) - (end + 1) <= level) return text.substr(at, end - at);
    return text.substr(at);
}

bool is_code(const std::string& f) {
    static const std::set<std::string> exts{".h", ".cuh", ".cu", ".cpp", ".py"};
    return exts.count(fs::path(f).extension().string()) > 0;
}

// The product's source files: everything but the tests, the dev tools, the executor (drawn as one folder), CI.
std::vector<std::string> product_sources() {
    std::vector<std::string> out;
    for (const std::string& f : repo_files())
        if (is_code(f) && f.rfind("test/", 0) != 0 && f.rfind("dev/", 0) != 0 && f.rfind("cuda_cpu/", 0) != 0 &&
            f.rfind(".ci/", 0) != 0)
            out.push_back(f);
    return out;
}

// The files docs/walkthrough.md's map of the code names: a root line's file names, and in a folder's entry (a line that
// starts with "DIR/", and its indented continuation lines) each file name, under that folder.
std::set<std::string> code_map_files() {
    const std::string sec = md_section("docs/walkthrough.md", "## The map of the code");
    const size_t open = sec.find("```\n"), close = sec.find("\n```", open + 4);
    REQUIRE(close != std::string::npos);
    std::istringstream in(sec.substr(open + 4, close - open - 4));
    static const std::regex name(R"([A-Za-z0-9_./-]+\.(h|cuh|cu|cpp|py))");
    static const std::regex folder(R"(^([a-z_]+/)\s)");
    std::set<std::string> out;
    std::string line, dir;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, folder)) dir = m[1].str();
        else if (!line.empty() && line[0] != ' ') dir = "";
        for (auto it = std::sregex_iterator(line.begin(), line.end(), name); it != std::sregex_iterator(); ++it) {
            const std::string f = it->str();
            out.insert(f.find('/') != std::string::npos ? f : dir + f);
        }
    }
    return out;
}

// A file's quoted includes as written (every include resolves from the root or the file's folder).
std::vector<std::string> quoted_includes(const std::string& file) {
    static const std::regex inc(R"(^\s*#\s*include\s*"([^"]+)\")");
    std::vector<std::string> out;
    std::istringstream in(read_file(file));
    std::string line;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_search(line, m, inc)) out.push_back(m[1].str());
    }
    return out;
}

// Every project file `file` includes, directly or through others; files under the folder `skip` (a prefix such as
// "cuda_cpu/") are neither counted nor followed.
std::set<std::string> include_closure(const std::string& file, const std::string& skip = "") {
    std::set<std::string> seen;
    std::vector<std::string> todo{file};
    while (!todo.empty()) {
        const std::string f = todo.back();
        todo.pop_back();
        for (const std::string& inc : quoted_includes(f)) {
            const std::string local = (fs::path(f).parent_path() / inc).lexically_normal().string();
            const std::string g = fs::exists(local) && !fs::path(f).parent_path().empty() ? local : inc;
            if ((skip.empty() || g.rfind(skip, 0) != 0) && fs::exists(g) && seen.insert(g).second) todo.push_back(g);
        }
    }
    return seen;
}

// The backticked file names of a text, in order.
std::vector<std::string> ticked_files(const std::string& text) {
    static const std::regex tick(R"(`([A-Za-z0-9_./-]+\.(?:h|cuh|cu|cpp))`)");
    std::vector<std::string> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), tick); it != std::sregex_iterator(); ++it)
        out.push_back((*it)[1].str());
    return out;
}

// Kernel files: the product's .cuh files that define a kernel.
std::vector<std::string> kernel_files() {
    std::vector<std::string> out;
    for (const std::string& f : product_sources())
        if (fs::path(f).extension() == ".cuh" && read_file(f).find("__global__") != std::string::npos) out.push_back(f);
    return out;
}

}  // namespace

TEST_CASE("docs/walkthrough.md's map of the code names every product source file", "[docs]") {
    const std::set<std::string> named = code_map_files();
    REQUIRE(named.size() > 40);
    for (const std::string& f : product_sources()) {
        INFO(
            f << " is not in docs/walkthrough.md's \"The map of the code\" (name it on its folder's line, with what it "
                 "is for)");
        CHECK(named.count(f));
    }
    for (const std::string& f : named) {
        INFO("docs/walkthrough.md's \"The map of the code\" names " << f << ", which does not exist");
        CHECK(fs::exists(f));
    }
}

TEST_CASE("docs/walkthrough.md's file lists: the counts it states, every file on the trainer's include path",
          "[docs]") {
    const std::string md = "docs/walkthrough.md";
    // The trainer is train_prism.cu and, in a CUDA build, the engine it links (cuda_engine.cu, compiled once), made
    // by make_engine (engine.cpp, compiled apart: the Makefile's LIB).
    std::set<std::string> trainer = include_closure("train_prism.cu");
    for (const std::string& f : include_closure("cuda_engine.cu")) trainer.insert(f);
    for (const char* f : {"train_prism.cu", "cuda_engine.cu", "engine.cpp"}) trainer.insert(f);
    REQUIRE(trainer.count("model.cuh"));
    // The CPU path: "the CPU engine's, N files", the distinct files before "On a GPU".
    const std::string cpu = md_section(md, "## One training step on the CPU, file by file");
    static const std::regex cpu_count(R"(the CPU engine's, ([0-9]+) files)");
    std::smatch m;
    REQUIRE(std::regex_search(cpu, m, cpu_count));
    const std::vector<std::string> cpu_files = ticked_files(cpu.substr(0, cpu.find("On a GPU")));
    CHECK(std::set<std::string>(cpu_files.begin(), cpu_files.end()).size() == std::stoul(m[1].str()));
    // The GPU path: one numbered item per file; "That is **N files**: a to set up, b on the step's path, c beneath
    // the kernels", each part the items under its lead-in line.
    const std::string gpu = md_section(md, "## One training step on the GPU, file by file");
    std::istringstream in(gpu);
    std::string line;
    std::vector<int> parts;
    int items = 0;
    static const std::regex item(R"(^([0-9]+)\. `([^`]+)`)");
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == ':' && line.find('`') == std::string::npos) parts.push_back(0);
        std::smatch im;
        if (!std::regex_search(line, im, item)) continue;
        items++;
        INFO(md << " item " << im[1].str() << ": " << im[2].str());
        CHECK(std::stoi(im[1].str()) == items);
        CHECK(trainer.count(im[2].str()));
        REQUIRE(!parts.empty());
        parts.back()++;
    }
    static const std::regex total(
        R"(That is \*\*([0-9]+) files\*\*: ([0-9]+) to set up, ([0-9]+) on the step's path, ([0-9]+) beneath)");
    REQUIRE(std::regex_search(gpu, m, total));
    CHECK(items == std::stoi(m[1].str()));
    CHECK(parts == std::vector<int>{std::stoi(m[2].str()), std::stoi(m[3].str()), std::stoi(m[4].str())});
    for (const std::string& f : ticked_files(gpu)) {
        INFO(md << " names " << f);
        CHECK(fs::exists(f));
    }
}

TEST_CASE("docs/walkthrough.md's figure of the trainer's include closure is the code's", "[docs]") {
    // dev/closure.sh's measure: the project files train_prism.cu (built for the GPU) and cuda_engine.cu include,
    // themselves with them. The CUDA-on-CPU executor (cuda_cpu/) is not part of a GPU build: not followed.
    std::set<std::string> files{"train_prism.cu", "cuda_engine.cu"};
    for (const char* top : {"train_prism.cu", "cuda_engine.cu"})
        for (const std::string& f : include_closure(top, "cuda_cpu/")) files.insert(f);
    long lines = 0;
    for (const std::string& f : files) {
        const std::string text = read_file(f);
        lines += (long)std::count(text.begin(), text.end(), '\n');
    }
    const std::string md = read_file("docs/walkthrough.md");
    static const std::regex stated(R"(include closure[^*]*\*\*([0-9]+) files, ([0-9,]+) lines\*\*)");
    std::smatch m;
    REQUIRE(std::regex_search(md, m, stated));
    std::string n = m[2].str();
    n.erase(std::remove(n.begin(), n.end(), ','), n.end());
    CHECK(std::stoul(m[1].str()) == files.size());
    CHECK(std::stol(n) == lines);
}

TEST_CASE("docs/tests.md's kernel-file rule holds: what a kernel file includes, and never a ModelConfig", "[docs]") {
    // "A kernel file includes only `a`, `b`, ...; it never uses a `ModelConfig`": the allowed includes, from the page.
    const std::string text = read_file("docs/tests.md");
    const size_t at = text.find("A kernel file includes only");
    REQUIRE(at != std::string::npos);
    const std::string rule = text.substr(at, text.find(';', at) - at);
    const std::vector<std::string> listed = ticked_files(rule);
    const std::set<std::string> allowed(listed.begin(), listed.end());
    REQUIRE(allowed.count("cuda_common.cuh"));
    const std::vector<std::string> kernels = kernel_files();
    REQUIRE(kernels.size() >= 10);
    for (const std::string& f : kernels) {
        for (const std::string& inc : quoted_includes(f)) {
            INFO(f << " includes " << inc << ", which docs/tests.md's rule does not allow");
            CHECK(allowed.count(inc));
        }
        std::istringstream in(read_file(f));
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
            n++;
            const std::string code = line.substr(0, line.find("//"));
            INFO(f << ":" << n << " uses a ModelConfig: " << line);
            CHECK(code.find("ModelConfig") == std::string::npos);
        }
    }
}
