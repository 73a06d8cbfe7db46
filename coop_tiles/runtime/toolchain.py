"""The compilers: NVRTC (C++ shims to PTX or LTO-IR), Numba (body to LTO-IR), nvJitLink (to a cubin).

All three run without a GPU. Headers are found through cuda.pathfinder (the CCCL and CUDA
runtime headers shipped by the `nvidia-cuda-cccl` / `nvidia-cuda-runtime` wheels, or a
CUDA toolkit), never a hard-coded path.
"""

from __future__ import annotations

import functools
import re
import struct
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
EIATTR_FRAME_SIZE = 0x11
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


def numba_compile(
    source: str, function: str, abi_name: str, shims, param_types: tuple[str, ...], arch: str, fastmath: bool = False
) -> bytes:
    """Compile generated Numba source (the body or a combine function) to LTO-IR (`abi="c"`,
    named `abi_name`), with `param_types` its parameters' Numba type names; `fastmath` is Numba's
    (flush-to-zero, approximate division and math functions, no NaN or infinity assumed)."""
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
    }
    for decl in shims:
        sig = nb_type(decl.restype)(*(nb_type(a) for a in decl.argtypes))
        namespace[decl.name] = cuda.declare_device(decl.name, sig, abi="c")
    exec(compile(source, f"<coop_tiles body {function}>", "exec"), namespace)
    sig = types.void(*(nb_type(t) for t in param_types))
    cc = tuple(int(c) for c in _cc(arch))
    try:
        result = cuda.compile(
            namespace[function],
            sig,
            device=True,
            abi="c",
            abi_info={"abi_name": abi_name},
            output="ltoir",
            cc=cc,
            fastmath=fastmath,
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


def frame_bytes(cubin: bytes, function: str) -> int:
    """The per-thread stack frame of `function` in a cubin (local arrays and register spills): its
    EIATTR_FRAME_SIZE attribute in the ELF's .nv.info section."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]

    def name(table: int, at: int) -> str:
        start = sections[table][4] + at
        return cubin[start : cubin.index(b"\0", start)].decode()

    symbols = next(s for s in sections if s[1] == 2)  # SHT_SYMTAB
    index = next(
        i
        for i in range(symbols[5] // symbols[9])
        if name(symbols[6], struct.unpack_from("<I", cubin, symbols[4] + i * symbols[9])[0]) == function
    )
    info = next(s for s in sections if name(shstrndx, s[0]) == ".nv.info")
    at, end = info[4], info[4] + info[5]
    while at < end:  # entries: format, attribute, size, value
        form, attribute, size = cubin[at], cubin[at + 1], struct.unpack_from("<H", cubin, at + 2)[0]
        if form == 0x04 and attribute == EIATTR_FRAME_SIZE:
            owner, frame = struct.unpack_from("<II", cubin, at + 4)
            if owner == index:
                return frame
        at += 4 + (size if form == 0x04 else 0)
    return 0


def link(ltoirs: list[tuple[str, bytes]], arch: str, output: str = "cubin", max_registers: int | None = None) -> bytes:
    """Link LTO-IR modules with nvJitLink into a cubin (or, with output="ptx", the linked PTX), with at
    most `max_registers` registers per thread when given."""
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", "-lto", "-O3"] + (["-ptx"] if output == "ptx" else [])
    opts += [f"-maxrregcount={max_registers}"] if max_registers else []
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
