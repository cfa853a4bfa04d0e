// vidax's CPU matmul through oneDNN, an XLA FFI custom call ("vidax_onednn_matmul").
//
// y (R..., N) = x (R..., K) @ w (K, N) [+ bias (N,)]: x and w both bfloat16 or both float32,
// row-major; the leading dims of x are folded into one row count. w is either the (K, N) weights
// or a stack (L, K, N) of them (of x's dtype, or uint16 holding bfloat16 bits) with `index`
// naming the layer, read in place (a layer scan then copies no layer's weights out of its stack);
// `index` is an int32 scalar, ignored for 2-D weights. `bias` is float32 (N,), or empty for none.
// Products are summed in float32, the bias added in float32 and the sum written in y's dtype
// (float32, or bfloat16 rounded once), as XLA's dot with preferred_element_type=float32 followed
// by the bias add and the cast. Built and loaded by vidax/cpu/onednn.py.
//
// The oneDNN v3 C API (dnnl.h) is declared below, only the part used here, so that the build
// needs libdnnl.so.3 and no headers (the "onednn-cpu-gomp" wheel ships the library alone). The C
// API is stable across oneDNN 3.x; these declarations follow dnnl.h / dnnl_common_types.h.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

extern "C" {
typedef struct dnnl_engine* dnnl_engine_t;
typedef struct dnnl_stream* dnnl_stream_t;
typedef struct dnnl_memory_desc* dnnl_memory_desc_t;
typedef const struct dnnl_memory_desc* const_dnnl_memory_desc_t;
typedef struct dnnl_memory* dnnl_memory_t;
typedef struct dnnl_primitive_desc* dnnl_primitive_desc_t;
typedef const struct dnnl_primitive_desc* const_dnnl_primitive_desc_t;
typedef struct dnnl_primitive* dnnl_primitive_t;
typedef const struct dnnl_primitive* const_dnnl_primitive_t;
typedef const struct dnnl_primitive_attr* const_dnnl_primitive_attr_t;
typedef int64_t dnnl_dims_t[12];  // DNNL_MAX_NDIMS
typedef struct {
  int arg;
  dnnl_memory_t memory;
} dnnl_exec_arg_t;

// dnnl_status_t, dnnl_engine_kind_t and dnnl_data_type_t are C enums: int in the ABI.
int dnnl_engine_create(dnnl_engine_t* engine, int kind, size_t index);
int dnnl_stream_create(dnnl_stream_t* stream, dnnl_engine_t engine, unsigned flags);
int dnnl_stream_wait(dnnl_stream_t stream);
int dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t* md, int ndims, const dnnl_dims_t dims,
                                         int data_type, const dnnl_dims_t strides);
int dnnl_memory_desc_destroy(dnnl_memory_desc_t md);
int dnnl_matmul_primitive_desc_create(dnnl_primitive_desc_t* pd, dnnl_engine_t engine,
                                      const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t weights,
                                      const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst,
                                      const_dnnl_primitive_attr_t attr);
int dnnl_primitive_desc_destroy(dnnl_primitive_desc_t pd);
int dnnl_primitive_create(dnnl_primitive_t* primitive, const_dnnl_primitive_desc_t pd);
int dnnl_memory_create(dnnl_memory_t* memory, const_dnnl_memory_desc_t md, dnnl_engine_t engine,
                       void* handle);
int dnnl_memory_destroy(dnnl_memory_t memory);
int dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                           const dnnl_exec_arg_t* args);
}

namespace {

namespace ffi = xla::ffi;

constexpr int kSuccess = 0;         // dnnl_success
constexpr int kCpu = 1;             // dnnl_cpu
constexpr unsigned kInOrder = 0x1;  // dnnl_stream_in_order
constexpr int kBf16 = 2;            // dnnl_bf16
constexpr int kF32 = 3;             // dnnl_f32
constexpr int kArgSrc = 1;          // DNNL_ARG_SRC
constexpr int kArgDst = 17;         // DNNL_ARG_DST
constexpr int kArgWeights = 33;     // DNNL_ARG_WEIGHTS
constexpr int kArgBias = 41;        // DNNL_ARG_BIAS

// 2-D memory descriptor (rows, cols), row-major or (`transposed`) column-major; null on failure.
dnnl_memory_desc_t Desc2d(int64_t rows, int64_t cols, int dtype, bool transposed = false) {
  dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {cols, 1};
  if (transposed) {
    strides[0] = 1;
    strides[1] = rows;
  }
  dnnl_memory_desc_t md = nullptr;
  if (dnnl_memory_desc_create_with_strides(&md, 2, dims, dtype, strides) != kSuccess) return nullptr;
  return md;
}

struct Matmul {
  dnnl_primitive_t primitive = nullptr;
  const_dnnl_memory_desc_t src = nullptr, weights = nullptr, bias = nullptr, dst = nullptr;
};

// A problem: {kind (0: 2-D, 1: batched), operand dtype, result dtype, then the kind's numbers:
// bias or not, weights column-major or not, M, K, N (2-D); B, H, M, K, N and the 4-D strides of
// a, b and y (batched)}.
using Key = std::vector<int64_t>;

// One engine for the process; primitives by Key, created once and kept (oneDNN primitives are
// immutable and may be executed from several threads at once).
struct State {
  std::mutex mu;
  dnnl_engine_t engine = nullptr;
  std::map<Key, Matmul> cache;
};

State& GetState() {
  static State* state = new State();
  return *state;
}

// 4-D memory descriptor with the given dims and strides (elements); null on failure.
dnnl_memory_desc_t Desc4d(const int64_t* dims4, const int64_t* strides4, int dtype) {
  dnnl_dims_t dims = {dims4[0], dims4[1], dims4[2], dims4[3]};
  dnnl_dims_t strides = {strides4[0], strides4[1], strides4[2], strides4[3]};
  dnnl_memory_desc_t md = nullptr;
  if (dnnl_memory_desc_create_with_strides(&md, 4, dims, dtype, strides) != kSuccess) return nullptr;
  return md;
}

// The operands' descriptors of a Key's problem (bias null when it has none).
void Describe(const Key& key, Matmul* mm) {
  const int dtype = static_cast<int>(key[1]), dst_dtype = static_cast<int>(key[2]);
  if (key[0] == 0) {
    const bool has_bias = key[3] != 0, transposed = key[4] != 0;
    const int64_t m = key[5], k = key[6], n = key[7];
    mm->src = Desc2d(m, k, dtype);
    mm->weights = Desc2d(k, n, dtype, transposed);
    mm->dst = Desc2d(m, n, dst_dtype);
    mm->bias = has_bias ? Desc2d(1, n, kF32) : nullptr;
    return;
  }
  const int64_t b = key[3], h = key[4], m = key[5], k = key[6], n = key[7];
  const int64_t a_dims[4] = {b, h, m, k}, b_dims[4] = {b, h, k, n}, y_dims[4] = {b, h, m, n};
  mm->src = Desc4d(a_dims, &key[8], dtype);
  mm->weights = Desc4d(b_dims, &key[12], dtype);
  mm->dst = Desc4d(y_dims, &key[16], dst_dtype);
}

// The primitive for this problem, created on first use; an error message otherwise.
std::string GetMatmul(const Key& key, Matmul* out, dnnl_engine_t* engine) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.engine == nullptr && dnnl_engine_create(&s.engine, kCpu, 0) != kSuccess) {
    s.engine = nullptr;
    return "oneDNN: cannot create the CPU engine";
  }
  *engine = s.engine;
  auto it = s.cache.find(key);
  if (it != s.cache.end()) {
    *out = it->second;
    return "";
  }
  Matmul mm;
  Describe(key, &mm);
  const bool has_bias = key[0] == 0 && key[3] != 0;
  dnnl_primitive_desc_t pd = nullptr;
  std::string err;
  if (mm.src == nullptr || mm.weights == nullptr || mm.dst == nullptr || (has_bias && mm.bias == nullptr)) {
    err = "oneDNN: cannot describe the operands";
  } else if (dnnl_matmul_primitive_desc_create(&pd, s.engine, mm.src, mm.weights, mm.bias, mm.dst, nullptr) !=
             kSuccess) {
    err = "oneDNN: no matmul implementation for these operands";
  } else if (dnnl_primitive_create(&mm.primitive, pd) != kSuccess) {
    err = "oneDNN: cannot create the matmul primitive";
  }
  if (pd != nullptr) dnnl_primitive_desc_destroy(pd);
  if (!err.empty()) {
    for (auto md : {mm.src, mm.weights, mm.bias, mm.dst})
      if (md != nullptr) dnnl_memory_desc_destroy(const_cast<dnnl_memory_desc_t>(md));
    return err;
  }
  s.cache[key] = mm;
  *out = mm;
  return "";
}

// Runs the problem `key` on the buffers {src, weights, dst, bias (or null)}.
ffi::Error Run(const Key& key, void* const handles[4]) {
  Matmul mm;
  dnnl_engine_t engine = nullptr;
  std::string err = GetMatmul(key, &mm, &engine);
  if (!err.empty()) return ffi::Error::Internal(err);
  // One in-order stream per calling thread (a stream is not shared between threads).
  thread_local dnnl_stream_t stream = nullptr;
  if (stream == nullptr && dnnl_stream_create(&stream, engine, kInOrder) != kSuccess) {
    stream = nullptr;
    return ffi::Error::Internal("oneDNN: cannot create a stream");
  }
  dnnl_memory_t mem[4] = {nullptr, nullptr, nullptr, nullptr};
  const_dnnl_memory_desc_t mds[4] = {mm.src, mm.weights, mm.dst, mm.bias};
  const int nargs = mm.bias != nullptr ? 4 : 3;
  bool ok = true;
  for (int i = 0; i < nargs && ok; ++i) ok = dnnl_memory_create(&mem[i], mds[i], engine, handles[i]) == kSuccess;
  if (ok) {
    dnnl_exec_arg_t args[4] = {{kArgSrc, mem[0]}, {kArgWeights, mem[1]}, {kArgDst, mem[2]}, {kArgBias, mem[3]}};
    ok = dnnl_primitive_execute(mm.primitive, stream, nargs, args) == kSuccess && dnnl_stream_wait(stream) == kSuccess;
  }
  for (auto m_ : mem)
    if (m_ != nullptr) dnnl_memory_destroy(m_);
  if (!ok) return ffi::Error::Internal("oneDNN: the matmul failed");
  return ffi::Error::Success();
}

// An XLA dtype as a oneDNN data type (kBf16 / kF32), or -1.
int OnednnType(ffi::DataType t) {
  if (t == ffi::DataType::BF16) return kBf16;
  if (t == ffi::DataType::F32) return kF32;
  return -1;
}

ffi::Error Fail(const char* what) {
  return ffi::Error::InvalidArgument(std::string("vidax_onednn_matmul: ") + what);
}

ffi::Error MatmulImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::Buffer<ffi::S32> index, ffi::AnyBuffer bias,
                      ffi::Result<ffi::AnyBuffer> y, bool transposed) {
  auto xd = x.dimensions();
  auto wd = w.dimensions();
  if (xd.size() < 1 || (wd.size() != 2 && wd.size() != 3)) return Fail("x (..., K), w (K, N) or (L, K, N)");
  const int dtype = OnednnType(x.element_type());
  const int dst_dtype = OnednnType(y->element_type());
  const bool bits = w.element_type() == ffi::DataType::U16 && dtype == kBf16;
  if (dtype < 0 || dst_dtype < 0) return Fail("x and y must be bfloat16 or float32");
  if (w.element_type() != x.element_type() && !bits) return Fail("w must have x's dtype (or be uint16 bits of bfloat16)");
  const size_t r = wd.size();
  const int64_t k = wd[r - 2], n = wd[r - 1];
  if (xd[xd.size() - 1] != k) return Fail("x's last dim != w's K");
  const bool has_bias = bias.element_count() != 0;
  if (has_bias && (bias.element_type() != ffi::DataType::F32 || bias.element_count() != static_cast<size_t>(n)))
    return Fail("bias must be float32 (N,) or empty");
  char* weights = static_cast<char*>(w.untyped_data());
  if (r == 3) {
    if (index.element_count() != 1) return Fail("index must be an int32 scalar");
    const int64_t i = index.typed_data()[0];
    if (i < 0 || i >= wd[0]) return Fail("index out of the stack");
    weights += i * k * n * (dtype == kBf16 ? 2 : 4);
  }
  int64_t m = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) m *= xd[i];
  if (m == 0 || n == 0) return ffi::Error::Success();
  if (k == 0) return Fail("K must be > 0");
  void* const handles[4] = {x.untyped_data(), weights, y->untyped_data(), bias.untyped_data()};
  return Run(Key{0, dtype, dst_dtype, has_bias, transposed, m, k, n}, handles);
}

// y = a @ b over two batch dims (B, H): a viewed as (B, H, M, K), b as (B, H, K, N) and y as
// (B, H, M, N) through the given strides (elements) into their buffers, which may hold them in
// any order (attention's (B, L, H, D) tensors are read and written without a transposition).
// a and b both bfloat16 or both float32; y float32 or bfloat16 (summed in float32, rounded once).
ffi::Error BatchedImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> y,
                       ffi::Span<const int64_t> dims, ffi::Span<const int64_t> a_strides,
                       ffi::Span<const int64_t> b_strides, ffi::Span<const int64_t> y_strides) {
  const int dtype = OnednnType(a.element_type());
  const int dst_dtype = OnednnType(y->element_type());
  if (dtype < 0 || dst_dtype < 0 || b.element_type() != a.element_type())
    return Fail("batched: a and b bfloat16 or float32 alike, y bfloat16 or float32");
  if (dims.size() != 5 || a_strides.size() != 4 || b_strides.size() != 4 || y_strides.size() != 4)
    return Fail("batched: dims (B, H, M, K, N) and three 4-D strides");
  Key key = {1, dtype, dst_dtype};
  for (auto span : {dims, a_strides, b_strides, y_strides}) key.insert(key.end(), span.begin(), span.end());
  int64_t count = 1;
  for (size_t i = 0; i < 5; ++i) count *= dims[i];
  if (count == 0) return ffi::Error::Success();
  void* const handles[4] = {a.untyped_data(), b.untyped_data(), y->untyped_data(), nullptr};
  return Run(key, handles);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(VidaxOnednnBatchedMatmul, BatchedImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("dims")
                                  .Attr<ffi::Span<const int64_t>>("a_strides")
                                  .Attr<ffi::Span<const int64_t>>("b_strides")
                                  .Attr<ffi::Span<const int64_t>>("y_strides"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(VidaxOnednnMatmul, MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<bool>("transposed"));
