// The Gated DeltaNet layers of the hybrid targets (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) as transformers'
// Qwen3_5GatedDeltaNet computes them with its torch fallbacks (causal_conv1d_fn, torch_chunk_gated_delta_rule,
// torch_recurrent_gated_delta_rule): the projections, the short causal conv1d and SiLU, the gated delta rule in
// its chunked form (whole rows; every run of one document a sequence of its own) and its recurrent form (the KV
// cache's decoding steps), the gated RMSNorm; the cached forms per row for ragged steps (padding inert, rows rolled
// back by replaying their accepted tokens). out_proj is the layer's o_proj (target_layer.cpp).
#include <cmath>

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

namespace {

constexpr std::int64_t kChunk = 64;             // torch_chunk_gated_delta_rule's chunk_size
constexpr double kL2Eps = 1e-6;                 // its l2norm's eps
constexpr std::int64_t kRecurrentTokens = 16;   // a cached call of at most this many tokens runs the recurrent form
constexpr std::int64_t kRollbackTokens = 256;   // a cached call of at most this many tokens can be rolled back into

// The layer's projections of its normed input h [B, T, H] (one matmul): the conv input (q, k, v) [B, T, conv_dim],
// the output gate z [B, T, value_dim], b and a [B, T, value_heads].
struct Projected {
  torch::Tensor conv_in, z, b, a;
};
Projected project(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h) {
  const auto y = torch::linear(h, w.lin_in_w);
  const auto C = c.linear_attention.conv_dim(), vd = c.linear_attention.value_dim(),
             hv = c.linear_attention.value_heads;
  return {y.narrow(-1, 0, C), y.narrow(-1, C, vd), y.narrow(-1, C + vd, hv), y.narrow(-1, C + vd + hv, hv)};
}

// The depthwise causal conv1d (no bias) and SiLU over x_ext [B, K - 1 + T, C], the K - 1 inputs before the T new
// tokens first: out[t] = silu(sum_k w[:, k] x_ext[t + k]), summed in fp32 and rounded once to the model dtype as
// F.conv1d does. keep[k] ([B, T, 1] or undefined): whether tap k's input belongs to token t's own sequence.
torch::Tensor conv_silu(const torch::Tensor& x_ext, const torch::Tensor& w, std::int64_t T,
                        const std::vector<torch::Tensor>& keep) {
  const auto K = w.size(1);
  const auto wf = w.to(torch::kFloat32);
  auto acc = torch::zeros({x_ext.size(0), T, x_ext.size(2)}, x_ext.options().dtype(torch::kFloat32));
  for (std::int64_t k = 0; k < K; ++k) {
    auto term = x_ext.narrow(1, k, T).to(torch::kFloat32) * wf.select(1, k);
    if (!keep.empty() && keep[static_cast<std::size_t>(k)].defined()) term = term * keep[static_cast<std::size_t>(k)];
    acc.add_(term);
  }
  return torch::silu(acc.to(x_ext.scalar_type()));
}

// The delta rule's inputs in fp32, head-major [B, value_heads, T, d]: q and k from the conv output (each key head
// repeated for its value_heads / key_heads value heads), L2-normalised, q scaled by key_head_dim^-1/2; v; beta
// = sigmoid(b) and the log decay g = -exp(A_log) softplus(a + dt_bias), [B, value_heads, T].
struct DeltaInputs {
  torch::Tensor q, k, v, beta, g;
};
DeltaInputs delta_inputs(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& conv_out,
                         const torch::Tensor& b, const torch::Tensor& a) {
  const auto B = conv_out.size(0), T = conv_out.size(1);
  const auto kd = c.linear_attention.key_dim(), dk = c.linear_attention.key_head_dim,
             dv = c.linear_attention.value_head_dim;
  const auto rep = c.linear_attention.value_heads / c.linear_attention.key_heads;
  auto q = conv_out.narrow(-1, 0, kd).reshape({B, T, c.linear_attention.key_heads, dk});
  auto k = conv_out.narrow(-1, kd, kd).reshape({B, T, c.linear_attention.key_heads, dk});
  auto v =
      conv_out.narrow(-1, 2 * kd, c.linear_attention.value_dim()).reshape({B, T, c.linear_attention.value_heads, dv});
  if (rep > 1) {
    q = q.repeat_interleave(rep, 2);
    k = k.repeat_interleave(rep, 2);
  }
  auto head_major = [](const torch::Tensor& x) { return x.transpose(1, 2).to(torch::kFloat32).contiguous(); };
  auto l2 = [](const torch::Tensor& x) { return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + kL2Eps); };
  DeltaInputs d;
  d.q = l2(head_major(q)) * (1.0 / std::sqrt(static_cast<double>(dk)));
  d.k = l2(head_major(k));
  d.v = head_major(v);
  d.beta = head_major(torch::sigmoid(b));
  const auto decay = -w.a_log.to(torch::kFloat32).exp() * torch::softplus(a.to(torch::kFloat32) + w.dt_bias);
  d.g = head_major(decay);
  return d;
}

// The recurrent form over the T tokens of d (torch_recurrent_gated_delta_rule) from state S [B, h, dk, dv] (fp32;
// updated): the outputs [B, h, T, dv] (undefined without `outputs`: the state alone).
torch::Tensor recurrent_rule(const DeltaInputs& d, torch::Tensor& S, bool outputs = true) {
  const auto T = d.q.size(2);
  auto out = outputs ? torch::empty({d.v.size(0), d.v.size(1), T, d.v.size(3)}, d.v.options()) : torch::Tensor();
  for (std::int64_t t = 0; t < T; ++t) {
    const auto q = d.q.select(2, t), k = d.k.select(2, t), v = d.v.select(2, t);
    S = S * d.g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    const auto kv_mem = (S * k.unsqueeze(-1)).sum(-2);
    const auto delta = (v - kv_mem) * d.beta.select(2, t).unsqueeze(-1);
    S = S + k.unsqueeze(-1) * delta.unsqueeze(-2);
    if (outputs) out.select(2, t).copy_((S * q.unsqueeze(-1)).sum(-2));
  }
  return out;
}

// Tokens where keep [B, T] (bool) is false made inert: beta 0 and log decay 0 leave the state exactly as it is
// (S * exp(0), plus k times a zero delta), in the recurrent and the chunked form alike.
void keep_tokens(DeltaInputs& d, const torch::Tensor& keep) {
  const auto drop = keep.logical_not().unsqueeze(1);  // [B, 1, T] against [B, h, T]
  d.beta = d.beta.masked_fill(drop, 0.0);
  d.g = d.g.masked_fill(drop, 0.0);
}

// The chunked form (torch_chunk_gated_delta_rule) over the rows of d from S [B, h, dk, dv] (fp32; updated to the
// state after the last token), where runs [B, T] (undefined: one run per row) splits each row into sequences
// of their own: a token sees only its run's earlier tokens and the initial state only in a row's first run. The
// delta rule restarts at a run's first token exactly as a sequence of its own does: the pairwise decays of tokens
// in different runs are zero, the state carried into a chunk reaches only the tokens before the chunk's first
// run start, and the state carried out holds only the chunk's last run (the initial state too if the chunk has
// no run start). Chunks without a run start compute what transformers computes, operation for operation.
torch::Tensor chunked_rule(const DeltaInputs& d, const torch::Tensor& runs, torch::Tensor& S) {
  using torch::indexing::Slice;
  const auto B = d.q.size(0), h = d.q.size(1), T = d.q.size(2), dk = d.q.size(3), dv = d.v.size(3);
  const auto pad = (kChunk - T % kChunk) % kChunk, N = (T + pad) / kChunk;
  auto padded = [&](const torch::Tensor& x) {  // zeros after the last token: inert (beta 0, g 0)
    return pad == 0 ? x : torch::constant_pad_nd(x, x.dim() == 4 ? std::vector<std::int64_t>{0, 0, 0, pad}
                                                                  : std::vector<std::int64_t>{0, pad});
  };
  auto q = padded(d.q).view({B, h, N, kChunk, dk}), k = padded(d.k).view({B, h, N, kChunk, dk});
  const auto v = padded(d.v).view({B, h, N, kChunk, dv});
  const auto beta = padded(d.beta).view({B, h, N, kChunk, 1});
  const auto g = padded(d.g).view({B, h, N, kChunk});
  const auto kb = k * beta, vb = v * beta;
  const auto cum = g.cumsum(-1);  // the log decay from the chunk's start, [B, h, N, C]
  const auto upper = torch::ones({kChunk, kChunk}, q.options().dtype(torch::kBool)).triu(1);
  auto hidden = upper;  // pairs (i, j) with j > i, or (with runs) in different runs: decay 0
  torch::Tensor carry_in, last_run, carry_out;
  if (runs.defined()) {
    // Run starts, counted within each chunk: tokens i, j (j <= i) share a run iff no start lies in (j, i].
    auto r = runs;
    if (pad > 0) r = torch::cat({r, r.narrow(1, T - 1, 1).expand({B, pad})}, 1);  // the padding continues the run
    const auto prev = torch::cat({r.narrow(1, 0, 1), r.narrow(1, 0, T + pad - 1)}, 1);
    const auto starts = (r != prev).to(torch::kInt64).view({B, 1, N, kChunk}).cumsum(-1);
    hidden = upper.logical_or(starts.unsqueeze(-1) != starts.unsqueeze(-2));
    carry_in = (starts == 0).to(torch::kFloat32).unsqueeze(-1);                          // [B, 1, N, C, 1]
    last_run = (starts == starts.narrow(-1, kChunk - 1, 1)).to(torch::kFloat32).unsqueeze(-1);
    carry_out = (starts.narrow(-1, kChunk - 1, 1) == 0).to(torch::kFloat32);            // [B, 1, N, 1]
  }
  const auto pair = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(hidden, -INFINITY).exp();
  const auto ut = torch::matmul(kb, k.transpose(-1, -2)) * pair;
  const auto intra = torch::matmul(q, k.transpose(-1, -2)) * pair;
  auto decayed_kb = kb * cum.exp().unsqueeze(-1);
  if (runs.defined()) decayed_kb = decayed_kb * carry_in;
  const auto u = torch::linalg_solve_triangular(ut, vb, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
  const auto wk = torch::linalg_solve_triangular(ut, decayed_kb, false, true, true);
  auto qd = q * cum.exp().unsqueeze(-1);
  auto kd = k * (cum.narrow(-1, kChunk - 1, 1) - cum).exp().unsqueeze(-1);
  auto chunk_decay = cum.narrow(-1, kChunk - 1, 1).exp();  // [B, h, N, 1]
  if (runs.defined()) {
    qd = qd * carry_in;
    kd = kd * last_run;
    chunk_decay = chunk_decay * carry_out;
  }
  auto out = torch::empty({B, h, N, kChunk, dv}, v.options());
  for (std::int64_t i = 0; i < N; ++i) {
    const auto v_new = u.select(2, i) - torch::matmul(wk.select(2, i), S);
    out.select(2, i).copy_(torch::matmul(qd.select(2, i), S) + torch::matmul(intra.select(2, i), v_new));
    S = S * chunk_decay.select(2, i).unsqueeze(-1) + torch::matmul(kd.select(2, i).transpose(-1, -2), v_new);
  }
  return out.view({B, h, N * kChunk, dv}).narrow(2, 0, T);
}

// Qwen3_5RMSNormGated on the rule's outputs [B, h, T, dv] (fp32) with the gate z [B, T, value_dim]: normed in fp32,
// cast to the model dtype, times the weight, times silu(z) in fp32, cast back -> [B, T, value_dim].
torch::Tensor gated_norm(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& core,
                         const torch::Tensor& z) {
  const auto B = z.size(0), T = z.size(1);
  const auto dtype = z.scalar_type();
  auto x = core.transpose(1, 2).to(dtype).to(torch::kFloat32);  // the rule's output in the model dtype, as returned
  x = x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + c.rms_norm_eps);
  const auto gate =
      z.reshape({B, T, c.linear_attention.value_heads, c.linear_attention.value_head_dim}).to(torch::kFloat32);
  return ((w.lin_norm * x.to(dtype)) * torch::silu(gate)).to(dtype).reshape({B, T, c.linear_attention.value_dim()});
}

}  // namespace

torch::Tensor linear_runs(const torch::Tensor& document_ids) {
  const auto T = document_ids.size(1);
  const auto prev = torch::cat({document_ids.narrow(1, 0, 1), document_ids.narrow(1, 0, T - 1)}, 1);
  return (document_ids != prev).to(torch::kInt64).cumsum(1);
}

torch::Tensor linear_attention(const TargetConfig& c, const TargetLayerWeights& w, const torch::Tensor& h,
                               const torch::Tensor& runs) {
  const auto B = h.size(0), T = h.size(1), K = c.linear_attention.conv_kernel;
  const auto p = project(c, w, h);
  // The conv window stops at its run's first token: tap k reads token t - (K - 1 - k), kept iff it is in t's run.
  const auto x_ext = torch::constant_pad_nd(p.conv_in, {0, 0, K - 1, 0});
  const auto runs_ext = torch::constant_pad_nd(runs, {K - 1, 0}, -1);
  std::vector<torch::Tensor> keep;
  for (std::int64_t k = 0; k + 1 < K; ++k)
    keep.push_back((runs_ext.narrow(1, k, T) == runs).to(torch::kFloat32).unsqueeze(-1));
  keep.emplace_back();  // the token itself
  const auto d = delta_inputs(c, w, conv_silu(x_ext, w.conv_w, T, keep), p.b, p.a);
  auto S = torch::zeros(
      {B, c.linear_attention.value_heads, c.linear_attention.key_head_dim, c.linear_attention.value_head_dim},
      h.options().dtype(torch::kFloat32));
  return gated_norm(c, w, chunked_rule(d, runs, S), p.z);
}

void init_linear_states(const TargetConfig& c, KvCache& cache, std::int64_t batch, const torch::TensorOptions& opts,
                        std::int64_t rollback_tokens) {
  const auto L = static_cast<std::size_t>(c.num_hidden_layers);
  cache.conv_states.assign(L, torch::Tensor());
  cache.recurrent_states.assign(L, torch::Tensor());
  auto& rl = cache.ragged;
  rl = {};
  rl.log_tokens = rollback_tokens;
  rl.start = torch::zeros({batch}, opts.dtype(torch::kInt64));
  rl.count = torch::zeros({batch}, opts.dtype(torch::kInt64));
  for (auto* v : {&rl.conv_inputs, &rl.b, &rl.a}) v->assign(L, torch::Tensor());
  for (std::size_t l = 0; l < L; ++l) {
    if (!c.linear(static_cast<std::int64_t>(l))) continue;
    cache.conv_states[l] =
        torch::zeros({batch, c.linear_attention.conv_kernel - 1, c.linear_attention.conv_dim()}, opts);
    cache.recurrent_states[l] = torch::zeros(
        {batch, c.linear_attention.value_heads, c.linear_attention.key_head_dim, c.linear_attention.value_head_dim},
        opts.dtype(torch::kFloat32));
    if (rollback_tokens == 0) continue;
    rl.conv_inputs[l] = torch::zeros({batch, rollback_tokens, c.linear_attention.conv_dim()}, opts);
    rl.b[l] = torch::zeros({batch, rollback_tokens, c.linear_attention.value_heads}, opts);
    rl.a[l] = torch::zeros({batch, rollback_tokens, c.linear_attention.value_heads}, opts);
  }
  cache.rollback = {};
}

torch::Tensor linear_attention_cached(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                      const torch::Tensor& h, KvCache& cache) {
  const auto T = h.size(1), K = c.linear_attention.conv_kernel;
  const auto p = project(c, w, h);
  const auto x_ext = torch::cat({cache.conv_states[l], p.conv_in}, 1);
  const auto conv_out = conv_silu(x_ext, w.conv_w, T, {});
  const auto &b = p.b, &a = p.a;
  const auto d = delta_inputs(c, w, conv_out, b, a);
  auto& log = cache.rollback;
  if (T <= kRollbackTokens) {  // what truncate needs to recompute the states at any length inside this call
    log.conv_before[l] = cache.conv_states[l];
    log.state_before[l] = cache.recurrent_states[l];
    log.conv_inputs[l] = p.conv_in;
    log.conv_outputs[l] = conv_out;  // with b and a: the delta rule's inputs are remade from them
    log.b[l] = b;
    log.a[l] = a;
  }
  cache.conv_states[l] = x_ext.narrow(1, T, K - 1);
  auto S = cache.recurrent_states[l];
  const auto core = T <= kRecurrentTokens ? recurrent_rule(d, S) : chunked_rule(d, torch::Tensor(), S);
  cache.recurrent_states[l] = S;
  return gated_norm(c, w, core, p.z);
}

void begin_linear_step(const TargetConfig& c, KvCache& cache, std::int64_t tokens) {
  auto& log = cache.rollback;
  const auto L = static_cast<std::size_t>(c.num_hidden_layers);
  log = {};
  if (tokens > kRollbackTokens) return;  // a long prefill: kept only at its end
  log.start = cache.length;
  log.count = tokens;
  for (auto* v : {&log.conv_before, &log.state_before, &log.conv_inputs, &log.conv_outputs, &log.b, &log.a})
    v->assign(L, torch::Tensor());
}

void rollback_linear_states(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                            std::int64_t length) {
  auto& log = cache.rollback;
  EAGLE_CHECK(log.start >= 0 && length >= log.start && length <= log.start + log.count,
              Error(ErrorKind::internal,
                    "a hybrid linear-attention target's cache rolls back only inside its last forward_cached")
                  .expected(log.start >= 0 ? fmt::format("a length in {}..{}", log.start, log.start + log.count)
                                           : std::string("no rollback after a call of more than 256 tokens"))
                  .found(std::to_string(length))
                  .hint("the Gated DeltaNet layers keep their recurrent state at the cache's length only"));
  const auto n = length - log.start, K = c.linear_attention.conv_kernel;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (!c.linear(static_cast<std::int64_t>(l))) continue;
    // The conv window: the last K - 1 inputs before `length`; the state: the recurrent form over the accepted
    // tokens from the state before the call (the same operations as a decoding step).
    const auto inputs = torch::cat({log.conv_before[l], log.conv_inputs[l].narrow(1, 0, n)}, 1);
    cache.conv_states[l] = inputs.narrow(1, inputs.size(1) - (K - 1), K - 1);
    auto S = log.state_before[l];
    if (n > 0) {
      const auto d = delta_inputs(c, layers[l], log.conv_outputs[l].narrow(1, 0, n), log.b[l].narrow(1, 0, n),
                                  log.a[l].narrow(1, 0, n));
      recurrent_rule(d, S, /*outputs=*/false);
    }
    cache.recurrent_states[l] = S;
  }
  log.count = n;
}

LinearRows begin_ragged_linear(const KvCache& cache, const RaggedStep& step) {
  const auto& rl = cache.ragged;
  LinearRows r;
  r.rows = step.rows;
  auto of_rows = [&](const torch::Tensor& t) { return r.rows.defined() ? t.index_select(0, r.rows) : t; };
  r.real = step.columns != cache.keys[0].size(2) - 1;
  r.n_real = r.real.sum(1);
  const auto start = of_rows(rl.start), count = of_rows(rl.count);
  // A row all padding idles: it stays at the end of what it holds.
  const auto first = torch::where(r.n_real > 0, step.columns.select(1, 0), start + count);
  r.fresh = first == 0;
  r.replay = torch::minimum((first - start).clamp_min(0), count).masked_fill(r.fresh, 0);
  r.logged = step.ids.size(1) <= rl.log_tokens;
  r.next_start = r.logged ? first : first + r.n_real;
  r.next_count = r.logged ? r.n_real : torch::zeros_like(r.n_real);
  return r;
}

torch::Tensor linear_attention_ragged(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                      const torch::Tensor& h, KvCache& cache, const LinearRows& r) {
  const auto R = h.size(0), N = h.size(1), K = c.linear_attention.conv_kernel, C = c.linear_attention.conv_dim();
  auto& rl = cache.ragged;
  const bool all = !r.rows.defined();
  auto of_rows = [&](const torch::Tensor& t) { return all ? t : t.index_select(0, r.rows); };
  // Written in place: a replayed CUDA graph writes the same storage.
  auto put = [&](const torch::Tensor& dst, const torch::Tensor& v) {
    if (all)
      dst.copy_(v);
    else
      dst.index_put_({r.rows}, v);
  };
  const auto iopts = r.n_real.options();
  // K - 1 consecutive inputs of x [R, K - 1 + n, C] from each row's offset [R]: a conv window.
  auto window_at = [&](const torch::Tensor& x, const torch::Tensor& offset) {
    const auto index = offset.view({R, 1}) + torch::arange(K - 1, iopts);
    return x.gather(1, index.unsqueeze(-1).expand({R, K - 1, C}));
  };
  // The states at each row's first column: those at its start, then its accepted logged tokens (the recurrent form,
  // the rest of the log inert), the conv window cut from the logged inputs; zero for a new sequence.
  auto window = of_rows(cache.conv_states[l]);
  auto S = of_rows(cache.recurrent_states[l]);
  if (rl.log_tokens > 0) {
    const auto n = rl.log_tokens;
    const auto logged = torch::cat({window, of_rows(rl.conv_inputs[l])}, 1);
    auto d = delta_inputs(c, w, conv_silu(logged, w.conv_w, n, {}), of_rows(rl.b[l]), of_rows(rl.a[l]));
    keep_tokens(d, torch::arange(n, iopts).view({1, n}) < r.replay.view({R, 1}));
    recurrent_rule(d, S, /*outputs=*/false);
    window = window_at(logged, r.replay);
  }
  window = window.masked_fill(r.fresh.view({R, 1, 1}), 0.0);
  S = S.masked_fill(r.fresh.view({R, 1, 1, 1}), 0.0);

  const auto p = project(c, w, h);
  const auto x_ext = torch::cat({window, p.conv_in}, 1);  // a real token's taps are real inputs (right padding)
  auto d = delta_inputs(c, w, conv_silu(x_ext, w.conv_w, N, {}), p.b, p.a);
  keep_tokens(d, r.real);
  if (r.logged) {  // the states at the first column, this step's tokens logged after them
    put(cache.conv_states[l], window);
    put(cache.recurrent_states[l], S);
    put(rl.conv_inputs[l].narrow(1, 0, N), p.conv_in);
    put(rl.b[l].narrow(1, 0, N), p.b);
    put(rl.a[l].narrow(1, 0, N), p.a);
  }
  const auto core = N <= kRecurrentTokens ? recurrent_rule(d, S) : chunked_rule(d, torch::Tensor(), S);
  if (!r.logged) {  // the states after each row's real tokens: its last K - 1 real inputs
    put(cache.conv_states[l], window_at(x_ext, r.n_real));
    put(cache.recurrent_states[l], S);
  }
  return gated_norm(c, w, core, p.z);
}

void end_ragged_linear(KvCache& cache, const LinearRows& r) {
  auto put = [&](const torch::Tensor& dst, const torch::Tensor& v) {
    if (r.rows.defined())
      dst.index_put_({r.rows}, v);
    else
      dst.copy_(v);
  };
  put(cache.ragged.start, r.next_start);
  put(cache.ragged.count, r.next_count);
}

}  // namespace eagle::target
