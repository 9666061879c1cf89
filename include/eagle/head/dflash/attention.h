// DFlash's training anchors and block-sparse attention (DFlash.md section 4): anchors sampled among
// the trainable positions, each anchor's block of S queries attending the context keys strictly
// before its anchor in its own document plus its own S block keys (bidirectional), blocks never
// seeing each other. The sparse form runs anchors in chunks recomputed in backward, so memory is
// the output plus one chunk's scores (linear in T and in the anchors), never a [T, T] mask per anchor.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace eagle::head {

// [B, T] bool: position a may anchor a block of block_size slots: loss_mask[a] != 0, a real token
// (document id >= 0) and a + block_size - 1 in a's document (the peers' p <= S - block_size, per
// packed sample), so every slot's label exists.
torch::Tensor dflash_anchor_candidates(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                       std::int64_t block_size);

// N = min(num_anchors, T) anchors per row, [B, N] int64 sorted ascending, on the inputs' device: a
// uniform sample without replacement of the candidates (those with the N smallest values of
// torch::rand({B, T}, generator), drawn on the generator's device), rows with fewer candidates
// padded by their earliest non-candidates (invalid anchors: they count nothing). A CPU generator
// gives the same anchors on every device; no host synchronisation when generator and inputs share
// a device (a CPU generator with CUDA inputs copies the noise to the device).
torch::Tensor dflash_sample_anchors(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                    std::int64_t block_size, std::int64_t num_anchors, at::Generator generator);

// The CPU generator of one micro-batch's anchors: seeded with splitmix64 over the run seed, the
// optimizer step, the micro-batch index within the step and the rank, so a resumed run (which
// knows all four) draws the anchors the interrupted one would have drawn, without saved RNG state.
at::Generator dflash_anchor_generator(std::uint64_t seed, std::int64_t step, std::int64_t micro_batch,
                                      std::int64_t rank = 0);

// [B, N, block_size - 1] bool: slot k (1..block_size-1) of anchor j counts: the anchor is a
// candidate, a_j + k < T and loss_mask[a_j + k] != 0. Device side, no host synchronisation.
torch::Tensor dflash_slot_valid(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                const torch::Tensor& anchors, std::int64_t block_size);

// Host side: the valid slots per k, [block_size - 1] counts of dflash_slot_valid (reads the tensors:
// call it on host copies). The trainer sums them over the micro-batches (and ranks) of an optimizer
// step and passes them as DFlashHead::train_step_forward's denominators.
std::vector<std::int64_t> dflash_count_slots(const torch::Tensor& loss_mask, const torch::Tensor& document_ids,
                                             const torch::Tensor& anchors, std::int64_t block_size);

// The training attention of the block queries q [B, h, N * S, d] (anchor-major, S = block size)
// over the context keys and values ctx_k, ctx_v [B, kv_heads, T, d] (every position of the row)
// and the block keys and values blk_k, blk_v [B, kv_heads, N * S, d]: query (j, i) sees the context
// keys s < anchors[j] with document_ids[s] == document_ids[anchors[j]] and the S keys of block j.
// One softmax per query over fp32 scores times `scale` (no query is empty: its block's keys are
// always seen). Grouped heads are not repeated. Returns [B, h, N * S, d] in q's dtype.
// anchor_chunk: anchors per chunk (0: chunks of about 2^25 scores), each chunk recomputed in backward.
torch::Tensor dflash_attention(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                               const torch::Tensor& blk_k, const torch::Tensor& blk_v, const torch::Tensor& anchors,
                               const torch::Tensor& document_ids, double scale, std::int64_t anchor_chunk = 0);

// The same through one dense mask over the keys [context; block 0; ..; block N-1] (the reference of
// the tests: [B, h, N * S, T + N * S] scores, kept by autograd).
torch::Tensor dflash_attention_dense(const torch::Tensor& q, const torch::Tensor& ctx_k, const torch::Tensor& ctx_v,
                                     const torch::Tensor& blk_k, const torch::Tensor& blk_v,
                                     const torch::Tensor& anchors, const torch::Tensor& document_ids, double scale);

}  // namespace eagle::head
