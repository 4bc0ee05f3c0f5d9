# Temporary probe patch (not committed): times each segment's cudaGraphLaunch and lists its nodes.
import re
p = 'src/exec/replay.cpp'
s = open(p).read()
s = s.replace('#include <cstring>\n', '#include <cstring>\n#include <chrono>\n#include <cstdio>\n#include <map>\n#include <vector>\n', 1)
old = '''  const cudaError_t e = cudaGraphLaunch(s.graph->raw_cuda_graph_exec(), stream.stream());'''
new = '''  static std::map<const void*, std::vector<double>> probe_us;
  const auto probe_t0 = std::chrono::steady_clock::now();
  const cudaError_t e = cudaGraphLaunch(s.graph->raw_cuda_graph_exec(), stream.stream());
  {
    auto& v = probe_us[s.graph->raw_cuda_graph_exec()];
    v.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - probe_t0).count());
    if (v.size() == 300) {
      std::vector<double> w = v;
      std::sort(w.begin(), w.end());
      cudaGraph_t g = s.graph->raw_cuda_graph();
      size_t n = 0;
      cudaGraphGetNodes(g, nullptr, &n);
      std::vector<cudaGraphNode_t> nodes(n);
      cudaGraphGetNodes(g, nodes.data(), &n);
      int types[32] = {0};
      for (auto nd : nodes) { cudaGraphNodeType t; cudaGraphNodeGetType(nd, &t); types[static_cast<int>(t) & 31]++; }
      size_t edges = 0;
      cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges);
      std::fprintf(stderr, "PROBE segment %d: launch median %.2f us p10 %.2f p90 %.2f over 300; nodes %zu (kernel %d memcpy %d memset %d host %d graph %d empty %d waitevent %d record %d other %d) edges %zu; kernel nodes changed this launch %d\\n",
        seg, w[150], w[30], w[270], n, types[cudaGraphNodeTypeKernel], types[cudaGraphNodeTypeMemcpy], types[cudaGraphNodeTypeMemset], types[cudaGraphNodeTypeHost], types[cudaGraphNodeTypeGraph], types[cudaGraphNodeTypeEmpty], types[cudaGraphNodeTypeWaitEvent], types[cudaGraphNodeTypeEventRecord],
        static_cast<int>(n) - types[cudaGraphNodeTypeKernel] - types[cudaGraphNodeTypeMemcpy] - types[cudaGraphNodeTypeMemset] - types[cudaGraphNodeTypeEmpty], edges, probe_changed);
    }
  }'''
assert old in s
s = s.replace(old, new, 1)
old2 = '''  for (Node& n : s.nodes) {
    for (std::int64_t* launches : n.launches) ++*launches;'''
assert old2 in s
s = s.replace(old2, '''  int probe_changed = 0;
  for (Node& n : s.nodes) {
    for (std::int64_t* launches : n.launches) ++*launches;''', 1)
old3 = '''    if (!changed) continue;
    std::vector<void*> params'''
assert old3 in s
s = s.replace(old3, '''    if (!changed) continue;
    ++probe_changed;
    std::vector<void*> params''', 1)
open(p, 'w').write(s)
print("patched")
