// project_files.h: the project's own files, for the tests that read the whole tree (test_docs.cpp's links, paths and
// map of the code; test_layout.cpp's includes and make files). What a user makes inside the checkout as the docs
// say (a Python environment for docs/live.md, runs/, out/, build/, the downloaded data) is not the project's, and a
// scan that read it would check other projects' files against this project's rules.
// In a git checkout whose top is the root: git's list (tracked files, and new files git does not ignore: .gitignore
// decides), those that exist and are not in a Python virtual environment (a directory that holds a pyvenv.cfg,
// whatever its name: .gitignore names only the ones the docs make). Elsewhere (an unpacked archive, git missing or
// refusing the directory): every file under the root, leaving out hidden directories but .ci, the directories of
// kGenerated, and any directory that holds a pyvenv.cfg.
// Paths are relative to the root, sorted. project_files() is the checkout's (run from its root, as make test does);
// project_files_in(DIR), any directory's (test_layout.cpp tries both ways on a tree it makes).
#pragma once

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "test/test_util.h"

namespace project_files_detail {

// Directories a run, a download or a build writes inside the checkout (the same ones .gitignore names).
inline const std::set<std::string> kGenerated = {"build",      "out",       "runs",        "wandb",
                                                 "data/cache", "data/eval", "data/default"};

inline bool generated_dir(const std::filesystem::path& dir, const std::string& rel) {
    return kGenerated.count(rel) || rel.rfind("data/fineweb", 0) == 0 || std::filesystem::exists(dir / "pyvenv.cfg");
}

// Whether rel (a file) lies in a directory that holds a pyvenv.cfg, below root.
inline bool in_venv(const std::string& root, const std::string& rel) {
    for (std::filesystem::path dir = std::filesystem::path(rel).parent_path(); !dir.empty(); dir = dir.parent_path())
        if (std::filesystem::exists(std::filesystem::path(root) / dir / "pyvenv.cfg")) return true;
    return false;
}

// git's list, or false where root is not the top of a git checkout that git will read.
inline bool git_files(const std::string& root, std::vector<std::string>& out) {
    const std::string git = "git -C '" + root + "' ";
    const Result top = sh("{ " + git + "rev-parse --show-toplevel; } 2>/dev/null");
    std::string dir = top.out;
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
    std::error_code ec;
    if (top.rc != 0 || dir.empty() || !std::filesystem::equivalent(dir, root, ec)) return false;
    const Result ls = sh("{ " + git + "ls-files -z --cached --others --exclude-standard; } 2>/dev/null");
    if (ls.rc != 0) return false;
    for (size_t at = 0, end; at < ls.out.size(); at = end + 1) {
        end = std::min(ls.out.find('\0', at), ls.out.size());
        const std::string f = ls.out.substr(at, end - at);
        if (!f.empty() && std::filesystem::is_regular_file(std::filesystem::path(root) / f) && !in_venv(root, f))
            out.push_back(f);
    }
    return true;
}

inline std::vector<std::string> walked_files(const std::string& root) {
    namespace fs = std::filesystem;
    std::vector<std::string> out;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        const std::string rel = fs::relative(it->path(), root).string();
        const std::string name = it->path().filename().string();
        const bool hidden = name.size() > 1 && name[0] == '.' && name != ".ci";
        if (it->is_directory() && (hidden || generated_dir(it->path(), rel))) {
            it.disable_recursion_pending();
            continue;
        }
        if (it->is_regular_file()) out.push_back(rel);
    }
    return out;
}

}  // namespace project_files_detail

// use_git false: the walk even in a git checkout (the test of the walk).
inline std::vector<std::string> project_files_in(const std::string& root, bool use_git = true) {
    std::vector<std::string> out;
    if (!use_git || !project_files_detail::git_files(root, out)) out = project_files_detail::walked_files(root);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

inline const std::vector<std::string>& project_files() {
    static const std::vector<std::string> files = project_files_in(".");
    return files;
}
