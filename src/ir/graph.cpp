#include "ir/graph.h"

#include <map>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/hash.h"

namespace hotpath::detail {

bool Node::mutates() const {
  for (const auto& in : inputs) {
    if (in.written) return true;
  }
  return false;
}

int Node::input_at(int argument) const {
  for (const auto& in : inputs) {
    if (in.argument == argument) return in.value;
  }
  return -1;
}

const char* dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "f32";
    case c10::ScalarType::Double:
      return "f64";
    case c10::ScalarType::Half:
      return "f16";
    case c10::ScalarType::BFloat16:
      return "bf16";
    case c10::ScalarType::Bool:
      return "b8";
    case c10::ScalarType::Long:
      return "i64";
    case c10::ScalarType::Int:
      return "i32";
    case c10::ScalarType::Byte:
      return "u8";
    default:
      return c10::toString(t);
  }
}

bool dense(const TensorMeta& m) {
  std::int64_t expect = 1;
  for (std::size_t d = m.sizes.size(); d-- > 0;) {
    if (m.sizes[d] != 1 && m.strides[d] != expect) return false;
    expect *= m.sizes[d];
  }
  return true;
}

bool same_layout(const TensorMeta& a, const TensorMeta& b) {
  return a.defined == b.defined && a.dtype == b.dtype && a.device == b.device &&
         a.sizes == b.sizes && a.strides == b.strides && a.storage_offset == b.storage_offset;
}

std::string format_meta(const TensorMeta& m) {
  if (!m.defined) return "None";
  std::ostringstream os;
  os << dtype_name(m.dtype) << "[";
  for (std::size_t i = 0; i < m.sizes.size(); ++i) os << (i ? ", " : "") << m.sizes[i];
  os << "]";
  if (!dense(m)) {
    os << "{";
    for (std::size_t i = 0; i < m.strides.size(); ++i) os << (i ? ", " : "") << m.strides[i];
    os << "}";
  }
  if (m.storage_offset != 0) os << "+" << m.storage_offset;
  os << " " << m.device;
  return os.str();
}

Graph Graph::from_trace(const HotTrace& trace) {
  Graph g;
  std::map<std::pair<std::int64_t, std::int32_t>, int> produced;  // (node, output) -> value
  std::map<std::int64_t, int> outside;                            // ordinal -> value
  auto new_value = [&](const TensorMeta& meta) {
    Value v;
    v.id = static_cast<int>(g.values_.size());
    v.meta = meta;
    v.tensor = v.id;
    g.values_.push_back(v);
    g.readers_.emplace_back();
    return v.id;
  };
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const OpRecord& op = trace.ops[i];
    Node n;
    n.index = static_cast<int>(i);
    n.name = std::string(op.name);
    n.overload = std::string(op.overload);
    n.short_name_ = n.name.rfind("aten::", 0) == 0 ? n.name.substr(6) : n.name;
    if (!n.overload.empty()) n.short_name_ += "." + n.overload;
    n.args.assign(op.args.begin(), op.args.end());
    n.scalar_mask = op.scalar_mask;
    n.input_key = op.input_key;
    for (const TensorInput& in : op.inputs) {
      NodeInput ni;
      ni.argument = in.argument;
      ni.written = in.written;
      if (in.meta.defined) {
        if (in.ref.producer >= 0) {
          const auto it = produced.find({in.ref.producer, in.ref.output});
          HOTPATH_CHECK(it != produced.end(), "trace op ", i, " (", n.name,
                        ") reads an output of op ", in.ref.producer, " that was not recorded");
          ni.value = it->second;
        } else {
          auto it = outside.find(in.ref.producer);
          if (it == outside.end()) {
            const int id = new_value(in.meta);
            g.values_[static_cast<std::size_t>(id)].outside = static_cast<int>(outside.size());
            it = outside.emplace(in.ref.producer, id).first;
          }
          ni.value = it->second;
        }
        g.readers_[static_cast<std::size_t>(ni.value)].push_back(n.index);
      }
      n.inputs.push_back(ni);
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
      const int id = new_value(op.outputs[o]);
      Value& v = g.values_[static_cast<std::size_t>(id)];
      v.producer = n.index;
      v.output = static_cast<int>(o);
      const std::int32_t alias = o < op.output_alias.size() ? op.output_alias[o] : -1;
      if (alias >= 0) {
        const int base = n.input_at(alias);
        if (base >= 0) {
          const int first = g.values_[static_cast<std::size_t>(base)].tensor;
          if (same_layout(g.values_[static_cast<std::size_t>(first)].meta, v.meta))
            v.tensor = first;
        }
      }
      n.outputs.push_back(id);
      n.out_alias.push_back(alias);
      produced[{static_cast<std::int64_t>(i), static_cast<std::int32_t>(o)}] = id;
    }
    g.nodes_.push_back(std::move(n));
  }
  return g;
}

namespace {
void print_arg(std::ostream& os, const c10::IValue& v, bool scalar) {
  if (v.isNone()) {
    os << "None";
  } else if (scalar) {
    os << (v.isDouble() ? "$f" : v.isInt() ? "$i" : v.isBool() ? "$b" : "$c");  // kind only
  } else if (v.isInt()) {
    os << v.toInt();
  } else if (v.isBool()) {
    os << (v.toBool() ? "true" : "false");
  } else if (v.isDouble()) {
    os << v.toDouble();
  } else if (v.isString()) {
    os << '"' << v.toStringRef() << '"';
  } else if (v.isIntList()) {
    os << "[";
    const auto l = v.toIntVector();
    for (std::size_t i = 0; i < l.size(); ++i) os << (i ? ", " : "") << l[i];
    os << "]";
  } else {
    os << v.tagKind();
  }
}
}  // namespace

std::string Graph::to_text() const {
  std::ostringstream os;
  os << "graph(";
  bool first = true;
  for (const Value& v : values_) {
    if (v.producer >= 0) continue;
    os << (first ? "" : ", ") << "%" << v.id << ": " << format_meta(v.meta);
    first = false;
  }
  os << ") {\n";
  for (const Node& n : nodes_) {
    os << "  ";
    for (std::size_t o = 0; o < n.outputs.size(); ++o) os << (o ? ", " : "") << "%" << n.outputs[o];
    os << (n.outputs.empty() ? "" : " = ") << n.name;
    if (!n.overload.empty()) os << "." << n.overload;
    os << "(";
    std::size_t next_input = 0;
    for (std::size_t a = 0; a < n.args.size(); ++a) {
      os << (a ? ", " : "");
      if (next_input < n.inputs.size() && n.inputs[next_input].argument == static_cast<int>(a)) {
        // A tensor argument (lists of tensors record several inputs at one position).
        bool first_in = true;
        while (next_input < n.inputs.size() &&
               n.inputs[next_input].argument == static_cast<int>(a)) {
          const NodeInput& in = n.inputs[next_input++];
          os << (first_in ? "" : "|");
          if (in.value < 0) {
            os << "None";
          } else {
            os << "%" << in.value << (in.written ? "!" : "");
          }
          first_in = false;
        }
      } else {
        print_arg(os, n.args[a], n.is_scalar_arg(static_cast<int>(a)));
      }
    }
    os << ")";
    for (std::size_t o = 0; o < n.outputs.size(); ++o) {
      os << (o ? ", " : " : ") << format_meta(value(n.outputs[o]).meta);
      if (n.out_alias[o] >= 0) os << " @arg" << n.out_alias[o];
    }
    os << "\n";
  }
  os << "}\n";
  return os.str();
}

std::uint64_t Graph::hash() const { return hash_string(to_text()); }

std::ostream& operator<<(std::ostream& os, const Graph& g) { return os << g.to_text(); }

bool is_contiguous(const TensorMeta& m) { return dense(m) && m.storage_offset == 0; }

}  // namespace hotpath::detail
