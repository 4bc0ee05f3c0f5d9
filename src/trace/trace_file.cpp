#include "trace/trace_file.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "common/hash.h"

namespace hotpath::detail {
namespace {

// The first line; the second names the LibTorch the trace was recorded with (its operators'
// schemas, and so its arguments, may differ in another).
constexpr const char* kMagic = "hotpath-trace 2\n";
constexpr std::uint32_t kMaxCount = 1u << 24;  // a count past this is a damaged file

enum Tag : std::uint8_t {
  kNone = 0,
  kInt = 1,
  kDouble = 2,
  kBool = 3,
  kString = 4,
  kIntList = 5,
  kDoubleList = 6,
  kBoolList = 7,
  kDevice = 8,
};

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void count(std::size_t n) { put(static_cast<std::uint32_t>(n)); }
  void text(std::string_view s) {
    count(s.size());
    out_.append(s.data(), s.size());
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    HOTPATH_CHECK(pos_ + sizeof(T) <= in_.size(), "it ends early");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::size_t count() {
    const auto n = get<std::uint32_t>();
    HOTPATH_CHECK(n <= kMaxCount, "a count of ", n, " is past any trace's");
    return n;
  }
  std::string text() {
    const std::size_t n = count();
    HOTPATH_CHECK(pos_ + n <= in_.size(), "it ends early");
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
};

bool put_value(Writer& w, const c10::IValue& v) {
  if (v.isNone()) {
    w.put(kNone);
  } else if (v.isInt()) {
    w.put(kInt);
    w.put(v.toInt());
  } else if (v.isDouble()) {
    w.put(kDouble);
    w.put(v.toDouble());
  } else if (v.isBool()) {
    w.put(kBool);
    w.put(static_cast<std::uint8_t>(v.toBool()));
  } else if (v.isString()) {
    w.put(kString);
    w.text(v.toStringRef());
  } else if (v.isIntList()) {
    w.put(kIntList);
    const auto l = v.toIntList();
    w.count(l.size());
    for (const std::int64_t x : l) w.put(x);
  } else if (v.isDoubleList()) {
    w.put(kDoubleList);
    const auto l = v.toDoubleList();
    w.count(l.size());
    for (const double x : l) w.put(x);
  } else if (v.isBoolList()) {
    w.put(kBoolList);
    const auto l = v.toBoolList();
    w.count(l.size());
    for (const bool x : l) w.put(static_cast<std::uint8_t>(x));
  } else if (v.isDevice()) {
    w.put(kDevice);
    w.put(static_cast<std::int8_t>(v.toDevice().type()));
    w.put(static_cast<std::int8_t>(v.toDevice().index()));
  } else {
    return false;
  }
  return true;
}

c10::IValue get_value(Reader& r) {
  switch (r.get<std::uint8_t>()) {
    case kNone:
      return c10::IValue();
    case kInt:
      return c10::IValue(r.get<std::int64_t>());
    case kDouble:
      return c10::IValue(r.get<double>());
    case kBool:
      return c10::IValue(r.get<std::uint8_t>() != 0);
    case kString:
      return c10::IValue(r.text());
    case kIntList: {
      std::vector<std::int64_t> l(r.count());
      for (auto& x : l) x = r.get<std::int64_t>();
      return c10::IValue(l);
    }
    case kDoubleList: {
      std::vector<double> l(r.count());
      for (auto& x : l) x = r.get<double>();
      return c10::IValue(l);
    }
    case kBoolList: {
      c10::List<bool> l;
      const std::size_t n = r.count();
      for (std::size_t i = 0; i < n; ++i) l.push_back(r.get<std::uint8_t>() != 0);
      return c10::IValue(l);
    }
    case kDevice: {
      const auto type = static_cast<c10::DeviceType>(r.get<std::int8_t>());
      const auto index = static_cast<c10::DeviceIndex>(r.get<std::int8_t>());
      return c10::IValue(c10::Device(type, index));
    }
    default:
      HOTPATH_FAIL("an argument of unknown kind");
  }
}

void put_meta(Writer& w, const TensorMeta& m) {
  w.put(static_cast<std::uint8_t>(m.defined));
  w.put(static_cast<std::int8_t>(m.dtype));
  w.put(static_cast<std::int8_t>(m.device.type()));
  w.put(static_cast<std::int8_t>(m.device.index()));
  w.count(m.sizes.size());
  for (const std::int64_t s : m.sizes) w.put(s);
  w.count(m.strides.size());
  for (const std::int64_t s : m.strides) w.put(s);
  w.put(m.storage_offset);
}

TensorMeta get_meta(Reader& r) {
  TensorMeta m;
  m.defined = r.get<std::uint8_t>() != 0;
  m.dtype = static_cast<c10::ScalarType>(r.get<std::int8_t>());
  const auto type = static_cast<c10::DeviceType>(r.get<std::int8_t>());
  m.device = c10::Device(type, static_cast<c10::DeviceIndex>(r.get<std::int8_t>()));
  m.sizes.resize(r.count());
  for (auto& s : m.sizes) s = r.get<std::int64_t>();
  m.strides.resize(r.count());
  for (auto& s : m.strides) s = r.get<std::int64_t>();
  m.storage_offset = r.get<std::int64_t>();
  return m;
}

bool scalar_position(const OpRecord& op, std::size_t i) {
  return i < 64 && ((op.scalar_mask >> i) & 1) != 0;
}

// Everything of `op` the planner reads, appended to `w` in parts. With `values` false, a scalar
// argument is written as its kind alone, and with `alive` false too, which outputs were held.
// `ends`, if given, gets each part's name and where it ends in w's bytes (what
// plan_input_difference names; the names cost more than the bytes, so only a difference asks).
using PartEnds = std::vector<std::pair<std::string, std::size_t>>;

bool put_op(Writer& w, const OpRecord& op, bool values, bool alive, std::string* why,
            PartEnds* ends) {
  auto part = [&](auto&& name) {
    if (ends != nullptr) ends->emplace_back(name(), w.bytes().size());
  };
  auto named = [](const char* text) { return [text] { return std::string(text); }; };
  w.text(op.name);
  w.text(op.overload);
  w.put(op.key);
  w.put(op.name_key);
  w.put(op.input_key);
  w.put(op.args_key);
  w.put(op.scalar_mask);
  part(named("its operator or keys"));
  w.put(op.planned_key);
  w.put(op.planned_alias);
  part(named("the in-place twin a plan ran for it"));
  w.put(static_cast<std::uint8_t>(op.grad_enabled));
  w.put(static_cast<std::uint8_t>(op.reads_param));
  w.put(static_cast<std::uint8_t>(op.writes_param));
  w.put(static_cast<std::uint8_t>(op.light));
  part(named("its grad mode or parameter flags"));
  w.count(op.inputs.size());
  part(named("its number of tensor inputs"));
  for (std::size_t k = 0; k < op.inputs.size(); ++k) {
    const TensorInput& in = op.inputs[k];
    w.put(in.argument);
    w.put(static_cast<std::uint8_t>(in.written));
    put_meta(w, in.meta);
    w.put(in.meta_key);
    part([&] { return concat("tensor input ", k, "'s metadata"); });
    w.put(in.ref.producer);
    w.put(in.ref.output);
    part([&] {
      return concat("tensor input ", k, "'s producer (op ", in.ref.producer, ", output ",
                    in.ref.output, ")");
    });
  }
  w.count(op.args.size());
  part(named("its number of arguments"));
  for (std::size_t i = 0; i < op.args.size(); ++i) {
    const c10::IValue& a = op.args[i];
    if (!values && scalar_position(op, i)) {
      w.put(static_cast<std::uint8_t>(a.isInt()      ? kInt
                                      : a.isDouble() ? kDouble
                                      : a.isBool()   ? kBool
                                                     : 0xff));
    } else if (!put_value(w, a)) {
      if (why != nullptr)
        *why = concat("argument ", i, " of ", op.name, " is a ", a.tagKind(),
                      ", which a trace file does not hold");
      return false;
    }
    part([&] { return concat("argument ", i); });
  }
  w.count(op.outputs.size());
  for (const TensorMeta& m : op.outputs) put_meta(w, m);
  part(named("its outputs' metadata"));
  w.count(op.output_alias.size());
  for (const std::int32_t a : op.output_alias) w.put(a);
  part(named("which arguments its outputs are"));
  // Compared only where an output is a tensor of its own: one that is an argument written in
  // place (an optimizer's state) lives on, and a loop's first iteration, closed once later ones
  // have written it again, cannot tell whether it was held then (the recorder sees it as another
  // op's by then). The planner reads the flags for what a kernel may skip writing and for
  // temporaries' buffers, neither of which an argument written in place has.
  w.count(op.output_alive.size());
  for (std::size_t k = 0; k < op.output_alive.size(); ++k) {
    const bool in_place = k < op.output_alias.size() && op.output_alias[k] >= 0;
    w.put(static_cast<std::uint8_t>(!values && (in_place || !alive) ? 2 : op.output_alive[k]));
  }
  part(named("which of its outputs the iteration still held at its end"));
  return true;
}

void get_op(Reader& r, OpRecord& op) {
  const std::string name = r.text();
  const std::string overload = r.text();
  // The names point into the dispatcher's table, as a recorded op's do.
  const auto handle = c10::Dispatcher::singleton().findSchema(c10::OperatorName(name, overload));
  HOTPATH_CHECK(handle.has_value(), "it names ", name, overload.empty() ? "" : ".", overload,
                ", an operator this process does not have");
  op.name = handle->schema().name();
  op.overload = handle->schema().overload_name();
  op.key = r.get<std::uint64_t>();
  op.name_key = r.get<std::uint64_t>();
  op.input_key = r.get<std::uint64_t>();
  op.args_key = r.get<std::uint64_t>();
  op.scalar_mask = r.get<std::uint64_t>();
  op.planned_key = r.get<std::uint64_t>();
  op.planned_alias = r.get<std::int32_t>();
  op.grad_enabled = r.get<std::uint8_t>() != 0;
  op.reads_param = r.get<std::uint8_t>() != 0;
  op.writes_param = r.get<std::uint8_t>() != 0;
  op.light = r.get<std::uint8_t>() != 0;
  op.inputs.resize(r.count());
  for (TensorInput& in : op.inputs) {
    in.argument = r.get<std::int32_t>();
    in.written = r.get<std::uint8_t>() != 0;
    in.meta = get_meta(r);
    in.meta_key = r.get<std::uint64_t>();
    in.ref.producer = r.get<std::int64_t>();
    in.ref.output = r.get<std::int32_t>();
  }
  const std::size_t nargs = r.count();
  for (std::size_t i = 0; i < nargs; ++i) op.args.push_back(get_value(r));
  op.outputs.resize(r.count());
  for (TensorMeta& m : op.outputs) m = get_meta(r);
  op.output_alias.resize(r.count());
  for (std::int32_t& a : op.output_alias) a = r.get<std::int32_t>();
  op.output_alive.resize(r.count());
  for (std::size_t i = 0; i < op.output_alive.size(); ++i)
    op.output_alive[i] = r.get<std::uint8_t>() != 0;
}

std::optional<std::string> body(const HotTrace& trace, std::string* why) {
  Writer w;
  w.put(trace.signature);
  w.put(trace.iteration);
  w.count(trace.ops.size());
  for (const OpRecord& op : trace.ops)
    if (!put_op(w, op, true, true, why, nullptr)) return std::nullopt;
  return std::move(w.bytes());
}

std::string trace_path(const std::string& cache_dir, std::uint64_t signature) {
  return trace_dir(cache_dir) + "/" + full_hex(signature) + ".trace";
}

}  // namespace

std::optional<std::string> encode_trace(const HotTrace& trace, std::string* why) {
  std::optional<std::string> b = body(trace, why);
  if (!b) return std::nullopt;
  Writer w;
  w.bytes() = kMagic;
  w.text(TORCH_VERSION);
  w.text(*b);
  w.put(hash_string(*b));
  return std::move(w.bytes());
}

std::optional<HotTrace> decode_trace(const std::string& bytes, std::string* why) {
  const std::size_t magic = std::strlen(kMagic);
  try {
    HOTPATH_CHECK(bytes.compare(0, magic, kMagic) == 0, "it is not a hotpath trace file");
    Reader outer(std::string_view(bytes).substr(magic));
    const std::string version = outer.text();
    HOTPATH_CHECK(version == TORCH_VERSION, "it was recorded with LibTorch ", version,
                  ", not this process's ", TORCH_VERSION);
    const std::string b = outer.text();
    HOTPATH_CHECK(outer.get<std::uint64_t>() == hash_string(b) && outer.done(),
                  "its checksum does not match (the file was changed or cut short)");
    Reader r(b);
    HotTrace t;
    t.signature = r.get<std::uint64_t>();
    t.iteration = r.get<std::int64_t>();
    t.ops.resize(r.count());
    for (OpRecord& op : t.ops) get_op(r, op);
    HOTPATH_CHECK(r.done(), "bytes follow its last op");
    return t;
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

std::string plan_input_difference(const HotTrace& a, const HotTrace& b,
                                  const std::vector<bool>* alive_matters) {
  if (a.signature != b.signature)
    return concat("signature ", short_hex(a.signature), " against ", short_hex(b.signature));
  if (a.ops.size() != b.ops.size()) return concat(a.ops.size(), " ops against ", b.ops.size());
  Writer x, y;  // reused: an op's bytes, without the parts' names
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const bool alive =
        alive_matters == nullptr || (i < alive_matters->size() && (*alive_matters)[i]);
    std::string why;
    x.bytes().clear();
    y.bytes().clear();
    if (!put_op(x, a.ops[i], false, alive, &why, nullptr) ||
        !put_op(y, b.ops[i], false, alive, &why, nullptr))
      return concat("op ", i, ": ", why);
    if (x.bytes() == y.bytes()) continue;
    // Which part: again with the parts' names.
    PartEnds xe, ye;
    x.bytes().clear();
    y.bytes().clear();
    put_op(x, a.ops[i], false, alive, &why, &xe);
    put_op(y, b.ops[i], false, alive, &why, &ye);
    const OpRecord& op = a.ops[i];
    const std::string name =
        concat("op ", i, " (", op.name, op.overload.empty() ? "" : ".", op.overload, ")");
    std::size_t from = 0;
    for (std::size_t k = 0; k < xe.size() && k < ye.size(); ++k) {
      if (xe[k].second != ye[k].second ||
          x.bytes().compare(from, xe[k].second - from, y.bytes(), from, ye[k].second - from) != 0)
        return xe[k].first == ye[k].first
                   ? concat(name, " differs in ", xe[k].first)
                   : concat(name, " differs in ", xe[k].first, " against ", ye[k].first);
      from = xe[k].second;
    }
    return concat(name, " differs in its number of parts");
  }
  return {};
}

std::string trace_dir(const std::string& cache_dir) { return cache_dir + "/traces"; }

std::string save_trace(const std::string& cache_dir, const HotTrace& trace) {
  std::string why;
  const std::optional<std::string> bytes = encode_trace(trace, &why);
  if (!bytes) return why;
  return write_file_atomic(trace_dir(cache_dir), trace_path(cache_dir, trace.signature), *bytes);
}

std::optional<HotTrace> load_trace(const std::string& cache_dir, std::uint64_t signature,
                                   std::string* why) {
  const std::string path = trace_path(cache_dir, signature);
  const std::optional<std::string> bytes = read_file(path);
  if (!bytes) {
    if (why != nullptr) *why = concat("no file ", path);
    return std::nullopt;
  }
  std::optional<HotTrace> t = decode_trace(*bytes, why);
  if (t && t->signature != signature) {
    if (why != nullptr) *why = concat(path, " holds another signature's trace");
    return std::nullopt;
  }
  if (!t && why != nullptr) *why = concat(path, ": ", *why);
  return t;
}

}  // namespace hotpath::detail
