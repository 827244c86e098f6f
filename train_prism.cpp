// train_prism: the trainer's command line. `--plan` prints the per-layer table and totals of a model and
// exits (`--plan --json` as JSON); see README.md for every flag.
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "plan.h"
#include "schedule.h"

struct Options {
    ModelSpec model;
    bool plan = false, json = false, help = false;
};

static std::vector<Flag> make_flags(Options& o) {
    std::vector<Flag> f;
    f.push_back({"-h, --help", "", "print this help and exit", [&o](const std::string&) { o.help = true; }});
    f.push_back({"--plan", "", "print the per-layer table and totals of the model and exit",
                 [&o](const std::string&) { o.plan = true; }});
    f.push_back({"--json", "", "with --plan: print it as JSON", [&o](const std::string&) { o.json = true; }});
    add_model_flags(f, o.model);
    return f;
}

int main(int argc, char** argv) {
    Options o;
    std::vector<Flag> flags = make_flags(o);
    try {
        parse_flags(argc, argv, flags, "train_prism");
        if (o.help) {
            printf("usage: train_prism [flags]\n\n");
            print_flags(stdout, flags);
            return 0;
        }
        std::vector<std::string> warnings;
        ModelConfig cfg = build_config(o.model, warnings);
        for (const auto& w : warnings) fprintf(stderr, "warning: %s\n", w.c_str());
        if (o.json && !o.plan) throw ConfigError("--json only applies to --plan");
        std::string title = o.model.preset + " (heads " + o.model.heads + ", widths " + o.model.widths + ")";
        if (o.plan) {
            if (o.json) print_plan_json(stdout, title, cfg, warnings);
            else print_plan(stdout, title, cfg);
            return 0;
        }
        throw ConfigError("training is not built yet; use --plan");
    } catch (const ConfigError& e) {
        fprintf(stderr, "train_prism: error: %s\n", e.what());
        return 2;
    }
}
