// Attention over the rows of a training batch at the cost of the real work: padded rows (one sample,
// then right padding) take plain causal attention with no mask; packed rows (several samples per
// row) attend within each document only, at a cost of sum(L_i^2): per-document blocks on CPU,
// variable-length flash attention on CUDA with offsets built on the device (nothing reads the host,
// so the step can be captured in a CUDA graph). Grouped key/value heads are passed unexpanded
// wherever the kernel takes them.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace eagle::model {

// What the caller knows about the rows of a batch (host values, fixed for a run).
struct AttentionSpec {
  // true: rows may hold several documents (padding-free batches); attention stays inside each one.
  // false: every row holds one sample followed by padding, where causal attention alone is exact
  // (padding comes last, so no real token sees it; padded positions' outputs are unused but finite).
  bool packed = true;
  // packed: most runs of equal document ids in a row (its documents plus one padding run), the
  // static capacity of the variable-length offsets; 0: the row length (always enough).
  std::int64_t max_segments = 0;
};

// The document structure of a batch as the kernels read it, built once per forward pass.
class AttentionLayout {
 public:
  // document_ids [B, T] int64 (-1: padding); device work only, no host synchronisation (on CPU the
  // segment table is read from the offsets, which are host memory there).
  AttentionLayout(torch::Tensor document_ids, AttentionSpec spec);

  struct Segment {
    std::int64_t row, start, length;  // tokens [start, start + length) of the row
  };

  bool packed() const { return packed_; }
  std::int64_t rows() const { return document_ids_.size(0); }
  std::int64_t length() const { return document_ids_.size(1); }
  const torch::Tensor& document_ids() const { return document_ids_; }
  // packed: int32 [B * segments_per_row + 1], offsets of the runs in the flattened [B * T] token
  // order, unused slots repeating the total (zero-length runs); undefined when not packed.
  const torch::Tensor& cu_seqlens() const { return cu_seqlens_; }
  // packed, on CPU: the non-empty runs in row order (they cover every row completely).
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  torch::Tensor document_ids_, cu_seqlens_;
  bool packed_ = true;
  std::vector<Segment> segments_;
};

// Offsets of the runs of equal document ids, row by row (a row start always starts a run; the
// padding run is a run of its own): int32 [B * segments_per_row + 1] on the ids' device, built with
// cumulative sums only. A row with more runs than segments_per_row would corrupt the offsets; the
// callers bound it (AttentionSpec::max_segments, checked on the host when the batch is made).
torch::Tensor document_cu_seqlens(const torch::Tensor& document_ids, std::int64_t segments_per_row);

// [B, 1, Tq, Tk] bool: key s is visible to query t0 + i (s <= t0 + i and the same document id).
torch::Tensor document_causal_mask(const torch::Tensor& document_ids, std::int64_t t0, std::int64_t tq,
                                   std::int64_t tk);

// Forward attention of q [B, h, T, d] over k, v [B, kv_heads, T, d] (h a multiple of kv_heads) as
// the layout allows; [B, h, T, d] in q's dtype. Differentiable, but meant for the frozen target.
torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionLayout& layout, double scale);

// What a layer's attention adds to causal attention (attention_extras.cpp): a sliding window of
// `window` keys (query i sees key j iff i - window < j <= i; 0: no window) and learned sinks [h]
// (gpt-oss: one logit per head in every softmax denominator, no value; undefined: none).
struct AttentionExtras {
  std::int64_t window = 0;
  torch::Tensor sinks;
  double softcap = 0.0;  // Gemma 2: scores become softcap * tanh(scores / softcap) before the mask
  bool any() const { return window > 0 || sinks.defined() || softcap > 0; }
};

// layout_attention with the extras, forward only (the frozen target): CUDA flash attention with its
// window arguments (fp16/bf16), else fp32 scores in query blocks over the keys the window and the
// documents allow; sinks rescale each query's output by sigmoid(lse - sink), exact.
torch::Tensor layout_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionLayout& layout, double scale, const AttentionExtras& extras);

// Attention of q [B, h, Tq, d] over k, v [B, kv_heads, Tk, d] where mask (bool, broadcasting to
// [B, h, Tq, Tk]) says which keys each query sees (every query sees at least one); with sinks as
// transformers' eager gpt-oss attention computes them. The KV-cache forwards' attention.
torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask, double scale, const AttentionExtras& extras);

// mask (bool) narrowed to a sliding window: key column j stays visible to a query at position p iff
// j > p - window. key_positions [.., Tk] and query_positions [.., Tq, 1] broadcast against mask.
torch::Tensor window_mask(const torch::Tensor& mask, const torch::Tensor& query_positions,
                          const torch::Tensor& key_positions, std::int64_t window);

// The same with the log-sum-exp of each query's scores, both differentiable (the draft head's
// training attention combines them with extra keys): out [B, h, T, d] in q's dtype, lse
// [B, h, T, 1] fp32. Kernels: CPU flash attention (per document when packed), CUDA flash attention
// (dense causal when padded, variable-length when packed; fp16/bf16, head_dim a multiple of 8 up to
// 248), else a chunked tensor implementation with a document mask (fp32 on CUDA).
struct AttentionWithLse {
  torch::Tensor out, lse;
};
AttentionWithLse attention_with_lse(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const AttentionLayout& layout, double scale);

// The chunked tensor implementation of attention_with_lse on its own (every device and dtype; the
// reference for the kernels in tests): query blocks of query_chunk rows, probabilities recomputed
// in the backward pass.
AttentionWithLse chunked_attention_with_lse(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& document_ids, double scale, std::int64_t query_chunk);

}  // namespace eagle::model
