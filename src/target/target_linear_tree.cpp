// Tree verification through the Gated DeltaNet layers of the hybrid targets (Qwen3.5, Qwen3.5-MoE, Qwen3-Next):
// every node of a draft tree gets the output it has on its own root-to-node path, then the cache keeps exactly
// the accepted path's conv windows and recurrent states (docs/models.md, "Tree verification").
//
// Per layer the nodes run depth by depth: the nodes of one depth are the rows of one decoding step (the recurrent
// form, as linear_attention_cached runs a token), each row starting from its parent's conv window and state (the
// depth-0 nodes from the cache's). A branched tree's call keeps, like a chain's, only per-node inputs (the conv's
// inputs and outputs, b and a), in node order; accept_tree_path recomputes the accepted path's states from the
// root's with the recurrent form, the same operations as truncate after a chain. Memory for a tree of n nodes, per
// Gated DeltaNet layer: (2 conv_dim + 2 value_heads) values per node kept until the accept, and while the layer
// runs the states of two consecutive depths (w_d + w_{d+1} states of value_heads x key_head_dim x value_head_dim
// fp32: 2 MiB each with the defaults), freed after it. Keeping every node's state for the accept instead would
// hold n states per layer until then (n x 2 MiB per layer: 8 nodes over Qwen3-Next's 36 layers 576 MiB).
#include <fmt/format.h>

#include "eagle/util/error.h"
#include "target_impl.h"

namespace eagle::target {

bool LinearTree::chain() const {
  for (std::size_t i = 0; i < parent.size(); ++i)
    if (parent[i] != static_cast<std::int64_t>(i) - 1) return false;
  return true;
}

LinearTree linear_tree(const torch::Tensor& depth_in, const torch::Tensor& mask_in, torch::Device device) {
  const auto depth_t = depth_in.to(torch::kCPU, torch::kInt64).contiguous();
  const auto mask_t = mask_in.to(torch::kCPU, torch::kBool).contiguous();
  const auto n = depth_t.numel();
  const auto* depth = depth_t.data_ptr<std::int64_t>();
  const auto mask = mask_t.accessor<bool, 2>();
  auto refused = [&](std::int64_t i, const std::string& what) {
    return Error(ErrorKind::internal, "forward_tree's tree_mask is not a draft tree's")
        .place(fmt::format("node {} (depth {})", i, depth[i]))
        .expected("each node sees itself and its ancestors, one per depth above it (its parent at depth - 1)")
        .found(what);
  };
  LinearTree t;
  t.parent.assign(static_cast<std::size_t>(n), -1);
  t.row.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    EAGLE_CHECK(mask[i][i] && depth[i] >= 0 && depth[i] < n, refused(i, "a node not seeing itself, or its depth"));
    std::int64_t parent = -1, seen = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      if (j == i || !mask[i][j]) continue;
      ++seen;
      if (depth[j] != depth[i] - 1) continue;
      EAGLE_CHECK(parent < 0, refused(i, fmt::format("two parents, nodes {} and {}", parent, j)));
      parent = j;
    }
    EAGLE_CHECK(depth[i] == 0 ? seen == 0 : parent >= 0,
                refused(i, depth[i] == 0 ? "a root seeing other nodes" : "no node of the depth above it"));
    // Its ancestors are its parent's and the parent itself: the mask is the tree's closure.
    for (std::int64_t j = 0; parent >= 0 && j < n; ++j)
      EAGLE_CHECK(j == i || mask[i][j] == (j == parent || mask[parent][j]),
                  refused(i, fmt::format("node {} seen unlike by its parent {}", j, parent)));
    t.parent[static_cast<std::size_t>(i)] = parent;
    const auto d = static_cast<std::size_t>(depth[i]);
    if (t.levels.size() <= d) t.levels.resize(d + 1);
    t.row[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(t.levels[d].size());
    t.levels[d].push_back(i);
  }
  // Every depth up to the deepest holds a node (each node's parent is one depth above it).
  for (const auto& nodes : t.levels) {
    std::vector<std::int64_t> rows;
    for (auto i : nodes) {
      const auto p = t.parent[static_cast<std::size_t>(i)];
      rows.push_back(p < 0 ? 0 : t.row[static_cast<std::size_t>(p)]);
    }
    t.level_nodes.push_back(torch::tensor(nodes, torch::kInt64).to(device));
    t.parent_rows.push_back(torch::tensor(rows, torch::kInt64).to(device));
  }
  return t;
}

void begin_linear_tree(const TargetConfig& c, KvCache& cache, const LinearTree& tree) {
  auto& log = cache.rollback;
  const auto L = static_cast<std::size_t>(c.num_hidden_layers);
  log = {};
  log.start = cache.length;
  log.count = static_cast<std::int64_t>(tree.parent.size());
  log.tree_parent = tree.parent;
  for (auto* v : {&log.conv_before, &log.state_before, &log.conv_inputs, &log.conv_outputs, &log.b, &log.a})
    v->assign(L, torch::Tensor());
}

torch::Tensor linear_attention_tree(const TargetConfig& c, const TargetLayerWeights& w, std::size_t l,
                                    const torch::Tensor& h, KvCache& cache, const LinearTree& tree) {
  const auto n = h.size(1), H = h.size(2);
  auto& log = cache.rollback;
  log.conv_before[l] = cache.conv_states[l];
  log.state_before[l] = cache.recurrent_states[l];
  // One depth's nodes as the rows of a cache of their own, one token each.
  KvCache level;
  level.conv_states.assign(cache.conv_states.size(), torch::Tensor());
  level.recurrent_states.assign(cache.recurrent_states.size(), torch::Tensor());
  torch::Tensor out, prev_conv, prev_state;
  std::vector<torch::Tensor> kept(4);  // per node in node order: conv inputs, conv outputs, b, a [1, n, ..]
  for (std::size_t d = 0; d < tree.level_nodes.size(); ++d) {
    const auto& nodes = tree.level_nodes[d];
    const auto m = nodes.size(0);
    if (d == 0) {
      level.conv_states[l] = cache.conv_states[l].expand({m, -1, -1});
      level.recurrent_states[l] = cache.recurrent_states[l].expand({m, -1, -1, -1});
    } else {
      level.conv_states[l] = prev_conv.index_select(0, tree.parent_rows[d]);
      level.recurrent_states[l] = prev_state.index_select(0, tree.parent_rows[d]);
    }
    begin_linear_step(c, level, 1);
    const auto y = linear_attention_cached(c, w, l, h.index_select(1, nodes).reshape({m, 1, H}), level);
    if (!out.defined()) out = torch::empty({1, n, y.size(-1)}, y.options());
    out.index_copy_(1, nodes, y.reshape({1, m, y.size(-1)}));
    const auto& step = level.rollback;
    const torch::Tensor per_row[] = {step.conv_inputs[l], step.conv_outputs[l], step.b[l], step.a[l]};
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const auto& x = per_row[k];
      if (!kept[k].defined()) kept[k] = torch::empty({1, n, x.size(-1)}, x.options());
      kept[k].index_copy_(1, nodes, x.reshape({1, m, x.size(-1)}));
    }
    prev_conv = level.conv_states[l];
    prev_state = level.recurrent_states[l];
  }
  log.conv_inputs[l] = kept[0];
  log.conv_outputs[l] = kept[1];
  log.b[l] = kept[2];
  log.a[l] = kept[3];
  return out;
}

void accept_linear_path(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                        std::int64_t before, const std::vector<std::int64_t>& path) {
  auto& log = cache.rollback;
  const auto P = static_cast<std::int64_t>(path.size());
  EAGLE_CHECK(log.start == before && cache.length == log.start + log.count,
              Error(ErrorKind::internal, "accept_tree_path on a hybrid target follows its forward_tree call")
                  .expected(fmt::format("the call at cache length {}", before))
                  .found(fmt::format("the last call's kept states at {} (length {})", log.start, cache.length)));
  if (log.tree_parent.empty()) {
    // The last call was a chain: the accepted path is its first nodes, and truncate's rollback keeps them.
    for (std::int64_t j = 0; j < P; ++j)
      EAGLE_CHECK(path[static_cast<std::size_t>(j)] == j,
                  Error(ErrorKind::internal, "a chain's accepted path is its first nodes")
                      .place(fmt::format("path[{}]", j))
                      .found(std::to_string(path[static_cast<std::size_t>(j)])));
    if (before + P != cache.length) rollback_linear_states(c, layers, cache, before + P);
    return;
  }
  for (std::int64_t j = 0; j < P; ++j) {
    const auto node = path[static_cast<std::size_t>(j)];
    const auto parent = log.tree_parent[static_cast<std::size_t>(node)];
    EAGLE_CHECK(parent == (j == 0 ? -1 : path[static_cast<std::size_t>(j) - 1]),
                Error(ErrorKind::internal, "accept_tree_path takes a root-to-node path of the tree")
                    .place(fmt::format("path[{}] (node {})", j, node))
                    .expected(j == 0 ? std::string("a root (parent -1)")
                                     : fmt::format("a child of node {}", path[static_cast<std::size_t>(j) - 1]))
                    .found(fmt::format("the child of {}", parent)));
  }
  // The path's kept inputs as a chain's (the call's first P tokens), then truncate's rollback over them.
  const auto nodes = torch::tensor(path, torch::kInt64).to(cache.keys.at(0).device());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (!c.linear(static_cast<std::int64_t>(l))) continue;
    for (auto* v : {&log.conv_inputs, &log.conv_outputs, &log.b, &log.a}) (*v)[l] = (*v)[l].index_select(1, nodes);
  }
  log.count = P;
  log.tree_parent.clear();
  rollback_linear_states(c, layers, cache, before + P);
}

void truncate_linear_tree(const TargetConfig& c, const std::vector<TargetLayerWeights>& layers, KvCache& cache,
                          std::int64_t length) {
  auto& log = cache.rollback;
  const auto k = length - log.start;
  bool chain = k >= 0 && k <= log.count;
  for (std::int64_t j = 0; chain && j < k; ++j) chain = log.tree_parent[static_cast<std::size_t>(j)] == j - 1;
  EAGLE_CHECK(chain, Error(ErrorKind::internal,
                           "a hybrid target's cache after forward_tree rolls back only to a chain of the tree's first "
                           "nodes")
                         .expected(fmt::format("a length from {} on whose nodes each follow the one before", log.start))
                         .found(std::to_string(length))
                         .hint("accept_tree_path keeps any root-to-node path"));
  log.tree_parent.clear();
  rollback_linear_states(c, layers, cache, length);
}

}  // namespace eagle::target
