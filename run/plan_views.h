// run/plan_views.h: the human and JSON views of a ModelConfig: the per-layer table every tool shows (layer_table:
// the columns of model/layer_columns.h a model uses, "-" for those of a sub-block a layer does not have; --plan, report,
// analyze and export's model card), `train_prism --plan`'s (that table with parameters, forward FLOPs per token
// and KV-cache bytes per token per layer; a gdn model's recurrent state bytes per sequence) and the totals of the
// model next to its uniform baseline, with ratios. See model_config.h for what each count includes. Layers are
// numbered from 1 here as everywhere a layer is shown (errors, analyze, report, run records).
// Its body is run/plan_views.cpp (compiled apart: the Makefile's LIB).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "model_config.h"

struct LayerColumn;
enum class SubBlock;

// "3,3,3,6,6,6,12,12" -> "3x3,6x3,12x2": the run-length form the -s and -w flags accept.
std::string rle_list(const std::vector<int>& v);

// A column of words' values in the run-length form its flag accepts: "gdnx3,attention,gdnx3,attention".
std::string rle_words(const LayerColumn& col, const std::vector<int>& v);

// A column's values by its model.bin name (model/layer_columns.h), one per layer.
std::vector<int> layer_values(const std::string& name, const ModelConfig& c);
inline std::vector<int> layer_widths(const ModelConfig& c) { return layer_values("width", c); }
inline std::vector<int> layer_heads(const ModelConfig& c) { return layer_values("heads", c); }
inline std::vector<int> layer_kv_heads(const ModelConfig& c) { return layer_values("kv_heads", c); }
inline std::vector<int> layer_hidden(const ModelConfig& c) { return layer_values("hidden", c); }
inline std::vector<int> layer_windows(const ModelConfig& c) { return layer_values("window", c); }
// Whether any layer departs from today's layer in a column besides width and heads (then the plan shows them).
bool has_layer_columns(const ModelConfig& c);
// Layer l's shape as JSON members (no braces), `--plan --json`'s and the run record's: "layer" (from 1), every column's
// key and value (model/layer_columns.h; a switch true/false), head_dim; null where the tables show "-" (a layer without
// attention has no heads, kv_heads, window, rope or head_dim; one without an MLP no hidden), "attention": false why.
std::string layer_json_members(const ModelConfig& c, int l);
// Whether layer l has the sub-block a column describes (a column of the layer itself: always).
bool has_part(SubBlock part, const ModelConfig& c, int l);

// Layer l's cell of col in every per-layer table (--plan, report, analyze, export's model card): "-" where the
// layer lacks col's sub-block; a switch "yes" where the layer has what it names, else "no" (a NoPE layer's RoPE);
// 0 as the column's word for it ("global"); else the value.
std::string layer_cell(const LayerColumn& col, const ModelConfig& c, int l);

// The per-layer columns the tables show for these models: width and heads always; every other column where some
// layer of some model departs from the uniform model's value, or (every_number) every column that is a number
// (a column of words, the mixer, only where some layer departs).
std::vector<const LayerColumn*> shown_columns(const std::vector<const ModelConfig*>& models, bool every_number = false);

// One column of a per-layer table: its heading and one cell per layer.
struct LayerTableColumn {
    std::string heading;
    std::vector<std::string> cells;
};

// The characters a column of a text table needs: its heading's or its widest cell's, at least 4.
size_t column_width(const LayerTableColumn& col);

// A model's per-layer table over the shown columns (shown_columns), head_dim after heads ("-" without attention).
std::vector<LayerTableColumn> layer_table(const ModelConfig& c, const std::vector<const LayerColumn*>& cols);

// "3,5-7" from a mask; "" when none is set.
std::string layer_ranges(const std::vector<bool>& m);

// s padded with spaces to n characters.
inline std::string pad_right(std::string s, size_t n) { return s.size() < n ? s.append(n - s.size(), ' ') : s; }

// 123456789 -> "123.46M"
std::string human(double x);

// The SwiGLU hidden size is the one built (hidden_of: R w rounded to the multiple, at least one multiple), so
// that a multiple far above R w shows what it makes.
std::string describe_config(const ModelConfig& c);

// A column as one indented line: "  kv     3x3,6x3,4x6", or for a switch the layers it is set in ("  no
// attention: layers 3,5"; "" when none).
std::string layer_column_line(const LayerColumn& col, const ModelConfig& c);

// The per-layer columns beyond widths and heads, one line each, for every tool that prints a model (a column of
// words only where a layer departs); "" for a model of widths and heads alone.
std::string layer_column_lines(const ModelConfig& c);

// A per-layer number of the run rather than of the model (the optimizer's multipliers, run/defaults.h's
// optimizer_plan_columns): --plan's table shows it after the model's columns, --plan --json as a member of each layer.
struct RunLayerColumn {
    std::string heading, key;
    std::vector<double> values;  // one per layer
};

void print_plan(FILE* f, const std::string& title, const ModelConfig& c, const std::vector<RunLayerColumn>& run = {});

void print_totals_json(FILE* f, const Accounting& a);

void print_plan_json(FILE* f, const std::string& title, const ModelConfig& c, const std::vector<std::string>& warnings,
                     const std::vector<RunLayerColumn>& run = {});
