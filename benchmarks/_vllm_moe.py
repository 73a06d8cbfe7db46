"""vLLM's CUDA `moe_align_block_size` (csrc/moe/moe_align_sum_kernels.cu), as the baseline of the `moe` section.

vLLM's sources (vllm-project/vllm) are third-party code and are never committed: `prepare` takes from vLLM's
`csrc/moe/moe_align_sum_kernels.cu` only what the align op runs (`KERNELS`, its three kernel templates, and its host
function `moe_align_block_size`, which picks and launches them) and writes them into the git-ignored
`benchmarks/.vllm/` after a prelude written here, which stands in for the vLLM headers the file includes
(`cuda_compat.h`: WARP_SIZE; `dispatch_utils.h`: the integer dtype dispatch, here int32 and int64 only;
`core/math.hpp`, unused by these functions) and for `ATen/cuda/CUDAContext.h` (the current stream, without the
cuSPARSE headers that one needs), and before a pybind11 binding of the host function. So the file builds standalone,
against PyTorch's and CUB's headers only. `load` builds it with `torch.utils.cpp_extension` for sm_90 with vLLM's
nvcc flags (its CMake build's CUDA flags, `-O3`; C++17, or C++20 where PyTorch's headers need it) into
`benchmarks/.build/` (ninja rebuilds nothing when the source is unchanged).

    python benchmarks/_vllm_moe.py PATH    # PATH: a vLLM work tree, its git directory, or the .cu file itself

`align` calls it the way vLLM's Python wrapper (`fused_moe/moe_align_block_size.py`) does: the three outputs
allocated with `torch.empty` (sorted_token_ids `numel + experts * (block - 1)` long, or `numel * block` when
there are fewer routes than experts), then the op, which fills them (two launches for 256 experts).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from coop_tiles.examples.moe import padded_length  # (vLLM's bound, as its wrapper computes it)

BENCH_DIR = Path(__file__).resolve().parent
SOURCE_DIR = BENCH_DIR / ".vllm"  # git-ignored
SOURCE = SOURCE_DIR / "moe_align.cu"
BUILD_DIR = BENCH_DIR / ".build" / "vllm_moe_align"
VLLM_PATH = "csrc/moe/moe_align_sum_kernels.cu"
#: the kernel templates the host function launches
KERNELS = (
    "moe_align_block_size_kernel",
    "moe_align_block_size_small_batch_expert_kernel",
    "count_and_sort_expert_tokens_kernel",
)
#: the host function's signature this binding calls (vLLM's, with the optional expert map since 2025)
HOST = (
    "void moe_align_block_size(torch::Tensor topk_ids, int64_t num_experts, int64_t block_size, "
    "torch::Tensor sorted_token_ids, torch::Tensor experts_ids, torch::Tensor num_tokens_post_pad, "
    "std::optional<torch::Tensor> maybe_expert_map)"
)
NVCC_FLAGS = [  # vLLM's CUDA flags (its CMake build), at -O3; the C++ standard: `_cxx_standard`
    "-O3",
    "-DENABLE_FP8",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-gencode=arch=compute_90,code=sm_90",
]

PRELUDE = """\
// vLLM's moe_align_block_size: its kernels and host function, taken from {path} by benchmarks/_vllm_moe.py
// (third-party code, never committed); this prelude stands in for the vLLM headers they use.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cub/cub.cuh>

namespace at::cuda {{
using c10::cuda::getCurrentCUDAStream;  // (all the file takes from ATen/cuda/CUDAContext.h)
}}

#define WARP_SIZE 32
#define CEILDIV(x, y) (((x) + (y) - 1) / (y))
#define VLLM_DISPATCH_INTEGRAL_AND_UNSIGNED_TYPES(TYPE, NAME, ...) \\
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::ScalarType::Int, __VA_ARGS__) \\
                                 AT_DISPATCH_CASE(at::ScalarType::Long, __VA_ARGS__))

namespace vllm {{
namespace moe {{
"""

BINDING = """\
}}  // namespace moe
}}  // namespace vllm

{host}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  m.def("moe_align_block_size", &moe_align_block_size, "vLLM's moe_align_block_size");
}}
"""


def _read(checkout: Path) -> str:
    """The .cu file's text: PATH itself, PATH/csrc/..., or HEAD:csrc/... of the git directory PATH."""
    if checkout.is_file():
        return checkout.read_text()
    if (checkout / VLLM_PATH).is_file():
        return (checkout / VLLM_PATH).read_text()
    git = ["git", f"--git-dir={checkout}", "show", f"HEAD:{VLLM_PATH}"]
    return subprocess.run(git, capture_output=True, check=True, text=True).stdout


def _definition(text: str, head: str, name: str) -> str:
    """The definition that starts at the match of `head` (a regular expression), through its matching brace."""
    match = re.search(head, text)
    if match is None:
        raise ValueError(f"{name} is not in this {VLLM_PATH}: its layout changed, update benchmarks/_vllm_moe.py")
    depth, at = 0, text.index("{", match.end())
    for end in range(at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[match.start() : end + 1]
    raise ValueError(f"{name}: unbalanced braces in {VLLM_PATH}")


def extract(text: str) -> str:
    """The standalone source: the prelude, the kernels, the host function (its signature checked) and the binding."""
    kernels = [_definition(text, rf"template\s*<[^>]*>\s*__global__\s+void\s+{k}\s*\(", k) for k in KERNELS]
    host = _definition(text, r"\nvoid\s+moe_align_block_size\s*\(", "moe_align_block_size").strip()
    signature = " ".join(host[: host.index("{")].split()).replace("( ", "(").strip()
    if signature != HOST:
        raise ValueError(f"vLLM's host function changed: {signature} (expected {HOST}); update benchmarks/_vllm_moe.py")
    body = "\n\n".join(kernels)
    return PRELUDE.format(path=VLLM_PATH) + body + "\n\n" + BINDING.format(host=host)


def prepare(checkout: str | Path) -> Path:
    """Write benchmarks/.vllm/moe_align.cu from a vLLM checkout (a work tree, its git directory, or the file)."""
    SOURCE_DIR.mkdir(parents=True, exist_ok=True)
    SOURCE.write_text(extract(_read(Path(checkout))))
    return SOURCE


def load(verbose: bool = False) -> Any:
    """The built extension (its `moe_align_block_size`), building it first when its source changed."""
    if not SOURCE.is_file():
        raise RuntimeError(f"{SOURCE} is missing: run `python benchmarks/_vllm_moe.py PATH-TO-VLLM` first")
    try:  # the ninja wheel's binary, when ninja is not on PATH (the GPU machines)
        import ninja

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    except ImportError:
        pass
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"  # sm_90 only: the flags say so too
    from torch.utils import cpp_extension

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    std = f"-std={_cxx_standard(cpp_extension.include_paths()[0])}"
    return cpp_extension.load(
        name="vllm_moe_align",
        sources=[str(SOURCE)],
        extra_cflags=["-O3", std],
        extra_cuda_cflags=[*NVCC_FLAGS, std],
        build_directory=str(BUILD_DIR),
        verbose=verbose,
    )


def _cxx_standard(torch_include: str) -> str:
    """vLLM's C++17, or C++20 where this PyTorch's headers require it (ATen.h stops a C++17 build)."""
    aten = Path(torch_include) / "ATen" / "ATen.h"
    return "c++20" if aten.is_file() and "C++20 or later" in aten.read_text() else "c++17"


def align(ext: Any, topk_ids: Any, block_size: int, num_experts: int) -> tuple[Any, Any, Any]:
    """`(sorted_token_ids, expert_ids, num_tokens_post_padded)` from vLLM's kernels, allocated as vLLM's wrapper
    allocates them (torch.empty)."""
    import torch

    length = padded_length(topk_ids.numel(), block_size, num_experts)
    sorted_ids = torch.empty(length, dtype=torch.int32, device=topk_ids.device)
    expert_ids = torch.empty(-(-length // block_size), dtype=torch.int32, device=topk_ids.device)
    post_padded = torch.empty(1, dtype=torch.int32, device=topk_ids.device)
    ext.moe_align_block_size(topk_ids, num_experts, block_size, sorted_ids, expert_ids, post_padded, None)
    return sorted_ids, expert_ids, post_padded


if __name__ == "__main__":
    print(f"wrote {prepare(sys.argv[1])}")
