// util/mfu.h: model FLOPs utilisation. MFU = 3 x dense forward FLOPs per token (model_config.h's account(), attention
// over the full T x T square, as PaLM and llm.c count) x tokens/s / the device's dense bf16 peak. The table
// holds dense bf16 tensor-core peaks (TFLOP/s, fp32 accumulate, no sparsity), matched against the CUDA device
// name in order, so more specific names come first. A device missing from the table has peak 0 and no MFU
// is printed (never a made-up number).
#pragma once

#include <string>

struct DevicePeak {
    const char* name;
    double tflops;
};

inline double peak_bf16_tflops(const std::string& device) {
    static const DevicePeak peaks[] = {
        {"H200", 989.0},      {"GH200", 989.0},    {"H100 SXM", 989.0}, {"H100 80GB HBM3", 989.0}, {"H100 NVL", 835.0},
        {"H100 PCIe", 756.0}, {"H100", 756.0},     {"A100", 312.0},     {"L40S", 362.0},           {"L4", 121.0},
        {"A10G", 70.0},       {"RTX 4090", 165.2}, {"RTX 3090", 71.0},
    };
    for (const DevicePeak& p : peaks)
        if (device.find(p.name) != std::string::npos) return p.tflops;
    return 0;
}
