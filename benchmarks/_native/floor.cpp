// The op tracer's floor below Python: a global at::RecordFunction callback (scope FUNCTION) that
// counts calls, or digests every CPU tensor it is given with XXH3-64 and appends a small binary
// record per call to a buffer. Built by benchmarks/bench_tracer_floor.py with
// torch.utils.cpp_extension.load_inline (which puts `#include <torch/extension.h>` before this
// text). A benchmark, not a tracer: it records no shapes, no arguments, no generator state, no
// autograd metadata and no issuer (docs/scale.md says what a native tracer would have to add).
//
// Modes (start(mode)):
//   1 count            count calls; needsInputs/needsOutputs true (the inputs are boxed)
//   2 xxh3 in+out      digest every input (start) and output (end) CPU tensor, one record per call
//   3 xxh3 out         digest outputs only (needsInputs false), one record per call
//   4 names            count (name.overload, depth) for the op-set comparison
//   5 count, unboxed   count calls; needsInputs/needsOutputs false
//   6 xxh3 in+out, the mode's op set   as 2, for the calls a dispatch mode would see (below)
//   7 xxh3 out, the mode's op set      as 3, for the same calls
//   8 a fuller record, the mode's op set: as 6, each tensor's shape beside its digest, the
//     non-tensor arguments digested, autograd's sequence number, and the issuer: the GIL taken and
//     Python's frames walked to the first one outside torch, the standard library and the probes
//     (optrace's Issuers.note; each code object classified once)
//   9 as 8 without the issuer (no GIL, no frames)
//  10 as 9 with no byte read: every digest is 0 (what the record costs beside the bytes)
//  12 as 9 with optrace's own rules on which bytes to read (probes/optrace): a tensor passed twice
//     to one call digested once; an .out variant's buffers and the self of copy_, fill_, zero_ and
//     the random fills (written whole, not read) not digested as inputs; a same-element view's
//     output (t, view, detach ...) given its input's digest when both lie densely over the same
//     bytes; _local_scalar_dense and the profiler ops not recorded
//  11 as 9, an input's digest reused when the same tensor was digested as a recorded call's output
//     and its version counter has not moved since (a digest cache: what it cannot see is in
//     docs/scale.md, "The tracer's floor")
//
// The mode's op set (modes 4, 6, 7): a TorchDispatchMode sees an op when the op reaches the Python
// key, below autograd; a CompositeImplicitAutograd op (aten::linear) has no kernel there and
// decomposes above it, so the mode sees its parts (t, addmm) but not it; the calls an op's kernel
// makes below the Python key (copy_ inside _to_copy, transpose inside t) are not seen either.
// RecordFunction sees every call. The rule used here: a call is in the mode's set when every
// recorded call around it is CompositeImplicitAutograd or not an op at all (autograd's
// evaluate_function ranges), and it is not CompositeImplicitAutograd itself.
#define XXH_INLINE_ALL
#include "xxhash.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <cstring>
#include <map>
#include <unordered_set>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

int g_mode = 0;
bool g_full = false;  // modes 8 and 9: shapes, non-tensor arguments, sequence number
bool g_issuer = false;  // mode 8
bool g_nobytes = false;  // mode 10
std::vector<std::string> g_skip;  // path prefixes that are not an issuer (torch, stdlib, probes)
std::unordered_map<PyCodeObject*, bool> g_code_skip;  // code object -> not an issuer (held alive)
std::vector<uint8_t> g_args;  // the non-tensor arguments of the call being recorded
at::CallbackHandle g_handle = at::INVALID_CALLBACK_HANDLE;
thread_local int t_depth = 0;

struct Stats {
  int64_t calls = 0;
  int64_t tensors = 0;      // tensors digested
  int64_t bytes = 0;        // bytes digested
  int64_t copies = 0;       // tensors copied to row-major first (overlapping or with gaps)
  int64_t skipped = 0;      // tensors not digested (not a CPU strided tensor with storage)
  int64_t records = 0;
  int64_t issuers = 0;      // calls whose issuer was found (mode 8)
  int64_t reused = 0;       // input digests taken from the cache (mode 11)
  int64_t stale = 0;        // ... of which differed from the bytes' digest (verify(true) only)
} g_stats;

bool g_rules = false;  // mode 12
// mode 12: the inputs digested in the current call (a tensor passed twice is read once), and the
// first input's digest where it read the tensor's own memory (a view's output may reuse it)
std::vector<std::pair<const c10::TensorImpl*, uint64_t>> g_call_inputs;
struct First {
  bool valid = false;
  const void* data = nullptr;
  size_t nbytes = 0;
  uint64_t h = 0;
};
First g_first;      // the current call's first input (set while its inputs are digested)
First g_view_from;  // the view's input, while its output is digested (on_end)
bool g_cache = false;  // mode 11
bool g_verify = false;  // mode 11: digest the bytes too and count the cached digests that differ
bool g_out_side = false;  // digesting a call's outputs (else its inputs)
struct Cached {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl;  // holds the address
  uint32_t version;
  const void* data;
  int64_t numel;
  uint64_t h;
};
std::unordered_map<const c10::TensorImpl*, Cached> g_cached;

std::vector<uint8_t> g_buf;                               // the records since the last take()
std::unordered_map<const char*, uint32_t> g_name_ids;     // fn.name() is the schema's string: stable
std::vector<std::string> g_names;
std::map<std::pair<std::string, int>, int64_t> g_seen;   // mode 4: (name.overload, depth) -> calls
std::map<std::string, int64_t> g_visible;                 // mode 4: the mode's op set by the rule above

struct OpKind {
  bool op;         // a dispatcher op (else a named range: autograd's evaluate_function, "detach")
  bool composite;  // it has a CompositeImplicitAutograd kernel
  bool view = false;        // mode 12: optrace's SAME_ELEMENT_VIEWS
  bool overwrites = false;  // mode 12: optrace's OVERWRITING_OPS (self written whole, not read)
  bool skip = false;        // mode 12: optrace's SKIPPED_OPS and the profiler ops
  uint64_t out_args = 0;    // mode 12: the schema's out arguments (bit per argument)
};

// probes/optrace/ops.py's lists, by base name (the op's name without namespace and overload)
const std::unordered_set<std::string> kSameElementViews = {
    "t", "transpose", "permute", "view", "_unsafe_view", "reshape", "_reshape_alias", "detach", "alias",
    "squeeze", "unsqueeze", "flatten", "unflatten", "view_as", "numpy_T", "mT", "adjoint", "movedim",
    "swapaxes", "swapdims", "lift_fresh"};
const std::unordered_set<std::string> kOverwriting = {
    "copy_", "fill_", "zero_", "random_", "uniform_", "normal_", "cauchy_", "log_normal_",
    "exponential_", "geometric_", "bernoulli_"};
const std::unordered_set<std::string> kSkipped = {
    "hash_tensor", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type"};
std::unordered_map<const char*, OpKind> g_kinds;  // only ops: their name is the schema's string

OpKind kind_of(const at::RecordFunction& fn) {
  const char* name = fn.name();
  auto it = g_kinds.find(name);
  if (it != g_kinds.end()) return it->second;
  auto op = fn.operator_name();
  if (!op) return {false, false};  // a range's name may live in the RecordFunction: not cached
  auto handle = c10::Dispatcher::singleton().findOp(*op);
  OpKind k{true, handle && handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)};
  const std::string& full = op->name;
  const auto colons = full.find("::");
  const std::string ns = colons == std::string::npos ? "" : full.substr(0, colons);
  const std::string base = colons == std::string::npos ? full : full.substr(colons + 2);
  k.view = kSameElementViews.count(base) > 0;
  k.overwrites = kOverwriting.count(base) > 0;
  k.skip = kSkipped.count(base) > 0 || ns == "profiler";
  if (handle) {
    const auto& args = handle->schema().arguments();
    for (size_t i = 0; i < args.size() && i < 64; ++i) {
      if (args[i].is_out()) k.out_args |= uint64_t{1} << i;
    }
  }
  g_kinds.emplace(name, k);
  return k;
}

// per call on the stack: whether the calls inside it are still in the mode's set, whether it is
thread_local std::vector<std::pair<bool, bool>> t_frames;

// Pushes this call's frame and says whether it is in the mode's set.
bool mode_sees(const at::RecordFunction& fn) {
  const bool open = t_frames.empty() || t_frames.back().first;
  const OpKind k = kind_of(fn);
  const bool sees = open && k.op && !k.composite;
  t_frames.emplace_back(open && (!k.op || k.composite), sees);
  return sees;
}

inline void put(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  g_buf.insert(g_buf.end(), b, b + n);
}

uint32_t name_id(const char* name) {
  auto it = g_name_ids.find(name);
  if (it != g_name_ids.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(g_names.size());
  g_names.emplace_back(name);
  g_name_ids.emplace(name, id);
  return id;
}

// One tensor: XXH3-64 of its bytes in memory order (row-major, or as a dense permuted tensor lies,
// as optrace's `o` with `ol`); a tensor with gaps or overlaps is copied to row-major first (with
// RecordFunction off, so the copy is not recorded). Appends digest, numel and dtype to the record.
void digest(const at::Tensor& t, uint16_t& count) {
  if (!t.defined() || t.layout() != at::kStrided || !t.device().is_cpu() || !t.has_storage() ||
      t.is_quantized()) {
    ++g_stats.skipped;
    return;
  }
  const int64_t n = t.numel();
  const size_t nbytes = static_cast<size_t>(n) * t.element_size();
  uint64_t h;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (g_rules && !g_out_side) {
    for (const auto& [seen, seen_h] : g_call_inputs) {
      if (seen == impl) {
        h = seen_h;
        ++g_stats.reused;
        goto write;
      }
    }
  }
  if (g_rules && g_out_side && g_view_from.valid && n > 0 && t.const_data_ptr() == g_view_from.data &&
      nbytes == g_view_from.nbytes && t.is_non_overlapping_and_dense()) {
    h = g_view_from.h;  // the same bytes in the same memory order: the input's digest
    ++g_stats.reused;
    if (g_verify && XXH3_64bits(t.const_data_ptr(), nbytes) != h) ++g_stats.stale;
    goto write;
  }
  {
  const bool cacheable = g_cache && !t.is_inference();
  if (cacheable && !g_out_side) {
    auto it = g_cached.find(impl);
    if (it != g_cached.end() && !it->second.impl.expired() &&
        it->second.version == impl->version_counter().current_version() &&
        it->second.data == t.const_data_ptr() && it->second.numel == n) {
      h = it->second.h;
      ++g_stats.reused;
      if (g_verify && t.is_non_overlapping_and_dense() && XXH3_64bits(t.const_data_ptr(), nbytes) != h) ++g_stats.stale;
      goto write;
    }
  }
  if (g_nobytes) {
    h = 0;
  } else if (n == 0) {
    h = XXH3_64bits(nullptr, 0);
  } else if (t.is_non_overlapping_and_dense()) {
    const auto& st = t.storage();
    if (st.data() == nullptr ||
        st.nbytes() < static_cast<size_t>(t.storage_offset()) * t.element_size() + nbytes) {
      ++g_stats.skipped;  // a freed or resized storage (optrace: ev metadata)
      return;
    }
    h = XXH3_64bits(t.const_data_ptr(), nbytes);
  } else {
    at::RecordFunctionGuard off(false);
    at::Tensor c = t.contiguous();
    h = XXH3_64bits(c.const_data_ptr(), nbytes);
    ++g_stats.copies;
  }
  if (!g_nobytes) g_stats.bytes += static_cast<int64_t>(nbytes);
  if (cacheable && g_out_side) {
    g_cached.insert_or_assign(
        impl, Cached{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(t.getIntrusivePtr()),
                     impl->version_counter().current_version(), t.const_data_ptr(), n, h});
  }
  if (g_rules && !g_out_side) {
    g_call_inputs.emplace_back(impl, h);
    if (!g_first.valid && g_call_inputs.size() == 1 && n > 0 && t.is_non_overlapping_and_dense()) {
      g_first = First{true, t.const_data_ptr(), nbytes, h};  // read from its own memory, in memory order
    }
  }
  }
write:
  const uint8_t dt = static_cast<uint8_t>(t.scalar_type());
  put(&h, 8);
  put(&n, 8);
  put(&dt, 1);
  if (g_full) {  // the shape, and whether the bytes were in row-major order (optrace: "ol" absent)
    const uint8_t nd = static_cast<uint8_t>(t.dim());
    const uint8_t rm = t.is_contiguous() ? 1 : 0;
    put(&nd, 1);
    put(&rm, 1);
    put(t.sizes().data(), sizeof(int64_t) * nd);
  }
  ++count;
  ++g_stats.tensors;
}

void visit(const c10::IValue& v, uint16_t& count) {
  if (v.isTensor()) {
    digest(v.toTensor(), count);
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) digest(t, count);
  } else if (v.isList()) {  // an int list (sizes, dims) too: element by element, each with its tag
    for (const c10::IValue& e : v.toListRef()) visit(e, count);
  } else if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) visit(e, count);
  } else if (g_full) {  // a non-tensor argument: a tag and its value into the call's argument bytes
    auto bytes = [](const void* p, size_t n) {
      g_args.insert(g_args.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    };
    if (v.isInt()) {
      const int64_t x = v.toInt();
      g_args.push_back(1);
      bytes(&x, 8);
    } else if (v.isDouble()) {
      const double x = v.toDouble();
      g_args.push_back(2);
      bytes(&x, 8);
    } else if (v.isBool()) {
      g_args.push_back(v.toBool() ? 3 : 4);
    } else if (v.isString()) {
      g_args.push_back(6);
      const auto& str = v.toStringRef();
      bytes(str.data(), str.size());
    } else if (v.isNone()) {
      g_args.push_back(7);
    } else {
      g_args.push_back(8);  // another kind (a device, a generator, a scalar type ...): its kind only
    }
  }
}

// The issuer: the first Python frame outside torch, the standard library and the probes, as the
// code object's address (optrace records the file's hash or the package's version; a real tracer
// would map this once per code object). 0: no Python frame (a thread with no Python on it).
uint64_t issuer() {
  pybind11::gil_scoped_acquire gil;
  PyFrameObject* f = PyEval_GetFrame();  // borrowed
  Py_XINCREF(f);
  uint64_t found = 0;
  while (f != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(f);
    auto it = g_code_skip.find(code);
    bool skip;
    if (it != g_code_skip.end()) {
      skip = it->second;
    } else {
      const char* file = PyUnicode_AsUTF8(code->co_filename);
      skip = file == nullptr || file[0] == '<';
      for (size_t i = 0; !skip && i < g_skip.size(); ++i) skip = std::strncmp(file, g_skip[i].data(), g_skip[i].size()) == 0;
      Py_INCREF(code);
      g_code_skip.emplace(code, skip);
    }
    if (!skip) {
      found = reinterpret_cast<uint64_t>(code);
      ++g_stats.issuers;
      Py_DECREF(code);
      Py_DECREF(f);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(code);
    Py_DECREF(f);
    f = back;
  }
  return found;
}

// A record: u32 name id, u16 tensors (patched when the side ends), then per tensor u64 digest,
// i64 numel, u8 dtype. Inputs are one record at start, outputs one at end (both in mode 2).
// Modes 8 and 9 add, on the input side, autograd's sequence number, the issuer and the digest of
// the non-tensor arguments after the tensors.
// Mode 12: skip has a bit set for each argument not read (out buffers, an overwritten self).
void side(uint32_t id, const c10::IValue* begin, const c10::IValue* end, const at::RecordFunction* in = nullptr,
          uint64_t skip = 0) {
  put(&id, 4);
  const size_t at_count = g_buf.size();
  uint16_t count = 0;
  put(&count, 2);
  g_args.clear();
  for (const c10::IValue* v = begin; v != end; ++v) {
    const auto i = static_cast<size_t>(v - begin);
    if (i < 64 && (skip >> i) & 1) continue;
    visit(*v, count);
  }
  std::memcpy(g_buf.data() + at_count, &count, 2);
  if (g_full && in != nullptr) {
    const int64_t seq = in->seqNr();
    const uint64_t who = g_issuer ? issuer() : 0;
    const uint64_t args = XXH3_64bits(g_args.data(), g_args.size());
    put(&seq, 8);
    put(&who, 8);
    put(&args, 8);
  }
  ++g_stats.records;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  ++g_stats.calls;
  ++t_depth;
  switch (g_mode) {
    case 2: {
      auto in = fn.inputs();
      side(name_id(fn.name()), in.data(), in.data() + in.size());
      break;
    }
    case 4: {
      std::string key = fn.name();
      const char* ov = fn.overload_name();
      key += '.';
      key += (ov != nullptr && *ov) ? ov : "default";
      ++g_seen[{key, t_depth - 1}];
      if (mode_sees(fn)) ++g_visible[key];
      break;
    }
    case 6:
    case 8:
    case 9:
    case 10:
    case 11: {
      if (mode_sees(fn)) {
        auto in = fn.inputs();
        side(name_id(fn.name()), in.data(), in.data() + in.size(), &fn);
      }
      break;
    }
    case 7:
      mode_sees(fn);
      break;
    case 12: {
      if (mode_sees(fn)) {
        const OpKind k = kind_of(fn);
        if (k.skip) {
          t_frames.back().second = false;  // not recorded (optrace skips it)
          break;
        }
        g_call_inputs.clear();
        g_first = First{};
        auto in = fn.inputs();
        side(name_id(fn.name()), in.data(), in.data() + in.size(), &fn, k.out_args | (k.overwrites ? 1 : 0));
      }
      break;
    }
    default:
      break;
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  --t_depth;
  bool record = g_mode == 2 || g_mode == 3;
  if (g_mode >= 4 && g_mode != 5 && !t_frames.empty()) {
    record = g_mode != 4 && t_frames.back().second;
    t_frames.pop_back();
  }
  if (record) {
    const auto& out = fn.outputs();
    if (g_rules && g_first.valid && kind_of(fn).view) g_view_from = g_first;
    g_out_side = true;
    side(name_id(fn.name()), out.data(), out.data() + out.size());
    g_out_side = false;
    g_view_from = First{};
  }
}

}  // namespace

void start(int64_t mode) {
  TORCH_CHECK(g_handle == at::INVALID_CALLBACK_HANDLE, "a floor callback is already installed");
  TORCH_CHECK(mode >= 1 && mode <= 12, "mode 1-12");
  g_rules = mode == 12;
  g_cache = mode == 11;
  t_frames.clear();
  g_full = mode >= 8;  // 8-12
  g_nobytes = mode == 10;
  g_issuer = mode == 8;
  g_mode = static_cast<int>(mode);
  const bool boxed = mode != 5;
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                       .needsInputs(boxed && mode != 3 && mode != 7)
                                       .needsOutputs(boxed)
                                       .scopes({at::RecordScope::FUNCTION}));
}

void stop() {
  for (auto it = g_cached.begin(); it != g_cached.end();) {  // entries of freed tensors
    it = it->second.impl.expired() ? g_cached.erase(it) : std::next(it);
  }
  if (g_handle != at::INVALID_CALLBACK_HANDLE) at::removeCallback(g_handle);
  g_handle = at::INVALID_CALLBACK_HANDLE;
  g_mode = 0;
}

// The records since the last call, as bytes (the buffer is emptied, its capacity kept).
pybind11::bytes take() {
  pybind11::bytes out(reinterpret_cast<const char*>(g_buf.data()), g_buf.size());
  g_buf.clear();
  return out;
}

std::map<std::string, int64_t> stats() {
  return {{"calls", g_stats.calls},     {"tensors", g_stats.tensors}, {"bytes", g_stats.bytes},
          {"copies", g_stats.copies},   {"skipped", g_stats.skipped}, {"records", g_stats.records},
          {"issuers", g_stats.issuers}, {"reused", g_stats.reused}, {"stale", g_stats.stale}};
}

void reset() {
  g_stats = Stats{};
  g_seen.clear();
  g_visible.clear();
}

std::vector<std::tuple<std::string, int64_t, int64_t>> seen() {
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (const auto& [k, v] : g_seen) out.emplace_back(k.first, k.second, v);
  return out;
}

std::vector<std::string> names() { return g_names; }

// A semantic record from Python (optrace's optimizer.step: parameters and gradients before the step,
// parameters after it): every CPU tensor of the list digested, one record.
void semantic(const std::string& name, const std::vector<at::Tensor>& tensors) {
  static std::unordered_map<std::string, uint32_t> ids;
  auto it = ids.find(name);
  if (it == ids.end()) {
    it = ids.emplace(name, static_cast<uint32_t>(g_names.size())).first;
    g_names.push_back(name);
  }
  std::vector<c10::IValue> values(tensors.begin(), tensors.end());
  side(it->second, values.data(), values.data() + values.size());
}

// Modes 11 and 12: also digest the bytes of every cached input (11) or reused view output (12) and
// count those whose reused digest differs.
void verify(bool on) { g_verify = on; }

// The files of the code objects found as issuers (mode 8), to check the walk.
std::vector<std::string> issuer_files() {
  pybind11::gil_scoped_acquire gil;
  std::vector<std::string> out;
  for (const auto& [code, skip] : g_code_skip) {
    if (!skip) out.emplace_back(PyUnicode_AsUTF8(code->co_filename));
  }
  return out;
}

// Path prefixes whose frames are not an issuer (mode 8).
void set_skip(std::vector<std::string> prefixes) { g_skip = std::move(prefixes); }

// mode 4: the calls the rule above puts in the mode's op set, by name.overload
std::map<std::string, int64_t> visible() { return g_visible; }

// XXH3-64 of a buffer's bytes, to check the vendored header against the xxhash package optrace uses.
uint64_t xxh3(pybind11::buffer b) {
  pybind11::buffer_info info = b.request();
  return XXH3_64bits(info.ptr, static_cast<size_t>(info.size * info.itemsize));
}

// Which vector path the compiler flags gave XXH3 (0 scalar, 1 SSE2, 2 AVX2, 3 AVX-512).
int64_t xxh3_vector() { return XXH_VECTOR; }
