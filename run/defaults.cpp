// run/defaults.cpp: the defaults that depend on the machine, the model or the data (run/defaults.h).
#include "run/defaults.h"

#include <algorithm>

#include "util/fs.h"

void default_run(TrainOptions& o, const ModelConfig& cfg, int world, std::vector<std::string>& notes) {
    const double P = (double)param_layout(cfg).total;
    const bool large = P >= kLargeModel;
    if (std::isnan(o.lr)) o.lr = default_lr(P);
    bool demo = false;
    if (o.train.empty()) {
        const bool fineweb = is_dir("data/fineweb10B");
        const std::string dir = fineweb ? "data/fineweb10B" : "data/default";
        o.train = dir + "/*_train_*.bin";
        if (o.val.empty()) o.val = dir + "/*_val_*.bin";
        demo = !fineweb;
        if (demo && large)
            notes.push_back(
                "data/fineweb10B/ not found: training on data/default/, a demonstration corpus of ~3M "
                "tokens, for " +
                std::to_string((int)kDemoPasses) +
                " passes; bash data/get_fineweb.sh "
                "fetches FineWeb for the papers' run");
    }
    if (o.val.empty()) o.val = "data/default/*_val_*.bin";
    const bool length_given = o.steps || o.tokens || o.tokens_per_param > 0 || o.epochs > 0;
    if (!o.total_batch && large && !demo) {
        const long T = o.T ? o.T : cfg.T, unit = (long)o.B * T * world;
        o.total_batch = std::max(1L, std::lround((double)kPaperBatchTokens / unit)) * unit;
        if (o.total_batch != kPaperBatchTokens)
            notes.push_back("total batch " + std::to_string(o.total_batch) + " tokens: the papers' " +
                            std::to_string(kPaperBatchTokens) +
                            " rounded to a multiple of B*T*ranks = " + std::to_string(unit));
    }
    if (!length_given && large) {
        if (demo) o.epochs = kDemoPasses;
        else o.tokens_per_param = kPaperTokensPerParam;
    }
    if (o.out.empty()) o.out = default_out_dir(o.model);
    if (o.lr_schedule == "wsd") {  // what the record keeps, so that a resume compares the values themselves
        if (std::isnan(o.decay_frac)) o.decay_frac = kWsdDecayFrac;
        if (o.decay_shape.empty()) o.decay_shape = "sqrt";
    }
}
