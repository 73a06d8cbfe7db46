"""Mamba's own CUDA kernels for the selective scan, forward and backward, as baselines for benchmarks/run.py.

Mamba's sources (state-spaces/mamba, `csrc/selective_scan`) are third-party code and are never
committed: `prepare` copies the kernels' headers from a Mamba checkout into the git-ignored
`benchmarks/.mamba/`, beside files written here (instantiations per input dtype and a binding that
exposes `fwd` and `bwd`, real weights only); `load` builds them with `torch.utils.cpp_extension` for
sm_90, into `benchmarks/.build/` (ninja rebuilds nothing when the sources are unchanged).

The forward is `selective_scan_fwd_launch<128, 16, input_t, float>` (float32, bfloat16, float16): the
kernel Mamba's dispatcher (`selective_scan_fwd_cuda`) runs for sequences longer than 1024. The
backward is the kernel Mamba's `selective_scan_bwd_cuda` runs at those lengths (128 threads x 16
items), for float32 and bfloat16 inputs and only the variant the benchmarks use (variable B and C,
z, softplus; D and delta_bias are run-time pointers), with and without a length that is a multiple
of the chunk. Everything with Mamba's nvcc flags (`--use_fast_math` included); only these are
built, to keep the build short.

    python benchmarks/_mamba_cuda.py PATH    # PATH: a Mamba work tree, or its git directory

(That command also copies Mamba's Triton `selective_state_update` for benchmarks/_mamba_triton.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
SOURCE_DIR = BENCH_DIR / ".mamba"  # git-ignored
BUILD_DIR = BENCH_DIR / ".build" / "mamba_selective_scan"
KERNEL_FILES = (
    "selective_scan_fwd_kernel.cuh",
    "selective_scan_bwd_kernel.cuh",
    "reverse_scan.cuh",
    "uninitialized_copy.cuh",
    "selective_scan_common.h",
    "selective_scan.h",
    "static_switch.h",
)
DTYPES = {"fp32": "float", "bf16": "at::BFloat16", "fp16": "at::Half"}  # the forward's
BWD_DTYPES = ("fp32", "bf16")  # the backward's
MIN_SEQLEN = 1025  # the lengths the built kernel serves (Mamba's dispatcher: 128 threads x 16 items)
NVCC_FLAGS = [  # as Mamba's setup.py builds csrc/selective_scan
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
    "-gencode=arch=compute_90,code=sm_90",
]

INSTANCE = """\
// The forward launch of Mamba's selective scan for one input dtype (written by benchmarks/_mamba_cuda.py).
#include "selective_scan_fwd_kernel.cuh"

template void selective_scan_fwd_launch<128, 16, {input_t}, float>(SSMParamsBase &params, cudaStream_t stream);
"""

BWD_INSTANCE = """\
// Mamba's selective scan backward for {input_t} inputs, the one variant the benchmarks run: variable B and C,
// softplus and z, 128 threads x 16 items (written by benchmarks/_mamba_cuda.py). The launch is the one
// selective_scan_bwd_launch makes for these traits; only the length switch is kept.
#include "selective_scan_bwd_kernel.cuh"

template <bool kIsEvenLen>
static void launch_bwd(SSMParamsBwd &params, cudaStream_t stream) {{
  using Ktraits = Selective_Scan_bwd_kernel_traits<128, 16, kIsEvenLen, true, true, true, true, {input_t}, float>;
  constexpr int kSmemSize = Ktraits::kSmemSize + MAX_DSTATE * sizeof(typename Ktraits::scan_t)
                            + (Ktraits::kNThreads + 4 * MAX_DSTATE) * sizeof(typename Ktraits::weight_t);
  auto kernel = &selective_scan_bwd_kernel<Ktraits>;
  if (kSmemSize >= 48 * 1024) {{
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemSize));
  }}
  kernel<<<dim3(params.batch, params.dim), Ktraits::kNThreads, kSmemSize, stream>>>(params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}}

void mamba_bwd_{tag}(SSMParamsBwd &params, cudaStream_t stream) {{
  if (params.seqlen % 2048 == 0) {{
    launch_bwd<true>(params, stream);
  }} else {{
    launch_bwd<false>(params, stream);
  }}
}}
"""

BINDING = """\
// Mamba's selective scan, forward and backward, real weights only (written by benchmarks/_mamba_cuda.py): the
// parameters as Mamba's own binding sets them; `fwd` returns out, the chunk states x and, with z, out_z; `bwd`
// returns du, ddelta, dA, dB, dC, dD, ddelta_bias and dz (dD, ddelta_bias: empty when D, delta_bias are None).
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "selective_scan.h"

template <int kNThreads, int kNItems, typename input_t, typename weight_t>
void selective_scan_fwd_launch(SSMParamsBase &params, cudaStream_t stream);
void mamba_bwd_fp32(SSMParamsBwd &params, cudaStream_t stream);
void mamba_bwd_bf16(SSMParamsBwd &params, cudaStream_t stream);

static void set_rows(const at::Tensor &t, SSMParamsBase::index_t &batch_stride, SSMParamsBase::index_t &d_stride) {
  TORCH_CHECK(t.is_cuda() && t.dim() == 3 && (t.stride(2) == 1 || t.size(2) == 1));
  batch_stride = t.stride(0);
  d_stride = t.stride(1);
}

static void set_weights(const at::Tensor &X, bool variable, SSMParamsBase::index_t &batch_stride,
                        SSMParamsBase::index_t &group_stride, SSMParamsBase::index_t &d_stride,
                        SSMParamsBase::index_t &dstate_stride) {
  if (variable) {  // (batch, groups, dstate, L)
    TORCH_CHECK(X.dim() == 4 && (X.stride(3) == 1 || X.size(3) == 1));
    batch_stride = X.stride(0);
    group_stride = X.stride(1);
    dstate_stride = X.stride(2);
  } else {  // (dim, dstate), float32
    TORCH_CHECK(X.dim() == 2 && X.scalar_type() == at::kFloat);
    d_stride = X.stride(0);
    dstate_stride = X.stride(1);
  }
}

// What the forward and the backward share: sizes, inputs, and the chunk states x (batch, dim, chunks, 2 dstate).
static void set_inputs(SSMParamsBase &p, const at::Tensor &u, const at::Tensor &delta, const at::Tensor &A,
                       const at::Tensor &B, const at::Tensor &C, const c10::optional<at::Tensor> &D,
                       const c10::optional<at::Tensor> &z, const c10::optional<at::Tensor> &delta_bias,
                       const at::Tensor &x, bool delta_softplus) {
  const int seqlen = u.size(2), dstate = A.size(1);
  TORCH_CHECK(seqlen >= MIN_SEQLEN, "built for sequences of at least MIN_SEQLEN");
  TORCH_CHECK(A.scalar_type() == at::kFloat && dstate <= 256 && delta.scalar_type() == u.scalar_type());
  const bool variable_B = B.dim() == 4, variable_C = C.dim() == 4;
  memset(&p, 0, sizeof(p));
  p.batch = u.size(0);
  p.dim = u.size(1);
  p.seqlen = seqlen;
  p.dstate = dstate;
  p.n_groups = variable_B ? B.size(1) : 1;
  p.n_chunks = (seqlen + 2047) / 2048;
  p.dim_ngroups_ratio = p.dim / p.n_groups;
  p.is_variable_B = variable_B;
  p.is_variable_C = variable_C;
  p.delta_softplus = delta_softplus;
  p.u_ptr = u.data_ptr();
  p.delta_ptr = delta.data_ptr();
  p.A_ptr = A.data_ptr();
  p.x_ptr = x.data_ptr();
  p.A_d_stride = A.stride(0);
  p.A_dstate_stride = A.stride(1);
  set_rows(u, p.u_batch_stride, p.u_d_stride);
  set_rows(delta, p.delta_batch_stride, p.delta_d_stride);
  p.B_ptr = B.data_ptr();
  p.C_ptr = C.data_ptr();
  set_weights(B, variable_B, p.B_batch_stride, p.B_group_stride, p.B_d_stride, p.B_dstate_stride);
  set_weights(C, variable_C, p.C_batch_stride, p.C_group_stride, p.C_d_stride, p.C_dstate_stride);
  p.D_ptr = D.has_value() ? D.value().data_ptr() : nullptr;
  p.delta_bias_ptr = delta_bias.has_value() ? delta_bias.value().data_ptr() : nullptr;
  if (z.has_value()) {
    p.z_ptr = z.value().data_ptr();
    set_rows(z.value(), p.z_batch_stride, p.z_d_stride);
  }
}

std::vector<at::Tensor> fwd(const at::Tensor &u, const at::Tensor &delta, const at::Tensor &A, const at::Tensor &B,
                            const at::Tensor &C, const c10::optional<at::Tensor> &D,
                            const c10::optional<at::Tensor> &z, const c10::optional<at::Tensor> &delta_bias,
                            bool delta_softplus) {
  const int n_chunks = (u.size(2) + 2047) / 2048;
  at::Tensor out = torch::empty_like(delta);
  at::Tensor x = torch::empty({u.size(0), u.size(1), n_chunks, A.size(1) * 2}, u.options().dtype(at::kFloat));
  at::Tensor out_z;
  SSMParamsBase p;
  set_inputs(p, u, delta, A, B, C, D, z, delta_bias, x, delta_softplus);
  p.out_ptr = out.data_ptr();
  set_rows(out, p.out_batch_stride, p.out_d_stride);
  if (z.has_value()) {
    out_z = torch::empty_like(z.value());
    p.out_z_ptr = out_z.data_ptr();
    set_rows(out_z, p.out_z_batch_stride, p.out_z_d_stride);
  }

  at::cuda::CUDAGuard guard{u.device()};
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  switch (u.scalar_type()) {
    case at::kFloat: selective_scan_fwd_launch<128, 16, float, float>(p, stream); break;
    case at::kBFloat16: selective_scan_fwd_launch<128, 16, at::BFloat16, float>(p, stream); break;
    case at::kHalf: selective_scan_fwd_launch<128, 16, at::Half, float>(p, stream); break;
    default: TORCH_CHECK(false, "input dtype must be float32, bfloat16 or float16");
  }
  std::vector<at::Tensor> result = {out, x};
  if (z.has_value()) result.push_back(out_z);
  return result;
}

// The gradients, allocated as Mamba's binding allocates them (the sums zeroed; variable dB, dC in float32, then
// converted to B's and C's dtype). `out` is the forward's output before the gate (its first result).
std::vector<at::Tensor> bwd(const at::Tensor &u, const at::Tensor &delta, const at::Tensor &A, const at::Tensor &B,
                            const at::Tensor &C, const c10::optional<at::Tensor> &D,
                            const c10::optional<at::Tensor> &z, const c10::optional<at::Tensor> &delta_bias,
                            const at::Tensor &dout, const at::Tensor &x, const at::Tensor &out,
                            bool delta_softplus) {
  TORCH_CHECK(B.dim() == 4 && C.dim() == 4 && z.has_value() && delta_softplus,
              "built for variable B and C, z and softplus only");
  TORCH_CHECK(x.is_contiguous() && x.size(2) == (u.size(2) + 2047) / 2048 && x.size(3) == 2 * A.size(1));
  at::Tensor du = torch::empty_like(u), ddelta = torch::empty_like(delta), dz = torch::empty_like(z.value());
  at::Tensor dA = torch::zeros_like(A);
  at::Tensor dB = torch::zeros_like(B, B.options().dtype(at::kFloat));
  at::Tensor dC = torch::zeros_like(C, C.options().dtype(at::kFloat));
  at::Tensor dD = D.has_value() ? torch::zeros_like(D.value()) : at::Tensor();
  at::Tensor ddelta_bias = delta_bias.has_value() ? torch::zeros_like(delta_bias.value()) : at::Tensor();
  SSMParamsBwd p;
  set_inputs(p, u, delta, A, B, C, D, z, delta_bias, x, delta_softplus);
  p.out_ptr = out.data_ptr();
  set_rows(out, p.out_batch_stride, p.out_d_stride);
  p.out_z_ptr = nullptr;  // out_z is not recomputed
  p.dout_ptr = dout.data_ptr();
  set_rows(dout, p.dout_batch_stride, p.dout_d_stride);
  p.du_ptr = du.data_ptr();
  set_rows(du, p.du_batch_stride, p.du_d_stride);
  p.ddelta_ptr = ddelta.data_ptr();
  set_rows(ddelta, p.ddelta_batch_stride, p.ddelta_d_stride);
  p.dz_ptr = dz.data_ptr();
  set_rows(dz, p.dz_batch_stride, p.dz_d_stride);
  p.dA_ptr = dA.data_ptr();
  p.dA_d_stride = dA.stride(0);
  p.dA_dstate_stride = dA.stride(1);
  p.dB_ptr = dB.data_ptr();
  p.dB_batch_stride = dB.stride(0);
  p.dB_group_stride = dB.stride(1);
  p.dB_dstate_stride = dB.stride(2);
  p.dC_ptr = dC.data_ptr();
  p.dC_batch_stride = dC.stride(0);
  p.dC_group_stride = dC.stride(1);
  p.dC_dstate_stride = dC.stride(2);
  p.dD_ptr = D.has_value() ? dD.data_ptr() : nullptr;
  p.ddelta_bias_ptr = delta_bias.has_value() ? ddelta_bias.data_ptr() : nullptr;

  at::cuda::CUDAGuard guard{u.device()};
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  switch (u.scalar_type()) {
    case at::kFloat: mamba_bwd_fp32(p, stream); break;
    case at::kBFloat16: mamba_bwd_bf16(p, stream); break;
    default: TORCH_CHECK(false, "the backward is built for float32 and bfloat16 inputs");
  }
  return {du, ddelta, dA, dB.to(B.dtype()), dC.to(C.dtype()), dD, ddelta_bias, dz};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fwd", &fwd, "Mamba's selective scan forward");
  m.def("bwd", &bwd, "Mamba's selective scan backward");
}
"""


def prepare(checkout: str | Path) -> Path:
    """Copy the kernels' headers from a Mamba checkout (a work tree, or a git directory: its
    HEAD) into benchmarks/.mamba/, and write the instantiations and the binding there."""
    checkout = Path(checkout)
    SOURCE_DIR.mkdir(parents=True, exist_ok=True)
    for name in KERNEL_FILES:
        path = f"csrc/selective_scan/{name}"
        if (checkout / path).is_file():
            shutil.copyfile(checkout / path, SOURCE_DIR / name)
        else:
            text = subprocess.run(
                ["git", f"--git-dir={checkout}", "show", f"HEAD:{path}"], capture_output=True, check=True
            ).stdout
            (SOURCE_DIR / name).write_bytes(text)
    for tag, input_t in DTYPES.items():
        (SOURCE_DIR / f"instance_{tag}.cu").write_text(INSTANCE.format(input_t=input_t))
    for tag in BWD_DTYPES:
        (SOURCE_DIR / f"bwd_instance_{tag}.cu").write_text(BWD_INSTANCE.format(input_t=DTYPES[tag], tag=tag))
    (SOURCE_DIR / "binding.cpp").write_text(BINDING.replace("MIN_SEQLEN", str(MIN_SEQLEN)))
    return SOURCE_DIR


def load(verbose: bool = False) -> Any:
    """The built extension (its `fwd` and `bwd`), building it first when its sources changed."""
    missing = [n for n in (*KERNEL_FILES, "binding.cpp") if not (SOURCE_DIR / n).is_file()]
    if missing:
        raise RuntimeError(
            f"Mamba's sources are missing from {SOURCE_DIR} ({', '.join(missing)}): "
            "run `python benchmarks/_mamba_cuda.py PATH-TO-MAMBA` first"
        )
    try:  # the ninja wheel's binary, when ninja is not on PATH (the GPU machines)
        import ninja

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    except ImportError:
        pass
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"  # sm_90 only: the flags below say so too
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    from torch.utils import cpp_extension

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    sources = [SOURCE_DIR / "binding.cpp", *(SOURCE_DIR / f"instance_{tag}.cu" for tag in DTYPES)]
    sources += [SOURCE_DIR / f"bwd_instance_{tag}.cu" for tag in BWD_DTYPES]
    return cpp_extension.load(
        name="mamba_selective_scan",
        sources=[str(s) for s in sources],
        extra_cflags=["-O3", "-std=c++17"],
        extra_cuda_cflags=NVCC_FLAGS,
        build_directory=str(BUILD_DIR),
        verbose=verbose,
    )


def selective_scan(ext: Any, u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """(out, last_state) from Mamba's kernel, on PyTorch tensors laid out as `coop_tiles.examples.selective_scan_fwd`
    takes them (variable B and C as (batch, groups, dstate, L)); with z, `out` is Mamba's gated `out_z`."""
    out, x, *rest = ext.fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
    return (rest[0] if z is not None else out), x[:, :, -1, 1::2]


if __name__ == "__main__":
    print(f"copied to {prepare(sys.argv[1])}")
    sys.path.insert(0, str(BENCH_DIR.parent))
    from benchmarks import _mamba_triton  # Mamba's Triton selective_state_update, from the same checkout

    print(f"copied to {_mamba_triton.prepare(sys.argv[1])}")
