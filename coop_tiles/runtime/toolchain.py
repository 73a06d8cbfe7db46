"""The compilers: NVRTC (C++ shims to PTX or LTO-IR), Numba (body to LTO-IR), nvJitLink (to a cubin).

All three run without a GPU. Headers are found through cuda.pathfinder (the CCCL and CUDA
runtime headers shipped by the `nvidia-cuda-cccl` / `nvidia-cuda-runtime` wheels, or a
CUDA toolkit), never a hard-coded path.
"""

from __future__ import annotations

import functools
import re
from importlib import metadata

from ..errors import CompileError


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Include directories for CUB (CCCL) and the CUDA runtime headers."""
    import cuda.pathfinder as pathfinder

    dirs = []
    for lib in ("cccl", "cudart"):
        found = pathfinder.find_nvidia_header_directory(lib)
        if found is None:
            raise CompileError(
                f"could not find the {lib} headers; install the 'nvidia-cuda-cccl' and "
                "'nvidia-cuda-runtime' wheels (pip install coop-tiles brings them) or a CUDA toolkit"
            )
        dirs.append(str(found))
    return tuple(dirs)


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of everything that changes generated code; part of every cache key."""
    from cuda.bindings import nvjitlink, nvrtc

    out = {}
    for dist in ("coop-tiles", "numba-cuda", "numba", "cuda-bindings", "nvidia-cuda-cccl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "none"
    _, major, minor = nvrtc.nvrtcVersion()
    out["nvrtc"] = f"{major}.{minor}"
    out["nvjitlink"] = ".".join(map(str, nvjitlink.version()))
    out["headers"] = "|".join(include_dirs())
    return out


def _check(result, prog, what: str) -> None:
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _program_log(prog)
        raise CompileError(f"{what} failed ({result.name})", log=log)


def _program_log(prog) -> str:
    from cuda.bindings import nvrtc

    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode(errors="replace").rstrip("\x00")


_compiles = {"ptx": 0, "ltoir": 0}
PCH_HEAP_BYTES = 1 << 29


def nvrtc_compile(source: str, arch: str, output: str) -> bytes:
    """Compile the shim translation unit to "ptx" (compute_XX) or "ltoir" (sm_XX, -dlto).

    From the second compile of an output kind in a process on, NVRTC's automatic precompiled
    headers are on: creating the PCH costs about one extra compile, and every later compile
    then skips parsing CUB (about 0.6 s instead of 1.6 s). A single kernel does not pay for it.
    """
    from cuda.bindings import nvrtc

    number = arch.removeprefix("sm_")
    opts = ["-std=c++17", "-rdc=true", *(f"-I{d}" for d in include_dirs())]
    _compiles[output] += 1
    if _compiles[output] >= 2:
        if sum(_compiles.values()) >= 2:
            nvrtc.nvrtcSetPCHHeapSize(PCH_HEAP_BYTES)
        opts.append("-pch")
    opts += [f"-arch=compute_{number}"] if output == "ptx" else [f"-arch=sm_{number}", "-dlto"]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"coop_shims.cu", 0, [], [])
    _check(err, prog, "NVRTC program creation")
    try:
        encoded = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        _check(err, prog, "NVRTC compilation of the CUB shims")
        if output == "ptx":
            _, size = nvrtc.nvrtcGetPTXSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetPTX(prog, buf)
            return buf.rstrip(b"\x00")
        _, size = nvrtc.nvrtcGetLTOIRSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetLTOIR(prog, buf)
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_GLOBAL_U32 = re.compile(rb"\.global \.align \d+ \.u32 (coop_(?:bytes|align)_\d+)(?: = (\d+))?;")


def read_storage_sizes(ptx: bytes) -> dict[str, int]:
    """`coop_bytes_<cid>`/`coop_align_<cid>` constants from PTX (absent initialiser means 0)."""
    return {m.group(1).decode(): int(m.group(2) or 0) for m in _GLOBAL_U32.finditer(ptx)}


def numba_compile(source: str, function: str, abi_name: str, shims, param_types: tuple[str, ...], arch: str) -> bytes:
    """Compile generated Numba source (the body or a combine function) to LTO-IR (`abi="c"`,
    named `abi_name`), with `param_types` its parameters' Numba type names."""
    from numba import cuda, types
    from numba.core.extending import intrinsic

    def nb_type(name: str):
        if name.startswith("CPointer("):
            return types.CPointer(nb_type(name[len("CPointer(") : -1]))
        return getattr(types, name)

    namespace: dict = {
        "np": __import__("numpy"),
        "math": __import__("math"),
        "cuda": cuda,
        "ptr": _data_pointer(intrinsic, types),
        "shared_tile": _shared_tile(intrinsic, types),
    }
    for decl in shims:
        sig = nb_type(decl.restype)(*(nb_type(a) for a in decl.argtypes))
        namespace[decl.name] = cuda.declare_device(decl.name, sig, abi="c")
    exec(compile(source, f"<coop_tiles body {function}>", "exec"), namespace)
    sig = types.void(*(nb_type(t) for t in param_types))
    cc = tuple(int(c) for c in _cc(arch))
    try:
        result = cuda.compile(
            namespace[function], sig, device=True, abi="c", abi_info={"abi_name": abi_name}, output="ltoir", cc=cc
        )
    except Exception as e:  # Numba's typing/lowering errors: wrap with the generated source
        raise CompileError(
            f"Numba could not compile the generated program body: {type(e).__name__}",
            log=f"{e}\n--- generated source ---\n{source}",
        ) from e
    return result[0] if isinstance(result, tuple) else result


def _cc(arch: str) -> tuple[str, str]:
    number = arch.removeprefix("sm_").rstrip("a")
    return number[:-1], number[-1]


@functools.cache
def _data_pointer(intrinsic, types):
    @intrinsic
    def ptr(typingctx, arr):
        """The data pointer of a local array, to hand to a shim."""
        sig = types.CPointer(arr.dtype)(arr)

        def codegen(context, builder, signature, args):
            return context.make_array(arr)(context, builder, args[0]).data

        return sig, codegen

    return ptr


@functools.cache
def _shared_tile(intrinsic, types):
    from numba.cuda.np.arrayobj import populate_array

    @intrinsic
    def shared_tile(typingctx, smem, offset, count, dtype):
        """A thread's items of a tile kept in shared memory: `count` elements of `dtype` at byte
        `offset` of the shared buffer, as an array the body indexes like a local one."""
        item = dtype.dtype
        array = types.Array(item, 1, "C")

        def codegen(context, builder, signature, args):
            data = builder.bitcast(builder.gep(args[0], [args[1]]), context.get_value_type(types.CPointer(item)))
            view = context.make_array(array)(context, builder)
            size = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(item)))
            populate_array(view, data=data, shape=[args[2]], strides=[size], itemsize=size, meminfo=None)
            return view._getvalue()

        return array(smem, offset, count, dtype), codegen

    return shared_tile


def link(ltoirs: list[tuple[str, bytes]], arch: str, output: str = "cubin") -> bytes:
    """Link LTO-IR modules with nvJitLink into a cubin (or, with output="ptx", the linked PTX)."""
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", "-lto", "-O3"] + (["-ptx"] if output == "ptx" else [])
    handle = nvjitlink.create(len(opts), opts)
    try:
        try:
            for name, blob in ltoirs:
                nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, blob, len(blob), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            raise CompileError(f"nvJitLink failed: {e}", log=log.decode(errors="replace")) from None
        if output == "ptx":
            size = nvjitlink.get_linked_ptx_size(handle)
            buf = bytearray(size)
            nvjitlink.get_linked_ptx(handle, buf)
        else:
            size = nvjitlink.get_linked_cubin_size(handle)
            buf = bytearray(size)
            nvjitlink.get_linked_cubin(handle, buf)
        return bytes(buf).rstrip(b"\x00") if output == "ptx" else bytes(buf)
    finally:
        nvjitlink.destroy(handle)
