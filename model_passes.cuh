// model_passes.cuh: CudaEngine's per-step members, defined out of line: the activation memory (carve,
// ensure_acts), the uploads of a micro-batch (tokens, targets, embedding buckets), the forward to the logits and
// the loss, the backward, and the read-outs (target log-probabilities, one position's logits). The class and its
// set-up, the optimizer and the data-parallel reductions are model.cuh's, which includes this file at its end;
// include model.cuh, not this file.
#pragma once

// Lays out the activations for B x T into a (base == nullptr: only measures, a gets null pointers).
// memory_plan.h's activation_bytes mirrors this, array for array.
inline size_t CudaEngine::carve(char* base, int B, int T, Acts& a) const {
    const long N = (long)B * T;
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df();
    const ActivationWidths wd = activation_widths(cfg_);
    Carver c{base, 0};
    a.upload[0] = c.take<int>(upload_ints(N)), a.upload[1] = c.take<int>(upload_ints(N));
    a.resid = c.take<bf16>((size_t)(2 * L + 1) * N * D);
    a.layer.resize(L);
    bf16* shared_ln = recompute_ ? c.take<bf16>(N * wd.wmax) : nullptr;    // (N, wmax): ln1 and ln2 of every layer
    bf16* shared_sw = recompute_ ? c.take<bf16>(N * wd.hidmax) : nullptr;  // (N, hidmax)
    for (int l = 0; l < L; l++) {
        const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
        LayerActs& la = a.layer[l];
        la.qkv = c.take<bf16>(N * 3 * w), la.atty = c.take<bf16>(N * w), la.fc = c.take<bf16>(N * 2 * hid);
        la.ln1 = recompute_ ? shared_ln : c.take<bf16>(N * w);
        la.ln2 = recompute_ ? shared_ln : c.take<bf16>(N * w);
        la.sw = recompute_ ? shared_sw : c.take<bf16>(N * hid);
        la.mean1 = c.take<float>(N), la.rstd1 = c.take<float>(N), la.mean2 = c.take<float>(N);
        la.rstd2 = c.take<float>(N), la.lse = c.take<float>(N * h);
    }
    a.branch = c.take<bf16>(N * wd.wmax), a.lnf = c.take<bf16>(N * Df), a.logits = c.take<bf16>(N * Vp_);
    a.meanf = c.take<float>(N), a.rstdf = c.take<float>(N), a.lse = c.take<float>(N), a.losses = c.take<float>(N);
    a.dresid = c.take<bf16>(N * D), a.dbig = c.take<bf16>(N * wd.big), a.dsmall = c.take<bf16>(N * wd.small);
    a.norm_scratch = c.take<float>(norm_backward_scratch_floats(N, std::max(wd.wmax, Df)));
    a.att_scratch = c.take<float>(N * wd.hmax);
    a.logprobs = c.take<float>(N);
    static_assert(EMB_SEGMENT == EMBEDDING_SEGMENT, "memory_plan.h mirrors embedding.cuh's segment length");
    a.emb_partial = c.take<float>((size_t)embedding_partial_rows(N) * cfg_.d);
    return c.bytes;
}

inline void CudaEngine::ensure_acts(int B, int T) {
    if (B == acts_B_ && T == acts_T_) return;
    // Rows are carved per (B, T) (the residual states are indexed with N = B T), so re-carve on any change;
    // the allocation only grows (cudaFree waits for the device). The new layout overlaps memory queued work may
    // still use, so the upload stream first waits for everything queued on the compute stream.
    const long N = (long)B * T;
    Acts measured;
    const size_t bytes = carve(nullptr, B, T, measured);
    if (N > acts_N_ || !acts_mem_) {
        cudaCheck(cudaFree(acts_mem_));
        cudaCheck(cudaMalloc(&acts_mem_, bytes));
        acts_N_ = N;
    }
    carve(acts_mem_, B, T, a_);
    acts_B_ = B, acts_T_ = T;
    cudaCheck(cudaEventRecord(carved_, compute_));
    cudaCheck(cudaStreamWaitEvent(copy_, carved_, 0));
}

// Stages inputs (and targets) in pinned memory and queues their copy into this micro-batch's device slot on the
// upload stream; the compute stream waits for it. Returns the number of unmasked targets.
inline long CudaEngine::upload_batch(const int* inputs, const int* targets, long N) {
    slot_ = 1 - slot_;
    int* host = ring_.acquire(upload_ints(N), compute_);
    std::copy_n(inputs, N, host);
    long count = 0;
    if (targets)
        for (long n = 0; n < N; n++) host[N + n] = targets[n], count += targets[n] >= 0;
    cudaCheck(cudaStreamWaitEvent(copy_, slot_free_[slot_], 0));  // the micro-step before last is done with it
    cudaCheck(cudaMemcpyAsync(a_.upload[slot_], host, (targets ? 2 : 1) * N * sizeof(int), cudaMemcpyHostToDevice,
                              copy_));
    cudaCheck(cudaEventRecord(uploaded_[slot_], copy_));
    cudaCheck(cudaStreamWaitEvent(compute_, uploaded_[slot_], 0));
    last_host_ = host;
    return count;
}

// The embedding backward's buckets, built from the host's tokens into the slot's staging and uploaded; called
// once the forward is queued, so the sort overlaps the GPU's work.
inline void CudaEngine::upload_buckets(const int* inputs, long N) {
    int* host = last_host_;
    const Upload h = upload_of(host, N);
    emb_ = embedding_plan(inputs, N, h.positions, h.seg_start, h.seg_row, h.seg_slot, h.fin_row, h.fin_first,
                          bucket_count_);
    cudaCheck(cudaMemcpyAsync(upload_of(a_.upload[slot_], N).positions, h.positions, (upload_ints(N) - 2 * N) * sizeof(int),
                              cudaMemcpyHostToDevice, copy_));
    cudaCheck(cudaEventRecord(buckets_uploaded_[slot_], copy_));
}

inline void CudaEngine::forward_to_logits(int B, int T) {
    const long N = (long)B * T;
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d;
    const float eps = (float)cfg_.norm_eps;
    const bf16* none = nullptr;
    const Upload up = upload_of(a_.upload[slot_], N);
    embedding_forward(resid(0), up.tokens, P(glayout_.wte), N, d, D, compute_);
    mark("embedding_forward");
    {
        const LayerOffsets& o = glayout_.layer[0];
        norm_forward(rms_, a_.layer[0].ln1, a_.layer[0].mean1, a_.layer[0].rstd1, resid(0), D, P(o.ln1_w),
                     P(o.ln1_b), N, cfg_.layers[0].width, eps, compute_);
        mark("norm_forward");
    }
    for (int l = 0; l < L; l++) {
        const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
        const LayerOffsets& o = glayout_.layer[l];
        LayerActs& a = a_.layer[l];
        matmul(a.qkv, a.ln1, P(o.wqkv), none, (int)N, 3 * w, w, false, true, 0.0f, compute_);
        mark("matmul qkv");
        rope_forward(a.qkv, table_of_.at(w / h), B, T, w, h, compute_);
        mark("rope_forward");
        attention_forward(a.atty, a.lse, a.qkv, B, T, w, h, attn_scale(l), compute_);
        mark("attention_forward");
        matmul(a_.branch, a.atty, P(o.wo), none, (int)N, w, w, false, true, 0.0f, compute_);
        mark("matmul o");
        residual_norm_forward(rms_, resid(2 * l + 1), resid(2 * l), a_.branch, D, w, a.ln2, a.mean2, a.rstd2,
                              P(o.ln2_w), P(o.ln2_b), N, w, eps, compute_);
        mark("residual_norm_forward");
        matmul(a.fc, a.ln2, P(o.wfc), none, (int)N, 2 * hid, w, false, true, 0.0f, compute_);
        mark("matmul fc");
        swiglu_forward(a.sw, a.fc, N, hid, compute_);
        mark("swiglu_forward");
        matmul(a_.branch, a.sw, P(o.wproj), none, (int)N, w, hid, false, true, 0.0f, compute_);
        mark("matmul proj");
        if (l + 1 < L) {
            const LayerOffsets& on = glayout_.layer[l + 1];
            LayerActs& an = a_.layer[l + 1];
            residual_norm_forward(rms_, resid(2 * l + 2), resid(2 * l + 1), a_.branch, D, w, an.ln1, an.mean1,
                                  an.rstd1, P(on.ln1_w), P(on.ln1_b), N, cfg_.layers[l + 1].width, eps, compute_);
        } else {
            residual_norm_forward(rms_, resid(2 * l + 2), resid(2 * l + 1), a_.branch, D, w, a_.lnf, a_.meanf,
                                  a_.rstdf, P(glayout_.lnf_w), P(glayout_.lnf_b), N, Df, eps, compute_);
        }
        mark("residual_norm_forward");
    }
    // The head reads [0, d) of the final norm in place (row stride Df).
    matmul(a_.logits, a_.lnf, P(Wout()), none, (int)N, Vp_, d, false, true, 0.0f, compute_, Df);
    mark("matmul logits");
}

inline void CudaEngine::forward(const int* inputs, const int* targets, int B, int T) {
    validate_forward_inputs(cfg_, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    B_ = B, T_ = T;
    const long count = upload_batch(inputs, targets, N);
    forward_to_logits(B, T);
    const Upload up = upload_of(a_.upload[slot_], N);
    softmax_crossentropy_forward(a_.losses, a_.lse, a_.logits, targets ? up.targets : nullptr, N, cfg_.V, Vp_,
                                 compute_);
    mark("classifier");
    if (count) {
        loss_sum(loss_acc_, a_.losses, N, 1.0 / count, compute_);
        mark("loss_sum");
    }
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
    logits_valid_ = true;
}

inline void CudaEngine::forward_backward(const int* inputs, const int* targets, int B, int T, float grad_scale,
                                         bool last_micro_step) {
    if (!targets) throw std::logic_error("forward_backward needs targets");
    validate_forward_inputs(cfg_, inputs, targets, B, T);
    const long N = (long)B * T;
    ensure_acts(B, T);
    B_ = B, T_ = T;
    logits_valid_ = false, reduction_awaited_ = false;  // new gradients: the step's reduction is still to come
    const long count = upload_batch(inputs, targets, N);
    if (count == 0) {  // every target masked: the loss is the constant 0, no gradient
        cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
        return;
    }
    forward_to_logits(B, T);
    upload_buckets(inputs, N);  // while the GPU runs the forward
    const float dloss = grad_scale / (float)count;
    softmax_crossentropy_fused(a_.losses, a_.logits, upload_of(a_.upload[slot_], N).targets, N, cfg_.V, Vp_, dloss,
                               compute_);
    mark("classifier");
    loss_sum(loss_acc_, a_.losses, N, (double)grad_scale / count, compute_);
    mark("loss_sum");
    reduce_in_backward_ = last_micro_step && dp_.world() > 1;
    backward();
    grads_reduced_ = grads_reduced_ || reduce_in_backward_;
    reduce_in_backward_ = false;
    cudaCheck(cudaEventRecord(slot_free_[slot_], compute_));
}

// The backward of the queued forward; the logits already hold dlogits (the fused classifier).
inline void CudaEngine::backward() {
    const long N = (long)B_ * T_;
    const int L = cfg_.L(), D = cfg_.D(), Df = cfg_.Df(), d = cfg_.d;
    const bf16* none = nullptr;
    const float* nonef = nullptr;
    const float eps = (float)cfg_.norm_eps;

    // head: dlnf (N, Df) = [dlogits Wout | 0]: the matmul writes the leading d columns in place (row stride Df),
    // columns [d, Df) are zero (the head never reads them)
    bf16* dlnf = a_.dbig;
    if (Df != d) {
        cudaCheck(cudaMemset2DAsync(dlnf + d, (size_t)Df * sizeof(bf16), 0, (size_t)(Df - d) * sizeof(bf16), N,
                                    compute_));
        mark("memset");
    }
    matmul(dlnf, a_.logits, P(Wout()), none, (int)N, d, Vp_, false, false, 0.0f, compute_, 0, 0, Df);
    mark("matmul logits dx");
    matmul(G(Wout()), a_.logits, a_.lnf, nonef, Vp_, d, (int)N, true, false, 1.0f, compute_, 0, Df);
    mark("matmul logits dW");
    // The residual-state gradient accumulates from both consumers of every residual state, so it starts at zero.
    cudaCheck(cudaMemsetAsync(a_.dresid, 0, (size_t)N * D * sizeof(bf16), compute_));
    mark("memset");
    norm_backward(rms_, a_.dresid, D, G(glayout_.lnf_w), G(glayout_.lnf_b), dlnf, resid(2 * L), D, a_.meanf,
                  a_.rstdf, P(glayout_.lnf_w), N, Df, a_.norm_scratch, compute_);
    mark("norm_backward");
    bucket_complete(L + 1);  // the head: the final norm, and lm_head when untied

    for (int l = L - 1; l >= 0; l--) {
        const int w = cfg_.layers[l].width, h = cfg_.layers[l].heads, hid = cfg_.hidden_of(l);
        const LayerOffsets& o = glayout_.layer[l];
        LayerActs& a = a_.layer[l];
        // MLP sub-block, mirrored. Its branch's gradient is dresid[:, :w], read in place (row stride D) by the
        // two matmuls, both queued before the norm backward adds into dresid.
        bf16* dsw = a_.dsmall;  // (N, hid)
        matmul(dsw, a_.dresid, P(o.wproj), none, (int)N, hid, w, false, false, 0.0f, compute_, D);
        mark("matmul proj dx");
        if (recompute_) {
            swiglu_forward(a.sw, a.fc, N, hid, compute_);
            mark("swiglu_forward");
        }
        matmul(G(o.wproj), a_.dresid, a.sw, nonef, w, hid, (int)N, true, false, 1.0f, compute_, D);
        mark("matmul proj dW");
        bf16* dfc = a_.dbig;  // (N, 2 hid)
        swiglu_backward(dfc, dsw, a.fc, N, hid, compute_);
        mark("swiglu_backward");
        bf16* dln = a_.dsmall;  // (N, w); dsw is dead
        matmul(dln, dfc, P(o.wfc), none, (int)N, w, 2 * hid, false, false, 0.0f, compute_);
        mark("matmul fc dx");
        if (recompute_) {
            norm_forward(rms_, a.ln2, a.mean2, a.rstd2, resid(2 * l + 1), D, P(o.ln2_w), P(o.ln2_b), N, w, eps,
                         compute_);
            mark("norm_forward");
        }
        matmul(G(o.wfc), dfc, a.ln2, nonef, 2 * hid, w, (int)N, true, false, 1.0f, compute_);
        mark("matmul fc dW");
        norm_backward(rms_, a_.dresid, D, G(o.ln2_w), G(o.ln2_b), dln, resid(2 * l + 1), D, a.mean2, a.rstd2,
                      P(o.ln2_w), N, w, a_.norm_scratch, compute_);
        mark("norm_backward");
        // attention sub-block, mirrored
        bf16* datty = a_.dsmall;  // (N, w)
        matmul(datty, a_.dresid, P(o.wo), none, (int)N, w, w, false, false, 0.0f, compute_, D);
        mark("matmul o dx");
        matmul(G(o.wo), a_.dresid, a.atty, nonef, w, w, (int)N, true, false, 1.0f, compute_, D);
        mark("matmul o dW");
        bf16* dqkv = a_.dbig;  // (N, 3 w)
        attention_backward(dqkv, a_.att_scratch, datty, a.qkv, a.atty, a.lse, B_, T_, w, h, attn_scale(l), compute_);
        mark("attention_backward");
        rope_backward(dqkv, table_of_.at(w / h), B_, T_, w, h, compute_);
        mark("rope_backward");
        dln = a_.dsmall;  // datty is dead
        matmul(dln, dqkv, P(o.wqkv), none, (int)N, w, 3 * w, false, false, 0.0f, compute_);
        mark("matmul qkv dx");
        if (recompute_) {
            norm_forward(rms_, a.ln1, a.mean1, a.rstd1, resid(2 * l), D, P(o.ln1_w), P(o.ln1_b), N, w, eps, compute_);
            mark("norm_forward");
        }
        matmul(G(o.wqkv), dqkv, a.ln1, nonef, 3 * w, w, (int)N, true, false, 1.0f, compute_);
        mark("matmul qkv dW");
        norm_backward(rms_, a_.dresid, D, G(o.ln1_w), G(o.ln1_b), dln, resid(2 * l), D, a.mean1, a.rstd1,
                      P(o.ln1_w), N, w, a_.norm_scratch, compute_);
        mark("norm_backward");
        bucket_complete(1 + l);  // layer l's weight gradients are complete: reduced while layers below compute
    }
    cudaCheck(cudaStreamWaitEvent(compute_, buckets_uploaded_[slot_], 0));
    const Upload up = upload_of(a_.upload[slot_], N);
    embedding_backward(G(glayout_.wte), a_.emb_partial, a_.dresid, D, up.positions, up.seg_start, up.seg_row,
                       up.seg_slot, up.fin_row, up.fin_first, emb_.segments, emb_.multi, d, compute_);
    mark("embedding_backward");
    bucket_complete(0);  // the embedding (tied: its head gradient came first, the lookups' last)
}

inline void CudaEngine::target_logprobs(const int* targets, float* out) const {
    if (!logits_valid_) throw std::logic_error("target_logprobs needs a forward() (not forward_backward)");
    const long N = (long)B_ * T_;
    int* host = ring_.acquire(std::max(N, (long)1), compute_);
    std::copy_n(targets, N, host);
    int* dev = upload_of(a_.upload[slot_], N).targets;  // this forward's slot; the compute stream orders it
    cudaCheck(cudaMemcpyAsync(dev, host, N * sizeof(int), cudaMemcpyHostToDevice, compute_));
    ::target_logprobs(a_.logprobs, a_.logits, a_.lse, dev, N, Vp_, compute_);
    float* back = reinterpret_cast<float*>(ring_.acquire(std::max(N, (long)1), compute_));
    cudaCheck(cudaMemcpyAsync(back, a_.logprobs, N * sizeof(float), cudaMemcpyDeviceToHost, compute_));
    sync_all();
    std::copy_n(back, N, out);
}

inline void CudaEngine::logits_at(int b, int t, float* out) const {
    if (!logits_valid_) throw std::logic_error("logits_at needs a forward() (not forward_backward)");
    bf16* back = reinterpret_cast<bf16*>(ring_.acquire((cfg_.V + 1) / 2, compute_));
    cudaCheck(cudaMemcpyAsync(back, a_.logits + ((size_t)b * T_ + t) * Vp_, cfg_.V * sizeof(bf16),
                              cudaMemcpyDeviceToHost, compute_));
    sync_all();
    for (int v = 0; v < cfg_.V; v++) out[v] = back[v];
}
