// CUB baselines for benchmarks/run.py: a shared library of extern "C" entry points that the benchmark
// builds with nvcc at run time (into the git-ignored benchmarks/.build/) and loads with ctypes.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -o cub_baselines.so cub_baselines.cu
//
// Every entry point takes device pointers and a stream (0: the legacy default stream, which the benchmark's
// CuPy events time) and returns the cudaError_t of its work as an int (0 on success).

#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <cuda/std/type_traits>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace {

// ----- histograms: cub::DeviceHistogram::HistogramEven -----------------------------------------------------------

// `bins` bins of equal width over [lower, upper); samples outside it are not counted. With temp == nullptr only
// *temp_bytes is written (CUB's size query); otherwise the histogram (int counters) is computed into `hist`,
// which CUB initialises itself.
template <typename SampleT>
int histogram_even(void* temp, size_t* temp_bytes, const SampleT* samples, int* hist, long long n, int bins,
                   int lower, int upper, cudaStream_t stream) {
  return static_cast<int>(cub::DeviceHistogram::HistogramEven(temp, *temp_bytes, samples, hist, bins + 1, lower,
                                                              upper, static_cast<int64_t>(n), stream));
}

// ----- whole-array inclusive sums: cub::DeviceScan::InclusiveSum -------------------------------------------------

// With temp == nullptr only *temp_bytes is written (CUB's size query); otherwise out[i] = in[0] + ... + in[i] for
// the n (an int: CUB's 32-bit offsets, as a caller with n < 2^31 would get them) elements.
template <typename T>
int inclusive_sum(void* temp, size_t* temp_bytes, const T* in, T* out, int n, cudaStream_t stream) {
  return static_cast<int>(cub::DeviceScan::InclusiveSum(temp, *temp_bytes, in, out, n, stream));
}

// ----- whole-array compaction: cub::DeviceSelect::If and ::Flagged ------------------------------------------------

// The predicate of DeviceSelect::If: the nonzero elements.
struct NonZero {
  template <typename T>
  __device__ __forceinline__ bool operator()(const T& x) const {
    return x != T(0);
  }
};

// With temp == nullptr only *temp_bytes is written (CUB's size query); otherwise the n elements of `in` that are
// nonzero are written densely to `out`, in order, and their number to *count.
template <typename T>
int select_if(void* temp, size_t* temp_bytes, const T* in, T* out, int* count, int n, cudaStream_t stream) {
  return static_cast<int>(cub::DeviceSelect::If(temp, *temp_bytes, in, out, count, n, NonZero{}, stream));
}

// The same for the elements whose flag is true.
template <typename T>
int select_flagged(void* temp, size_t* temp_bytes, const T* in, const bool* flags, T* out, int* count, int n,
                   cudaStream_t stream) {
  return static_cast<int>(cub::DeviceSelect::Flagged(temp, *temp_bytes, in, flags, out, count, n, stream));
}

// ----- segmented sort: one thread block per segment of THREADS * ITEMS keys ---------------------------------------

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int kSegment = kThreads * kItems;  // 2048

// Load a segment (warp-transposed: coalesced reads, blocked arrangement), radix-sort it across the block into a
// striped arrangement, and store it with coalesced striped writes. kPairs: sort `vals_in` along as the payload.
template <bool kPairs>
__global__ void __launch_bounds__(kThreads)
    segment_sort_kernel(const int* keys_in, int* keys_out, const int* vals_in, int* vals_out) {
  using Load = cub::BlockLoad<int, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Value = ::cuda::std::conditional_t<kPairs, int, cub::NullType>;  // keys only: no payload storage
  using Sort = cub::BlockRadixSort<int, kThreads, kItems, Value>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Sort::TempStorage sort;
  } temp;

  const size_t base = static_cast<size_t>(blockIdx.x) * kSegment;
  int keys[kItems];
  Value vals[kItems];
  Load(temp.load).Load(keys_in + base, keys);
  if constexpr (kPairs) {
    __syncthreads();  // the load's shared memory is reused by the second load
    Load(temp.load).Load(vals_in + base, vals);
  }
  __syncthreads();  // and by the sort
  if constexpr (kPairs) {
    Sort(temp.sort).SortBlockedToStriped(keys, vals);
    cub::StoreDirectStriped<kThreads>(threadIdx.x, vals_out + base, vals);
  } else {
    Sort(temp.sort).SortBlockedToStriped(keys);
  }
  cub::StoreDirectStriped<kThreads>(threadIdx.x, keys_out + base, keys);
}

}  // namespace

extern "C" {

// Histogram of n uint8 samples.
int cub_histogram_even_u8(void* temp, size_t* temp_bytes, const uint8_t* samples, int* hist, long long n, int bins,
                          int lower, int upper, cudaStream_t stream) {
  return histogram_even(temp, temp_bytes, samples, hist, n, bins, lower, upper, stream);
}

// Histogram of n int32 samples.
int cub_histogram_even_i32(void* temp, size_t* temp_bytes, const int* samples, int* hist, long long n, int bins,
                           int lower, int upper, cudaStream_t stream) {
  return histogram_even(temp, temp_bytes, samples, hist, n, bins, lower, upper, stream);
}

// Inclusive sum of n int32 elements.
int cub_inclusive_sum_i32(void* temp, size_t* temp_bytes, const int* in, int* out, int n, cudaStream_t stream) {
  return inclusive_sum(temp, temp_bytes, in, out, n, stream);
}

// Inclusive sum of n float32 elements.
int cub_inclusive_sum_f32(void* temp, size_t* temp_bytes, const float* in, float* out, int n, cudaStream_t stream) {
  return inclusive_sum(temp, temp_bytes, in, out, n, stream);
}

// The nonzero elements of n int32 / float32 elements, densely (DeviceSelect::If).
int cub_select_if_i32(void* temp, size_t* temp_bytes, const int* in, int* out, int* count, int n,
                      cudaStream_t stream) {
  return select_if(temp, temp_bytes, in, out, count, n, stream);
}
int cub_select_if_f32(void* temp, size_t* temp_bytes, const float* in, float* out, int* count, int n,
                      cudaStream_t stream) {
  return select_if(temp, temp_bytes, in, out, count, n, stream);
}

// The flagged elements of n int32 / float32 elements, densely (DeviceSelect::Flagged).
int cub_select_flagged_i32(void* temp, size_t* temp_bytes, const int* in, const bool* flags, int* out, int* count,
                           int n, cudaStream_t stream) {
  return select_flagged(temp, temp_bytes, in, flags, out, count, n, stream);
}
int cub_select_flagged_f32(void* temp, size_t* temp_bytes, const float* in, const bool* flags, float* out,
                           int* count, int n, cudaStream_t stream) {
  return select_flagged(temp, temp_bytes, in, flags, out, count, n, stream);
}

// The name of a cudaError_t that an entry point returned.
const char* cub_error_name(int status) { return cudaGetErrorName(static_cast<cudaError_t>(status)); }

// The segment length the sort kernels are built for (2048).
int cub_segment_sort_length() { return kSegment; }

// Sort each of `segments` consecutive segments of 2048 int keys, keys only.
int cub_segment_sort_keys(const int* keys_in, int* keys_out, int segments, cudaStream_t stream) {
  segment_sort_kernel<false><<<segments, kThreads, 0, stream>>>(keys_in, keys_out, nullptr, nullptr);
  return static_cast<int>(cudaGetLastError());
}

// Sort each of `segments` consecutive segments of 2048 int keys, with an int payload.
int cub_segment_sort_pairs(const int* keys_in, int* keys_out, const int* vals_in, int* vals_out, int segments,
                           cudaStream_t stream) {
  segment_sort_kernel<true><<<segments, kThreads, 0, stream>>>(keys_in, keys_out, vals_in, vals_out);
  return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
