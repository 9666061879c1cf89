// The option table: every eagle-train option, declared once (declare_options at the bottom; the lookups,
// command and group names: option_lookup.cpp).
#include "eagle/config/option_table.h"

#include <fmt/format.h>

#include "option_builder.h"

namespace eagle::config {
namespace {

using namespace detail;

std::string check_increasing(const std::vector<std::int64_t>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 1) return "positive lengths";
    if (i > 0 && v[i] <= v[i - 1]) return "strictly increasing lengths";
  }
  return "";
}

bool is_dflash(const Options& o) { return o.draft == Draft::dflash; }
bool is_dspark(const Options& o) { return o.draft == Draft::dspark; }
bool is_dflash2(const Options& o) { return o.draft == Draft::dflash2; }
// The block drafts: DFlash, DSpark and DFlash2 (their backbone's options are DFlash's).
bool is_block(const Options& o) {
  return o.draft == Draft::dflash || o.draft == Draft::dspark || o.draft == Draft::dflash2;
}
bool not_dflash(const Options& o) { return !is_block(o); }

}  // namespace

namespace detail {

std::vector<OptionEntry> declare_options() {
  Table t;
  using G = Group;
  // data
  t.add(&Options::data_path, "data_path", G::data, kTrain | kStats | kEval | kGenerate | kDump,
        "Training data: a prepared dataset folder (eagle-train prepare), a .jsonl/.json file "
        "(optionally .gz), or a folder of them; generate: the samples whose replies are regenerated "
        "(of a prepared folder, its train split)")
      .required(kStats | kGenerate | kDump)
      .required(kTrain, {"features_path"})
      .required(kEval, {"eval_data_path", "features_path"});
  t.add(&Options::eval_data_path, "eval_data_path", G::data, kTrain | kEval | kDump,
        "Held-out data for evaluation, same formats as data_path; empty: the validation split of a "
        "prepared data_path");
  t.add(&Options::training_seq_len, "training_seq_len", G::data, kTrain | kPrepare | kStats | kEval | kGenerate | kDump,
        "Maximum tokens per sample; longer samples follow overlong_policy; generate: the context, prompts "
        "and replies together")
      .range(4, kMaxTokens);
  t.add(&Options::bucket_granularity, "bucket_granularity", G::data, kTrain | kStats | kEval | kDump,
        "Each batch is padded to its longest sample rounded up to a multiple of this many tokens "
        "(capped at training_seq_len); 0: pad every batch to training_seq_len")
      .range(0, kMaxTokens);
  t.add(&Options::bucket_boundaries, "bucket_boundaries", G::data, kTrain | kStats | kEval | kDump,
        "Explicit bucket lengths in tokens, strictly increasing (a batch is padded to the smallest "
        "one that fits); empty: use bucket_granularity")
      .range(1, kMaxTokens)
      .check([](const std::vector<std::int64_t>& v, const Options&) { return check_increasing(v); });
  t.add(&Options::group_by_length, "group_by_length", G::data, kTrain | kStats,
        "Group samples of similar length into batches (seeded shuffle, then sort within a window of "
        "batches); false: plain random order");
  t.add(&Options::padding_free, "padding_free", G::data, kTrain | kStats | kEval,
        "Pack samples into rows without padding; attention and TTT chains never cross samples");
  t.add(&Options::max_tokens_per_batch, "max_tokens_per_batch", G::data, kTrain | kStats | kEval | kDump,
        "Fill each micro-batch up to this many tokens, padding counted; 0: a fixed "
        "per_device_train_batch_size rows")
      .range(0, kMaxBatchTokens)
      .check([](std::int64_t v, const Options& o) {
        // A batch must hold one sample of training_seq_len tokens.
        return v == 0 || v >= o.training_seq_len
                   ? std::string()
                   : fmt::format("0 or an integer >= training_seq_len ({})", o.training_seq_len);
      });
  t.add(&Options::bad_sample_policy, "bad_sample_policy", G::data,
        kTrain | kPrepare | kStats | kEval | kGenerate | kDump,
        "A malformed sample: error stops at the first, skip counts them and logs the first few");
  t.add(&Options::overlong_policy, "overlong_policy", G::data, kTrain | kPrepare | kStats | kEval | kGenerate | kDump,
        "A sample longer than training_seq_len: truncate it, or drop it (counted and logged); generate: "
        "a turn whose prompt does not fit ends the sample before it (truncate) or drops the sample (drop)");
  t.add(&Options::validation_fraction, "validation_fraction", G::data, kTrain | kPrepare | kEval | kDump,
        "Fraction of samples held out as the validation split (seeded by seed; eval: the run's value finds its "
        "split of JSON data again); 0: none")
      .range(0.0, 0.5);
  t.add(&Options::input, "input", G::data, kPrepare,
        "prepare: input .jsonl/.json files (optionally .gz) or folders of them")
      .required(kPrepare);
  t.add(&Options::output, "output", G::data, kPrepare | kExport | kEval | kGenerate | kDump,
        "prepare: the dataset folder to write; export: the head folder to write; eval: a JSON file "
        "to write the result to; generate: the .jsonl file to write; dump-features: the features folder to write (or "
        "to complete)")
      .required(kPrepare | kExport | kGenerate | kDump);
  t.add(&Options::features_path, "features_path", G::data, kTrain | kEval,
        "Train or evaluate from stored target features instead of running the target in every step: a folder "
        "written by dump-features, or a speculators offline data folder (docs/offline.md); empty: run the target");
  t.add(&Options::target_server, "target_server", G::data, kTrain | kEval | kGenerate,
        "Train or evaluate from target features computed per sample by vLLM servers (speculative method "
        "extract_hidden_states with the ExampleHiddenStatesConnector; docs/offline.md): http://HOST:PORT, several "
        "comma-separated for data-parallel replicas; the trainer must read the server's shared_storage_path. "
        "generate: the replies are written by these (plain) vLLM servers instead of the target in-process")
      .check([](const std::string& v, const Options& o) {
        return v.empty() || o.features_path.empty() ? std::string() : std::string("empty with features_path");
      });
  t.add(&Options::target_server_inflight, "target_server_inflight", G::data, kTrain | kEval,
        "target_server: requests in flight at once, also the samples fetched ahead of the step")
      .range(1, 1024)
      .acts_only(kTrain | kEval, "--target_server", [](const Options& o) { return !o.target_server.empty(); });
  t.add(&Options::target_server_timeout_s, "target_server_timeout_s", G::data, kTrain | kEval | kGenerate,
        "target_server: seconds one request may take, the wait for its file included (generate: one whole "
        "reply), before it is tried again")
      .range(1, kMaxTimeoutS)
      .acts_only(kTrain | kEval | kGenerate, "--target_server", [](const Options& o) { return !o.target_server.empty(); });
  t.add(&Options::target_server_retries, "target_server_retries", G::data, kTrain | kEval | kGenerate,
        "target_server: tries after a failed request (backoff 1, 2, 4, ... 30 s); then the run ends with a "
        "checkpoint (generate: the samples written so far) and exit 4")
      .range(0, 1000)
      .acts_only(kTrain | kEval | kGenerate, "--target_server", [](const Options& o) { return !o.target_server.empty(); });
  t.add(&Options::target_server_storage, "target_server_storage", G::data, kTrain | kEval,
        "target_server: the servers' storage folder (the connector's shared_storage_path, an absolute path seen "
        "here under the same name): a file the server names elsewhere is refused, and only this run's files in it "
        "are read and deleted")
      .check([](const std::string& v, const Options& o) {
        if (o.target_server.empty() || (!v.empty() && v.front() == '/')) return std::string();
        return std::string(v.empty() ? "the servers' shared_storage_path with target_server" : "an absolute path");
      })
      .acts_only(kTrain | kEval, "--target_server", [](const Options& o) { return !o.target_server.empty(); });
  t.add(&Options::features_dtype, "features_dtype", G::data, kDump,
        "dump-features: dtype of the stored hidden states; auto: the dtype the target runs in (the teacher is then "
        "the online one exactly)");
  t.add(&Options::features_shard_mb, "features_shard_mb", G::data, kDump,
        "dump-features: largest shard file in MiB (a longer sample gets a shard of its own)")
      .range(1, 1 << 24);
  t.add(&Options::features_pre_norm, "features_pre_norm", G::data, kDump,
        "dump-features: store the last hidden state before the target's final norm instead of after it (the "
        "manifest says which): what MiMo's MTP layer reads at step 1 (train --draft mtp); the teacher applies "
        "the final norm itself. Not with an aux layer id of num_hidden_layers");
  t.add(&Options::json, "json", G::log, kStats | kInspect | kEval, "Print the result as JSON");
  // model
  t.add(&Options::model_name_or_path, "model_name_or_path", G::model,
        kTrain | kInspect | kEval | kExport | kGenerate | kDump,
        "Target model folder in the Hugging Face layout (config.json, *.safetensors); export: the target whose "
        "embedding a speculators export carries (default: the one the head names); with features_path: the "
        "target for the AR (a speculators folder also takes its final norm and LM head from it)")
      .required(kInspect | kGenerate | kDump | kFollow)
      .required(kTrain | kEval, {"features_path"});
  t.add(&Options::target_dtype, "target_dtype", G::model, kTrain | kInspect | kEval | kGenerate | kDump,
        "Dtype of the frozen target's weights and forward; auto: the checkpoint's dtype");
  t.add(&Options::target_chunk_tokens, "target_chunk_tokens", G::model, kTrain | kInspect | kEval | kGenerate | kDump,
        "Positions per chunk of each target layer's position-wise half (o_proj, residual, MLP or experts): its "
        "temporaries grow with this, not the sequence length (docs/training.md, long context); 0: whole rows")
      .range(0, kMaxTokens);
  t.add(&Options::aux_hidden_state_layer_ids, "aux_hidden_state_layer_ids", G::model, kTrain | kInspect | kEval | kDump,
        "EAGLE-3 target layers whose inputs are fused, input-of-layer convention "
        "(hidden_states[id]); exactly 3 for EAGLE-3 (what SGLang and vLLM fuse); empty: [2, L/2, L-3] (models "
        "under 7 layers: docs/models.md)")
      .range(0, kMaxLayers)
      .check([](const std::vector<std::int64_t>& v, const Options& o) {
        for (auto id : v)
          if (id < 0) return std::string("layer ids >= 0");
        if (o.eagle_version == 3 && !v.empty() && v.size() != 3)
          return std::string("3 layer ids for EAGLE-3 (low, mid, high), or none for the default");
        return std::string();
      });
  // draft
  // Not an eval or export option: a head records its version and TTT steps, and those are used.
  t.add(&Options::draft, "draft", G::draft, kTrain,
        "The draft head: eagle (a new EAGLE head, eagle_version), mtp (fine-tune the target's shipped MTP "
        "layer, read from model_name_or_path under its native names; MiMo, Qwen3.5, Qwen3-Next, DeepSeek-V3, "
        "GLM-4.5), dflash (a DFlash "
        "block draft: dflash_block_size - 1 tokens from one forward, served by vLLM's method dflash) or dspark "
        "(DFlash's "
        "backbone drafting all dflash_block_size tokens of its block, left to right with a Markov head, and a "
        "confidence head; served by vLLM's method dspark) or dflash2 (DFlash with two grouped causal convolutions "
        "in each layer and a candidate selector reranking the LM head's top tokens; served by vLLM's method "
        "dflash); docs/heads.md")
      .check([](Draft v, const Options& o) {
        if (v == Draft::mtp && (o.eagle_version != 3 || o.parallel_drafting || o.draft_num_layers > 1 || o.fc_norm ||
                           o.norm_output || o.norm_before_fc || o.draft_layer != "llama"))
          return std::string(
              "mtp trains the target's own layer: not with eagle_version 1, parallel_drafting, draft_num_layers, "
              "fc_norm, norm_output, norm_before_fc or draft_layer");
        if ((v == Draft::dflash || v == Draft::dspark || v == Draft::dflash2) &&
            (o.eagle_version != 3 || o.parallel_drafting || o.fc_norm || o.norm_output || o.norm_before_fc ||
             o.draft_layer != "llama" || !o.aux_hidden_state_layer_ids.empty()))
          return std::string(
              "dflash, dspark and dflash2 are their own drafts (Qwen3-style layers over dflash_target_layers): not "
              "with "
              "eagle_version 1, parallel_drafting, fc_norm, norm_output, norm_before_fc, draft_layer or "
              "aux_hidden_state_layer_ids");
        return std::string();
      });
  t.add(&Options::eagle_version, "eagle_version", G::draft, kTrain | kDump,
        "Draft head: 3 (EAGLE-3, three fused layers, training-time test) or 1 (EAGLE-1); eval and export use "
        "the head's")
      .range(1, 3)
      .check([](std::int64_t v, const Options& o) {
        if (v != 1 && v != 3) return std::string("1 or 3");
        // EAGLE-1's head is one fixed layer over [embedding; hidden]: none of EAGLE-3's variants apply.
        if (v == 1 &&
            (o.fc_norm || o.norm_output || o.norm_before_fc || o.parallel_drafting || o.draft_layer != "llama"))
          return std::string(
              "3 for fc_norm, norm_output, norm_before_fc, parallel_drafting and draft_layer "
              "(EAGLE-1's head has none of them)");
        return std::string();
      });
  t.add(&Options::ttt_steps, "ttt_steps", G::draft, kTrain,
        "Training-time test steps: how far the head is unrolled on its own outputs; eval uses the head's")
      .range(1, 32)
      .acts_only(kTrain, "--draft eagle or mtp (dflash drafts dflash_block_size - 1)", not_dflash);
  t.add(&Options::fc_norm, "fc_norm", G::draft, kTrain,
        "EAGLE 3.1: RMSNorm each aux feature (one weight per layer) before the FC; the exports say so");
  t.add(&Options::norm_output, "norm_output", G::draft, kTrain,
        "EAGLE 3.1: feed the final-normed hidden (what produced the logits) back as the next step's state");
  t.add(&Options::norm_before_fc, "norm_before_fc", G::draft, kTrain,
        "One RMSNorm over the concatenated aux features before the FC (speculators' default; not with "
        "fc_norm; vLLM serves it, SGLang does not)")
      .check([](bool v, const Options& o) { return v && o.fc_norm ? "not together with fc_norm" : ""; });
  t.add(&Options::draft_layer, "draft_layer", G::draft, kTrain,
        "The draft decoder layer: llama, qwen3 (RMSNorm over each head's q and k before RoPE; vLLM's "
        "Eagle3Qwen3ForCausalLM) or deepseek (an MLA layer with a dense MLP shaped after a DeepSeek-V3-family "
        "target; vLLM's Eagle3DeepseekV3ForCausalLM)")
      .check([](const std::string& v, const Options& o) {
        if (v != "llama" && v != "qwen3" && v != "deepseek") return std::string("llama, qwen3 or deepseek");
        if (v == "deepseek" &&
            (o.eagle_version != 3 || o.parallel_drafting || o.norm_before_fc || o.draft_num_layers > 1))
          return std::string(
              "deepseek is one MLA layer as vLLM's deepseek_eagle3.py serves it: not with eagle_version 1, "
              "parallel_drafting, norm_before_fc or draft_num_layers > 1");
        return std::string();
      });
  t.add(&Options::draft_num_layers, "draft_num_layers", G::draft, kTrain,
        "Decoder layers of the draft. EAGLE-3: the first takes [embedding; state], the rest are plain pre-norm "
        "layers on its output (vLLM and SGLang read num_hidden_layers); DFlash: its Qwen3-style layers. 0: the "
        "draft's default, 1 for EAGLE, 5 for DFlash (the published z-lab drafts)")
      .range(0, 16)
      .check([](std::int64_t v, const Options& o) { return v > 1 && o.eagle_version == 1 ? "1 for EAGLE-1" : ""; });
  t.add(&Options::parallel_drafting, "parallel_drafting", G::draft, kTrain,
        "P-EAGLE: depths 1..ttt_steps-1 train on mask slots (mask_token_id, a learned mask_hidden), and all "
        "drafted tokens come from one forward (vLLM: parallel_drafting; exported as speculators peagle)")
      .check([](bool v, const Options& o) {
        if (v && o.eagle_version != 3) return "EAGLE-3 only";
        return v && o.norm_output ? "not with norm_output (P-EAGLE has no recurrent state)" : "";
      });
  t.add(&Options::mask_token_id, "mask_token_id", G::draft, kTrain,
        "The mask token of P-EAGLE and DFlash (its target embedding row is the mask slots' input; DFlash "
        "writes it as dflash_config.mask_token_id, and vLLM embeds the same row); -1: the target's first "
        "end-of-sequence id")
      .range(-1, kMaxVocab)
      .acts_only(kTrain, "--parallel_drafting or --draft dflash, dspark or dflash2",
                 [](const Options& o) { return o.parallel_drafting || is_block(o); });
  t.add(&Options::ttt_loss_decay, "ttt_loss_decay", G::draft, kTrain, "Weight of TTT step k's loss is ttt_loss_decay^k")
      .range(0.0, 1.0)
      .acts_only(kTrain, "--draft eagle or mtp (dflash weighs its slots by dflash_decay_gamma)", not_dflash);
  t.add(&Options::loss, "loss", G::draft, kTrain,
        "EAGLE-3's per-position loss against the target: kl (soft cross-entropy, forward KL), tv (total "
        "variation 1 - sum min(p, q), acceptance itself) or lk_hybrid (speculators' adaptive KL/TV blend); "
        "docs/training.md")
      .check([](const std::string& v, const Options& o) {
        if (v != "kl" && v != "tv" && v != "lk_hybrid") return std::string("kl, tv or lk_hybrid");
        if (v != "kl" && o.eagle_version != 3) return std::string("kl for EAGLE-1 (tv and lk_hybrid are EAGLE-3's)");
        return std::string();
      });
  t.add(&Options::loss_chunk_size, "loss_chunk_size", G::draft, kTrain,
        "Tokens per chunk of EAGLE-3's fused LM head and loss (each chunk's logits, loss and gradients made "
        "in the forward, memory one chunk of [tokens, draft_vocab_size]); 0: unchunked, every step's full "
        "logits kept")
      .range(0, kMaxBatchTokens);
  t.add(&Options::recompute_activations, "recompute_activations", G::draft, kTrain,
        "What EAGLE-3's TTT unroll makes again in backward instead of keeping for every step: off, mlp "
        "(each layer's o_proj, MLP and norms after the attention), layer (also the embedding and the input "
        "norms; q/k/v are projected once and the attention is always kept) or auto (the first of off, mlp, "
        "layer whose predicted step takes at most 75% of the memory available); the same values and gradients")
      .check([](const std::string& v, const Options&) {
        return v == "off" || v == "mlp" || v == "layer" || v == "auto" ? std::string()
                                                                       : std::string("off, mlp, layer or auto");
      })
      .acts_only(kTrain, "--draft eagle or mtp (DFlash has no TTT unroll; its attention is recomputed in backward)",
                 not_dflash);
  t.add(&Options::draft_vocab_size, "draft_vocab_size", G::draft, kTrain,
        "Tokens in the draft vocabulary, the most frequent trained tokens; capped at the target's "
        "vocabulary")
      .range(2, kMaxVocab)
      .acts_only(kTrain, "--draft eagle or mtp (dflash drafts over the target's whole vocabulary)", not_dflash);
  // DFlash (--draft dflash, docs/heads.md): defaults of SpecForge's published block-16 recipe.
  t.add(&Options::dflash_block_size, "dflash_block_size", G::draft, kTrain,
        "DFlash: the block of the anchor and dflash_block_size - 1 mask slots; one forward drafts "
        "dflash_block_size - 1 tokens (serve with num_speculative_tokens = dflash_block_size - 1)")
      .range(2, 64)
      .acts_only(kTrain, "--draft dflash, dspark or dflash2", is_block);
  t.add(&Options::dflash_target_layers, "dflash_target_layers", G::draft, kTrain,
        "DFlash: the target layers t whose outputs (hidden_states[t + 1], un-normed) make the context, as "
        "dflash_config.target_layer_ids; sorted, duplicates dropped; empty: SpecForge's "
        "round(1 + i (L - 4) / (draft_num_layers - 1))")
      .range(0, kMaxLayers)
      .acts_only(kTrain, "--draft dflash, dspark or dflash2", is_block);
  t.add(&Options::dflash_num_anchors, "dflash_num_anchors", G::draft, kTrain,
        "DFlash: anchors sampled per row of each micro-batch among the trainable positions (seeded by seed, "
        "step, micro-batch and rank: a resume draws the same); a row holds at most its length")
      .range(1, kMaxTokens)
      .acts_only(kTrain, "--draft dflash, dspark or dflash2", is_block);
  t.add(&Options::dflash_decay_gamma, "dflash_decay_gamma", G::draft, kTrain,
        "DFlash: slot k's loss weight exp(-(k - 1) / dflash_decay_gamma) (7 for block 16; the peers use 5 for "
        "10, 4 for 8); 0: every slot weighs 1; dspark: slot k's weight exp(-k / dflash_decay_gamma), above 0")
      .range(0.0, 1e6)
      .acts_only(kTrain, "--draft dflash, dspark or dflash2", is_block);
  t.add(&Options::dflash_hard_labels, "dflash_hard_labels", G::draft, kTrain,
        "DFlash: cross-entropy on the data token (SpecForge's label) instead of the loss against the target's "
        "distribution")
      .acts_only(kTrain, "--draft dflash", is_dflash);
  // DSpark (--draft dspark, docs/heads.md): defaults of speculators 0.9.0's recipe.
  t.add(&Options::dspark_markov_rank, "dspark_markov_rank", G::draft, kTrain,
        "DSpark: the rank r of the Markov head, the logit bias W2 W1[previous token] (markov_rank)")
      .range(1, 65536)
      .acts_only(kTrain, "--draft dspark", is_dspark);
  t.add(&Options::dspark_confidence_head, "dspark_confidence_head", G::draft, kTrain,
        "DSpark: train the confidence head, a per-slot acceptance estimate on [hidden; W1[previous token]] "
        "(vLLM's adaptive verification reads it)")
      .acts_only(kTrain, "--draft dspark", is_dspark);
  t.add(&Options::dspark_confidence_alpha, "dspark_confidence_alpha", G::draft, kTrain,
        "DSpark: the weight of the confidence head's loss (binary cross-entropy towards 1 - TV)")
      .range(0.0, 1e6)
      .acts_only(kTrain, "--draft dspark", is_dspark);
  t.add(&Options::dspark_sample_from_anchor, "dspark_sample_from_anchor", G::draft, kTrain,
        "DSpark: the anchor-as-first layout (vLLM's default: every slot of the block predicts the token after it, "
        "dflash_block_size tokens a round); false: DFlash's 1 + N fill-in layout (slots 1.. predict the tokens at "
        "their own positions, dflash_block_size - 1 a round). Written as sample_from_anchor; a draft serves in the "
        "layout it was trained in")
      .acts_only(kTrain, "--draft dspark", is_dspark);
  // DFlash2 (--draft dflash2, docs/heads.md): defaults of speculators 0.9.0's recipe.
  t.add(&Options::dflash2_conv_kernel_size, "dflash2_conv_kernel_size", G::draft, kTrain,
        "DFlash2: the taps of each layer's two causal convolutions over the block's slots (conv_kernel_size; at "
        "most dflash_block_size)")
      .range(1, 64)
      .acts_only(kTrain, "--draft dflash2", is_dflash2);
  t.add(&Options::dflash2_conv_group_size, "dflash2_conv_group_size", G::draft, kTrain,
        "DFlash2: the channels that share one token-conditioned kernel delta (conv_group_size; divides the "
        "hidden size)")
      .range(1, 65536)
      .acts_only(kTrain, "--draft dflash2", is_dflash2);
  t.add(&Options::dflash2_selector_rank, "dflash2_selector_rank", G::draft, kTrain,
        "DFlash2: the rank of the candidate selector's predecessor x hidden x candidate score (selector_rank)")
      .range(1, 65536)
      .acts_only(kTrain, "--draft dflash2", is_dflash2);
  t.add(&Options::dflash2_selector_top_k, "dflash2_selector_top_k", G::draft, kTrain,
        "DFlash2: the LM head's top tokens the selector reranks at each slot (selector_top_k; at most the "
        "vocabulary)")
      .range(1, 1 << 20)
      .acts_only(kTrain, "--draft dflash2", is_dflash2);
  t.add(&Options::dflash2_selector_alpha, "dflash2_selector_alpha", G::draft, kTrain,
        "DFlash2: the weight of the selector's loss (cross-entropy over its candidates towards the target's "
        "argmax)")
      .range(0.0, 1e6)
      .acts_only(kTrain, "--draft dflash2", is_dflash2);
  // train
  t.add(&Options::per_device_train_batch_size, "per_device_train_batch_size", G::train, kTrain | kStats | kEval | kDump,
        "Rows per micro-batch (when max_tokens_per_batch is 0)")
      .range(1, kMaxRows);
  t.add(&Options::gradient_accumulation_steps, "gradient_accumulation_steps", G::train, kTrain,
        "Micro-batches per optimizer step")
      .range(1, kMaxRows);
  t.add(&Options::max_steps, "max_steps", G::train, kTrain, "Optimizer steps to train; 0: num_train_epochs decides")
      .range(0, kMaxSteps);
  t.add(&Options::num_train_epochs, "num_train_epochs", G::train, kTrain,
        "Passes over the training data (fractions allowed), used when max_steps is 0")
      .range(0.0, 1e6);
  t.add(&Options::bf16, "bf16", G::train, kTrain | kEval,
        "Run the head's forward and backward under bf16 autocast (weights and optimizer stay fp32)");
  t.add(&Options::peak_tflops, "peak_tflops", G::train, kTrain,
        "Peak TFLOP/s of one device that MFU is measured against (step lines, metrics.jsonl, summary.json); 0: "
        "a known GPU's dense bf16 (with bf16) or fp32 peak, else the matmul rate measured at start-up on the "
        "run's own GEMM shapes (CPU, or a GPU the table lacks)")
      .range(0.0, 1e7);
  t.add(&Options::nan_policy, "nan_policy", G::train, kTrain,
        "A non-finite loss or gradient: error stops the run naming the step; skip skips the update "
        "and goes on");
  t.add(&Options::max_cuda_graphs, "max_cuda_graphs", G::train, kTrain | kGenerate | kDump | kEval,
        "Batch shapes captured as CUDA graphs on GPU; others run eagerly; 0: none (generate: decode "
        "steps, one shape per 256 cached columns)")
      .range(0, 1024);
  t.add(&Options::dry_run, "dry_run", G::train, kTrain,
        "Print the predicted peak memory of a training step (the parts: target, head, activations, "
        "working memory) from the target's config.json alone, compare it with the device's available "
        "memory, and exit without training (docs/training.md, Long context)");
  t.add(&Options::check_memory, "check_memory", G::train, kTrain,
        "Refuse to start (exit 2) when the predicted peak memory of a step exceeds the device's available "
        "memory (CUDA: free memory; CPU: MemAvailable); false: log the prediction only");
  t.add(&Options::seed, "seed", G::train, kAll,
        "Seed of every random choice (data order, splits, init, generate's sampling)")
      .range(0, kMaxSeed);
  // optim
  t.add(&Options::learning_rate, "learning_rate", G::optim, kTrain, "Peak AdamW learning rate").range(0.0, 1.0);
  t.add(&Options::lr_scheduler_type, "lr_scheduler_type", G::optim, kTrain,
        "Learning-rate schedule after the linear warmup");
  t.add(&Options::warmup_steps, "warmup_steps", G::optim, kTrain,
        "Optimizer steps of linear warmup from 0 to learning_rate")
      .range(0, kMaxSteps);
  t.add(&Options::weight_decay, "weight_decay", G::optim, kTrain, "AdamW decoupled weight decay").range(0.0, 10.0);
  t.add(&Options::adam_beta1, "adam_beta1", G::optim, kTrain, "AdamW beta1")
      .range(0.0, 1.0, Upper::exclusive);  // 1: the bias correction divides by 1 - beta^t = 0
  t.add(&Options::adam_beta2, "adam_beta2", G::optim, kTrain, "AdamW beta2").range(0.0, 1.0, Upper::exclusive);
  t.add(&Options::adam_epsilon, "adam_epsilon", G::optim, kTrain, "AdamW epsilon").range(0.0, 1.0);
  t.add(&Options::max_grad_norm, "max_grad_norm", G::optim, kTrain,
        "Clip the global gradient L2 norm to this; 0: no clipping")
      .range(0.0, 1e6);
  declare_eval_options(t);
  // generate
  t.add(&Options::max_new_tokens, "max_new_tokens", G::generate, kGenerate,
        "Tokens the target writes per reply at most, its end-of-turn id included")
      .range(1, kMaxNewTokens);
  t.add(&Options::temperature, "temperature", G::generate, kGenerate,
        "Sampling temperature of the regenerated replies; 0: greedy (the target's most likely token)")
      .range(0.0, 100.0);
  t.add(&Options::top_p, "top_p", G::generate, kGenerate,
        "Sample from the smallest set of tokens whose probability reaches top_p (with temperature > 0); "
        "1: the whole vocabulary")
      .range(0.0, 1.0)
      .check([](double v, const Options&) { return v > 0.0 && v <= 1.0 ? "" : "a number in (0, 1]"; })
      .acts_only(kGenerate, "--temperature > 0 (greedy decoding samples nothing)", [](const Options& o) { return o.temperature > 0.0; });
  t.add(&Options::generate_batch_size, "generate_batch_size", G::generate, kGenerate,
        "Sequences generated together (rows of the KV cache); a finished row takes the next sample. With "
        "target_server: the completion requests in flight at once (keep it at or above the servers' "
        "max-num-seqs summed over the URLs)")
      .range(1, 4096);
  // log
  t.add(&Options::logging_steps, "logging_steps", G::log, kTrain,
        "Log a step line and metrics every this many optimizer steps")
      .range(1, kMaxSteps);
  t.add(&Options::log_level, "log_level", G::log, kAll | kReport, "Console log level: trace|debug|info|warn|error|off")
      .check([](const std::string& v, const Options&) {
        for (const char* l : {"trace", "debug", "info", "warn", "error", "off"})
          if (v == l) return std::string();
        return std::string("one of trace|debug|info|warn|error|off");
      });
  // checkpoint
  t.add(&Options::output_dir, "output_dir", G::checkpoint, kTrain | kReport,
        "Run folder: checkpoints, metrics.jsonl, TensorBoard events, summary.json, resolved config, "
        "report.html (report: the run folder to draw; also given as its positional argument)")
      .check([](const std::string& v, const Options&) {
        return v.empty() ? std::string("a folder name") : std::string();
      });
  t.add(&Options::overwrite_output_dir, "overwrite_output_dir", G::checkpoint, kTrain,
        "Allow training into an output_dir that holds another run's files (checkpoints, logs, "
        "summary); they are deleted at the start");
  t.add(&Options::save_steps, "save_steps", G::checkpoint, kTrain,
        "Save a checkpoint every this many optimizer steps; 0: only at the end")
      .range(0, kMaxSteps);
  t.add(&Options::save_total_limit, "save_total_limit", G::checkpoint, kTrain,
        "Keep only the newest this many checkpoints (the best by AR is kept apart); 0: keep all")
      .range(0, 1 << 20);
  t.add(&Options::resume_from_checkpoint, "resume_from_checkpoint", G::checkpoint, kTrain,
        "Resume from a checkpoint folder, or auto: the newest complete one in output_dir; empty: "
        "start fresh");
  // follow (eagle-train follow, docs/follow.md)
  t.add(&Options::rollout_dir, "rollout_dir", G::train, kFollow,
        "follow: the folder a producer adds rollout shards to, each written under another name and renamed in "
        "(JSONL, .jsonl.gz or a prepared .bin; `-v<N>` before the extension names its policy version); malformed "
        "shards are moved to its quarantine/ folder")
      .required(kFollow);
  t.add(&Options::follow_window, "follow_window", G::train, kFollow,
        "follow: the new shards a round trains on, oldest first (the newest shard is held out for the publish gate "
        "and trained on in the next round)")
      .range(1, 1 << 20);
  t.add(&Options::follow_replay, "follow_replay", G::train, kFollow,
        "follow: consumed shards replayed in each round beside the new ones (a seeded draw)")
      .range(0, 1 << 20);
  t.add(&Options::follow_max_version_lag, "follow_max_version_lag", G::train, kFollow,
        "follow: shards of a policy version more than this many versions behind the target's are not replayed; 0: "
        "any")
      .range(0, 1 << 30);
  t.add(&Options::publish_every, "publish_every", G::train, kFollow,
        "follow: optimizer steps per round; each round ends with the publish decision")
      .range(1, kMaxSteps);
  t.add(&Options::publish_margin, "publish_margin", G::train, kFollow,
        "follow: a round's draft is published when its AR on the held-out shard is at least the serving version's "
        "minus this margin (negative: it must gain)")
      .range(-64.0, 64.0);
  t.add(&Options::publish_command, "publish_command", G::train, kFollow,
        "follow: a shell command run after each publish, with EAGLE_PUBLISHED_DIR and EAGLE_PUBLISHED_VERSION set "
        "(docs/follow.md: vLLM and SGLang reloads); a failure is logged");
  t.add(&Options::keep_versions, "keep_versions", G::train, kFollow,
        "follow: published versions kept (the serving one always); 0: all")
      .range(0, 1 << 20);
  t.add(&Options::keep_rollouts, "keep_rollouts", G::train, kFollow,
        "follow: consumed shards kept in rollout_dir (the newest; the rest are deleted); 0: all")
      .range(0, 1 << 20);
  t.add(&Options::follow_poll_s, "follow_poll_s", G::train, kFollow,
        "follow: seconds between scans of rollout_dir when a round has too few new shards")
      .range(0.01, 3600.0);
  t.add(&Options::init_draft, "init_draft", G::checkpoint, kTrain,
        "Start the draft from a draft folder: a released draft or another run's export or checkpoint, in any "
        "layout eval reads (SGLang/SpecForge and speculators EAGLE-3, vLLM's EAGLE-1, DFlash, DSpark and DFlash2 "
        "layouts, an MTP target folder); its weights and draft vocabulary are kept, the optimizer and schedule "
        "start fresh. Its config.json decides the head's shape (--draft, layers, aux and target layers, "
        "vocabulary left at their defaults take the draft's); a given option that would build another head is "
        "refused by name; the training options (TTT steps, losses, anchors) are the run's. docs/training.md");
  t.add(&Options::checkpoint, "checkpoint", G::checkpoint, kExport | kEval,
        "A checkpoint folder or an exported head folder to export or evaluate")
      .required(kExport | kEval);
  t.add(&Options::format, "format", G::checkpoint, kExport,
        "Export layout: sglang (also loaded by vLLM), speculators, vllm-eagle1, mtp (an MTP head: a copy of "
        "the target folder, model_name_or_path, with its MTP tensors replaced) or dflash (a DFlash draft: vLLM's "
        "DFlashDraftModel, served with method dflash; sglang writes the same folder for SGLang's DFLASH, with its "
        "checks) or dspark (a DSpark draft: vLLM's Qwen3DSparkModel, served with method dspark); docs/export.md");
  t.add(&Options::quantize, "quantize", G::checkpoint, kExport,
        "none, or fp8: the head's linear weights as FP8 e4m3 with one float32 scale per output channel and "
        "dynamic per-token activations (compressed-tensors, as vLLM loads EAGLE-3 drafts; sglang layout only)");
  t.add(&Options::quantize_scale, "quantize_scale", G::checkpoint, kExport,
        "The per-channel FP8 scale: amax (the row's largest magnitude maps to 448, no clipping) or mse (the "
        "clipped range with the least squared error per row)")
      .acts_only(kExport, "--quantize fp8", [](const Options& o) { return o.quantize == Quantize::fp8; });
  t.add(&Options::quantize_fc, "quantize_fc", G::checkpoint, kExport,
        "With --quantize fp8, quantize the fc fusion layer too (vLLM serves it; SGLang loads an FP8 fc wrong, "
        "so it stays unquantized by default)")
      .acts_only(kExport, "--quantize fp8", [](const Options& o) { return o.quantize == Quantize::fp8; });
  // distributed
  t.add(&Options::ddp_backend, "ddp_backend", G::distributed, kTrain,
        "Collectives of device tensors under torchrun: auto (nccl on CUDA, gloo on CPU), gloo or nccl; host "
        "values always use gloo");
  t.add(&Options::ddp_timeout_s, "ddp_timeout_s", G::distributed, kTrain,
        "Seconds a rank waits for the others in any collective (joining, gradients, evaluation on rank 0, "
        "checkpoints) before it fails with an error; must exceed the longest evaluation")
      .range(1, kMaxTimeoutS);
  t.add(&Options::num_ranks, "num_ranks", G::distributed, kStats,
        "data-stats: data-parallel ranks to plan for (per-rank batch counts); train takes WORLD_SIZE from torchrun")
      .range(1, 1 << 16);
  // runtime
  t.add(&Options::device, "device", G::runtime, kTrain | kInspect | kEval | kGenerate | kDump,
        "auto (cuda when available, else cpu), cpu, cuda or cuda:N")
      .check([](const std::string& d, const Options&) {
        if (d == "auto" || d == "cpu" || d == "cuda") return std::string();
        if (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.find_first_not_of("0123456789", 5) == std::string::npos)
          return std::string();
        return std::string("auto, cpu, cuda or cuda:N");
      });
  t.add(&Options::num_threads, "num_threads", G::runtime, kAll,
        "CPU threads for tensor math; fixed so a resumed run computes the same; 0: the machine's "
        "cores")
      .range(0, 1024);
  t.add(&Options::config, "config", G::runtime, kAll | kReport,
        "A JSON config file (flat, keys = flag names); flags given on the command line override it")
      .not_in_config();
  return t.take();
}

}  // namespace detail

}  // namespace eagle::config
