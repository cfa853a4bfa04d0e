// vidax's CPU matmul through oneDNN, an XLA FFI custom call ("vidax_onednn_matmul").
//
// y (R..., N) float32 = x (R..., K) @ w (K, N): x and w both bfloat16 or both float32, row-major;
// the leading dims of x are folded into one row count. Products are summed in float32 and the
// result is written in float32 (vidax rounds it to the compute dtype after, as XLA's dot with
// preferred_element_type=float32). Built and loaded by vidax/cpu/onednn.py.
//
// The oneDNN v3 C API (dnnl.h) is declared below, only the part used here, so that the build
// needs libdnnl.so.3 and no headers (the "onednn-cpu-gomp" wheel ships the library alone). The C
// API is stable across oneDNN 3.x; these declarations follow dnnl.h / dnnl_common_types.h.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

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

// Row-major 2-D memory descriptor (rows, cols); null on failure.
dnnl_memory_desc_t Desc2d(int64_t rows, int64_t cols, int dtype) {
  dnnl_dims_t dims = {rows, cols};
  dnnl_dims_t strides = {cols, 1};
  dnnl_memory_desc_t md = nullptr;
  if (dnnl_memory_desc_create_with_strides(&md, 2, dims, dtype, strides) != kSuccess) return nullptr;
  return md;
}

struct Matmul {
  dnnl_primitive_t primitive = nullptr;
  const_dnnl_memory_desc_t src = nullptr, weights = nullptr, dst = nullptr;
};

// One engine for the process; primitives by (dtype, M, K, N), created once and kept (oneDNN
// primitives are immutable and may be executed from several threads at once).
struct State {
  std::mutex mu;
  dnnl_engine_t engine = nullptr;
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, Matmul> cache;
};

State& GetState() {
  static State* state = new State();
  return *state;
}

// The primitive for this problem, created on first use; an error message otherwise.
std::string GetMatmul(int dtype, int64_t m, int64_t k, int64_t n, Matmul* out, dnnl_engine_t* engine) {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.engine == nullptr && dnnl_engine_create(&s.engine, kCpu, 0) != kSuccess) {
    s.engine = nullptr;
    return "oneDNN: cannot create the CPU engine";
  }
  *engine = s.engine;
  auto key = std::make_tuple(dtype, m, k, n);
  auto it = s.cache.find(key);
  if (it != s.cache.end()) {
    *out = it->second;
    return "";
  }
  dnnl_memory_desc_t src = Desc2d(m, k, dtype), weights = Desc2d(k, n, dtype), dst = Desc2d(m, n, kF32);
  dnnl_primitive_desc_t pd = nullptr;
  Matmul mm;
  std::string err;
  if (src == nullptr || weights == nullptr || dst == nullptr) {
    err = "oneDNN: cannot describe the operands";
  } else if (dnnl_matmul_primitive_desc_create(&pd, s.engine, src, weights, nullptr, dst, nullptr) != kSuccess) {
    err = "oneDNN: no matmul implementation for these operands";
  } else if (dnnl_primitive_create(&mm.primitive, pd) != kSuccess) {
    err = "oneDNN: cannot create the matmul primitive";
  }
  if (pd != nullptr) dnnl_primitive_desc_destroy(pd);
  if (!err.empty()) {
    for (auto md : {src, weights, dst})
      if (md != nullptr) dnnl_memory_desc_destroy(md);
    return err;
  }
  mm.src = src;
  mm.weights = weights;
  mm.dst = dst;
  s.cache[key] = mm;
  *out = mm;
  return "";
}

ffi::Error MatmulImpl(ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::Result<ffi::Buffer<ffi::F32>> y) {
  auto xd = x.dimensions();
  auto wd = w.dimensions();
  if (xd.size() < 1 || wd.size() != 2) return ffi::Error::InvalidArgument("vidax_onednn_matmul: x (..., K), w (K, N)");
  if (x.element_type() != w.element_type()) return ffi::Error::InvalidArgument("vidax_onednn_matmul: x and w differ in dtype");
  int dtype;
  if (x.element_type() == ffi::DataType::BF16) {
    dtype = kBf16;
  } else if (x.element_type() == ffi::DataType::F32) {
    dtype = kF32;
  } else {
    return ffi::Error::InvalidArgument("vidax_onednn_matmul: dtype must be bfloat16 or float32");
  }
  const int64_t k = wd[0], n = wd[1];
  if (xd[xd.size() - 1] != k) return ffi::Error::InvalidArgument("vidax_onednn_matmul: x's last dim != w's first");
  int64_t m = 1;
  for (size_t i = 0; i + 1 < xd.size(); ++i) m *= xd[i];
  float* out = y->typed_data();
  if (m == 0 || n == 0) return ffi::Error::Success();
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) out[i] = 0.0f;
    return ffi::Error::Success();
  }
  Matmul mm;
  dnnl_engine_t engine = nullptr;
  std::string err = GetMatmul(dtype, m, k, n, &mm, &engine);
  if (!err.empty()) return ffi::Error::Internal(err);
  // One in-order stream per calling thread (a stream is not shared between threads).
  thread_local dnnl_stream_t stream = nullptr;
  if (stream == nullptr && dnnl_stream_create(&stream, engine, kInOrder) != kSuccess) {
    stream = nullptr;
    return ffi::Error::Internal("oneDNN: cannot create a stream");
  }
  dnnl_memory_t mem[3] = {nullptr, nullptr, nullptr};
  const_dnnl_memory_desc_t mds[3] = {mm.src, mm.weights, mm.dst};
  void* handles[3] = {x.untyped_data(), w.untyped_data(), out};
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) ok = dnnl_memory_create(&mem[i], mds[i], engine, handles[i]) == kSuccess;
  if (ok) {
    dnnl_exec_arg_t args[3] = {{kArgSrc, mem[0]}, {kArgWeights, mem[1]}, {kArgDst, mem[2]}};
    ok = dnnl_primitive_execute(mm.primitive, stream, 3, args) == kSuccess && dnnl_stream_wait(stream) == kSuccess;
  }
  for (auto m_ : mem)
    if (m_ != nullptr) dnnl_memory_destroy(m_);
  if (!ok) return ffi::Error::Internal("oneDNN: the matmul failed");
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(VidaxOnednnMatmul, MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
