// The resolved options of one eagle-train run: a plain struct, filled by the option table
// (option_table.h) from defaults, a JSON config file and command-line flags, in that order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace eagle::config {

enum class LrScheduler { cosine, linear, constant };
enum class BadSamplePolicy { error, skip };
enum class OverlongPolicy { truncate, drop };
enum class NanPolicy { error, skip };
enum class TargetDtype { auto_, float32, bfloat16, float16 };
enum class ExportFormat { sglang, speculators, vllm_eagle1, mtp, dflash, dspark };
enum class Quantize { none, fp8 };
enum class QuantScale { amax, mse };
enum class DdpBackend { auto_, gloo, nccl };
enum class DraftSampling { greedy, sample };
enum class BestMetric { ar, tree_ar, temp_ar, alpha_ar, loss };
// --draft: a new EAGLE head (of eagle_version), the target's shipped MTP layer, a DFlash, DSpark or DFlash2 block
// draft.
enum class Draft { eagle, mtp, dflash, dspark, dflash2 };
// A row of the draft table (head/draft_spec.h): --draft with eagle_version resolved (draft_kind()).
enum class DraftKind { eagle3, eagle1, mtp, dflash, dspark, dflash2 };

// Field comments give units; the help text in option_table.cpp is the user-facing description.
struct Options {
  // data
  std::string data_path;                        // dataset: prepared folder, .jsonl/.json(.gz), folder
  std::string eval_data_path;                   // held-out dataset; empty: the prepared split
  std::int64_t training_seq_len = 2048;         // tokens per sample, longer ones truncated/dropped
  std::int64_t bucket_granularity = 128;        // tokens; 0: pad every batch to training_seq_len
  std::vector<std::int64_t> bucket_boundaries;  // tokens, increasing; empty: use granularity
  bool group_by_length = true;
  bool padding_free = false;
  std::int64_t max_tokens_per_batch = 0;  // padded tokens per batch; 0: fixed rows
  BadSamplePolicy bad_sample_policy = BadSamplePolicy::error;
  OverlongPolicy overlong_policy = OverlongPolicy::truncate;
  double validation_fraction = 0.0;            // fraction of samples held out by prepare
  std::vector<std::string> input;              // prepare: input files or folders
  std::string output;                          // prepare/export/dump-features: output folder; generate: .jsonl file
  std::string features_path;                   // stored target features (dump-features or speculators folder)
  std::string target_server;                   // vLLM servers' URLs, comma-separated: features per request
  std::int64_t target_server_inflight = 8;     // requests in flight at most (samples held ahead)
  std::int64_t target_server_timeout_s = 120;  // seconds per request, its file's lock wait included
  std::int64_t target_server_retries = 5;      // tries after the first, backoff 1, 2, 4, ... 30 s
  std::string target_server_storage;           // the servers' shared_storage_path: the only folder read
  TargetDtype features_dtype = TargetDtype::bfloat16;  // dump-features: stored dtype; auto: the target's
  std::int64_t features_shard_mb = 2048;               // dump-features: MiB per shard file (bound)
  bool features_pre_norm = false;                      // dump-features: last_hidden before the final norm
  bool json = false;                                   // data-stats/inspect/eval: print JSON

  // model
  std::string model_name_or_path;  // target model folder (Hugging Face layout)
  TargetDtype target_dtype = TargetDtype::auto_;
  std::int64_t target_chunk_tokens = 4096;               // positions per chunk of a target layer's MLP half; 0: all
  std::vector<std::int64_t> aux_hidden_state_layer_ids;  // input-of-layer ids; empty: [2, L/2, L-3]

  // draft
  Draft draft = Draft::eagle;  // eagle (eagle_version's head) | mtp (the target's shipped MTP layer) | dflash
  std::int64_t eagle_version = 3;
  std::int64_t ttt_steps = 7;
  bool fc_norm = false;               // EAGLE 3.1: an RMSNorm on each aux feature before the FC
  bool norm_output = false;           // EAGLE 3.1: the post-final-norm hidden is the next step's state
  bool norm_before_fc = false;        // one RMSNorm over the whole concatenation before the FC
  std::string draft_layer = "llama";  // llama | qwen3 (q/k norm per head) | deepseek (MLA, vLLM's deepseek_eagle3)
  std::int64_t draft_num_layers = 0;  // decoder layers; 0: the draft's default (EAGLE-3 1, DFlash 5)
  bool parallel_drafting = false;     // P-EAGLE: mask slots, all drafts in one forward
  std::int64_t mask_token_id = -1;    // P-EAGLE's / DFlash's mask token; -1: the target's first end-of-sequence id
  double ttt_loss_decay = 0.8;
  std::string loss = "kl";                     // kl | tv | lk_hybrid (EAGLE-3's per-position loss)
  std::int64_t loss_chunk_size = 1024;         // tokens per chunk of the fused LM head and loss; 0: unchunked
  std::string recompute_activations = "auto";  // off | mlp | layer | auto: what the TTT unroll recomputes in backward
  std::int64_t draft_vocab_size = 32000;
  std::int64_t dflash_block_size = 16;              // DFlash: B = K + 1 (anchor + K mask slots)
  std::vector<std::int64_t> dflash_target_layers;   // DFlash target layers t; empty: SpecForge's default
  std::int64_t dflash_num_anchors = 512;            // DFlash: anchors per row of a micro-batch
  double dflash_decay_gamma = 7.0;                  // DFlash: slot k's weight exp(-(k-1)/gamma); 0: none
  bool dflash_hard_labels = false;                  // DFlash: hard CE on the data token
  std::int64_t dspark_markov_rank = 256;            // DSpark: rank r of the Markov head W2 W1[prev]
  bool dspark_confidence_head = true;               // DSpark: train the confidence head (on [h; W1[prev]])
  double dspark_confidence_alpha = 1.0;             // DSpark: weight of the confidence head's loss
  bool dspark_sample_from_anchor = true;            // DSpark: anchor-as-first layout (else 1 + N fill-in)
  std::int64_t dflash2_conv_kernel_size = 2;        // DFlash2: taps of each layer's two convolutions
  std::int64_t dflash2_conv_group_size = 16;        // DFlash2: channels sharing a kernel delta
  std::int64_t dflash2_selector_rank = 256;         // DFlash2: rank of the candidate selector
  std::int64_t dflash2_selector_top_k = 16;         // DFlash2: candidates reranked per slot
  double dflash2_selector_alpha = 1.0;              // DFlash2: weight of the selector's loss

  // train
  std::int64_t per_device_train_batch_size = 4;  // rows per micro-batch
  std::int64_t gradient_accumulation_steps = 1;
  std::int64_t max_steps = 0;  // optimizer steps; 0: use num_train_epochs
  double num_train_epochs = 1.0;
  bool bf16 = false;
  double peak_tflops = 0.0;  // MFU's peak per device; 0: the GPU table, else measured (device/peak_flops.h)
  NanPolicy nan_policy = NanPolicy::error;
  std::int64_t max_cuda_graphs = 8;  // shapes captured as CUDA graphs; 0: none
  bool dry_run = false;              // train: print the predicted peak memory of a step and exit
  bool check_memory = true;          // train: refuse when the predicted peak exceeds the device's free memory
  std::int64_t seed = 42;

  // optim
  double learning_rate = 1e-4;
  LrScheduler lr_scheduler_type = LrScheduler::cosine;
  std::int64_t warmup_steps = 0;  // optimizer steps
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 0.5;  // 0: no clipping

  // eval
  std::int64_t eval_steps = 0;  // optimizer steps; 0: only at the end
  std::int64_t eval_num_prompts = 16;
  std::int64_t eval_max_new_tokens = 64;
  std::int64_t eval_batch_size = 16;        // prompts decoded at once; 1: one by one
  std::int64_t eval_draft_len = 0;          // tokens drafted per round; 0: ttt_steps
  std::int64_t eval_tree_steps = 0;         // SGLang --speculative-num-steps; 0: eval_draft_len's
  std::int64_t eval_tree_topk = 0;          // SGLang --speculative-eagle-topk; 0: no tree evaluation
  std::int64_t eval_tree_draft_tokens = 0;  // SGLang --speculative-num-draft-tokens; 0: steps + 1 (topk 1)
  double eval_temperature = 0.0;            // > 0: sampled acceptance and alpha_k
  double eval_top_p = 1.0;
  DraftSampling eval_draft_sampling = DraftSampling::greedy;
  BestMetric best_metric = BestMetric::ar;  // what checkpoint-best and min_ar use
  std::int64_t best_metric_depth = 0;       // k > 0: best_metric ar and min_ar use ar_by_depth[k-1]; 0: ar
  double min_ar = 0.0;                      // gate; 0: none
  double max_final_loss = 0.0;              // gate; 0: none

  // generate
  std::int64_t max_new_tokens = 512;      // tokens per generated reply, end id included
  double temperature = 0.0;               // 0: greedy
  double top_p = 1.0;                     // nucleus mass kept when sampling; 1: all
  std::int64_t generate_batch_size = 32;  // sequences decoded together

  // log
  std::int64_t logging_steps = 10;  // optimizer steps
  std::string log_level = "info";

  // follow (eagle-train follow, docs/follow.md): rounds of training on a rollout folder that keeps growing
  std::string rollout_dir;                  // the shards a producer adds (JSONL or prepared .bin, renamed in whole)
  std::int64_t follow_window = 4;           // the newest shards a round trains on (the newest one is held out)
  std::int64_t follow_replay = 2;           // older consumed shards replayed in each round (seeded draw)
  std::int64_t follow_max_version_lag = 0;  // shards older than this many policy versions are not replayed; 0: any
  std::int64_t publish_every = 100;         // optimizer steps per round; each round ends in a publish decision
  double publish_margin = 0.0;              // publish when AR >= the serving version's AR - publish_margin
  std::string publish_command;              // run (sh -c) after each publish
  std::int64_t keep_versions = 3;           // published versions kept besides the serving one; 0: all
  std::int64_t keep_rollouts = 0;           // consumed shards kept in rollout_dir (the newest); 0: all
  double follow_poll_s = 5.0;               // seconds between scans of rollout_dir and the target pointer

  // checkpoint
  std::string output_dir = "output";
  bool overwrite_output_dir = false;
  std::int64_t save_steps = 0;         // optimizer steps; 0: only at the end
  std::int64_t save_total_limit = 2;   // checkpoints kept; 0: all
  std::string resume_from_checkpoint;  // "auto", a path, or empty
  std::string init_draft;              // train: a draft folder (any layout eval reads) the head starts from
  std::string checkpoint;              // export/eval: a checkpoint or head folder
  ExportFormat format = ExportFormat::sglang;
  Quantize quantize = Quantize::none;    // export: linear weights as FP8 e4m3 with per-channel scales
  QuantScale quantize_scale = QuantScale::amax;  // per-channel scale: row max, or the MSE-best clip
  bool quantize_fc = false;              // export --quantize fp8: the fc fusion layer too

  // distributed (torchrun sets the ranks through the environment, docs/distributed.md)
  DdpBackend ddp_backend = DdpBackend::auto_;  // tensors: auto = nccl on CUDA, gloo on CPU
  std::int64_t ddp_timeout_s = 600;            // seconds any collective may wait for the other ranks
  std::int64_t num_ranks = 1;                  // data-stats: ranks to plan the per-rank batches for

  // runtime
  std::string device = "auto";   // auto, cpu, cuda, cuda:N
  std::int64_t num_threads = 0;  // intra-op threads; 0: the machine's cores
  std::string config;            // the JSON config file read (not itself dumped)
};

}  // namespace eagle::config
