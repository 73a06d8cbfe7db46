"""The compilers: NVRTC (C++ shims to LTO-IR), Numba (body to LTO-IR), nvJitLink (to a cubin).

All three run without a GPU. NVRTC and nvJitLink are driven through cuda.core (`Program`,
`Linker`); `cuda.bindings` is asked only for the library versions when the NVIDIA wheels are not
installed. Headers are found through cuda.pathfinder (the CCCL and CUDA
runtime headers shipped by the `nvidia-cuda-cccl` / `nvidia-cuda-runtime` wheels, or a CUDA
toolkit), never a hard-coded path.
"""

from __future__ import annotations

import functools
import re
import struct
import sys
import threading
from importlib import metadata

from ..errors import CompileError
from .arch import arch_number

#: Macros for every NVRTC run. CCCL unrolls its type-list metafunctions 16 deep under NVRTC and
#: 10 deep under nvcc; at 16, expanding `cuda/std/__type_traits/type_list.h` alone takes NVRTC
#: about 1.2 s, half of a cold compile, and at nvcc's 10 about 0.05 s.
DEFINES = (("_CCCL_META_UNROLL_LIMIT", "10"),)
#: The C++ dialect of the shims: CCCL parses about 0.15 s faster in C++20 (real concepts) than in
#: C++17, where it emulates them.
CXX_STD = "c++20"


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


def _dist_version(*dists: str) -> str | None:
    """The version of the first of `dists` that is installed."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of everything that changes generated code; part of every cache key.

    cuda.pathfinder finds the NVIDIA wheels' libraries and headers first, so when the wheels are
    installed their versions name NVRTC, nvJitLink and the headers, and a warm start from the
    cache neither loads those libraries nor imports cuda.pathfinder (about 50 ms); without the
    wheels (a CUDA toolkit) the libraries are asked and the header directories named."""
    out = {}
    for dist in ("coop-tiles", "numba-cuda", "numba", "cuda-bindings", "cuda-core"):
        out[dist] = _dist_version(dist) or "none"
    nvrtc = _dist_version("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12")
    nvjitlink = _dist_version("nvidia-nvjitlink", "nvidia-nvjitlink-cu12")
    cccl = _dist_version("nvidia-cuda-cccl", "nvidia-cuda-cccl-cu12")
    runtime = _dist_version("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12")
    if nvrtc is None:
        from cuda.bindings import nvrtc as library

        _, major, minor = library.nvrtcVersion()
        nvrtc = f"{major}.{minor}"
    if nvjitlink is None:
        from cuda.bindings import nvjitlink as library

        nvjitlink = ".".join(map(str, library.version()))
    out["nvrtc"], out["nvjitlink"] = nvrtc, nvjitlink
    out["headers"] = f"cccl {cccl}, runtime {runtime}" if cccl and runtime else "|".join(include_dirs())
    return out


class _NvrtcRuns:
    """How many NVRTC compiles this process has started, for the precompiled-header policy."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def next_uses_pch(self) -> bool:
        """Whether the next compile should use NVRTC's automatic precompiled headers: from the
        second compile in a process on. Creating the PCH costs about half a compile more and
        later compiles of the same headers then take about a quarter of the time, so a process
        that compiles one kernel does not pay for it. (NVRTC's PCH only works in the process
        that made it: it records the address of that process's PCH heap. Every CUB block header
        together needs 135 MB of that heap, within NVRTC's default 256 MiB; were it too small,
        NVRTC would compile without a PCH.)"""
        with self.lock:
            self.count += 1
            return self.count >= 2


_runs = _NvrtcRuns()


_import_lock = threading.Lock()
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F


def import_cuda_core() -> None:
    """Import cuda.core (NVRTC and nvJitLink) under a lock; Numba imports it too, so the Numba
    paths call this first. cuda.core's first import is not safe from two threads at once (one of
    them can see the package without `Program`)."""
    with _import_lock:
        import cuda.core  # noqa: F401


#: the name NVRTC gives the shims' translation unit in its diagnostics (`coop_shims.cu(57): error: ...`)
SHIM_FILE = "coop_shims.cu"
_SHIM_LINE = re.compile(rf"{re.escape(SHIM_FILE)}\((\d+)\)|line (\d+) of {re.escape(SHIM_FILE)}")


def shim_lines(log: str) -> list[int]:
    """The lines of the shims' source an NVRTC log points at, in its order (an error inside a CUB
    header points at the shim line that instantiated it: `detected during ... at line 57 of ...`)."""
    return [int(a or b) for a, b in _SHIM_LINE.findall(log)]


def nvrtc_compile(source: str, arch: str, name_expressions: tuple[str, ...] = ()) -> tuple[bytes, dict[str, str]]:
    """Compile the shim translation unit to LTO-IR for `arch` ("sm_90"); also returns NVRTC's
    lowered (mangled) name of each of `name_expressions`."""
    from cuda.core import Program, ProgramOptions

    options = ProgramOptions(
        name=SHIM_FILE,
        arch=arch,
        std=CXX_STD,
        relocatable_device_code=True,
        link_time_optimization=True,
        include_path=list(include_dirs()),
        define_macro=list(DEFINES),
        pch=_runs.next_uses_pch() or None,
    )
    program = Program(source, "c++", options)
    try:
        code = program.compile("ltoir", name_expressions=name_expressions)
    except Exception as e:  # cuda.core's NVRTCError: "<code>: <name>, compilation log:\n\n<log>"
        head, _, log = str(e).partition("compilation log:")
        raise CompileError(
            f"NVRTC compilation of the CUB shims failed ({head.strip().rstrip(',')})", log=log.strip().rstrip("\x00")
        ) from None
    finally:
        program.close()
    lowered = {name: symbol.decode() for name, symbol in code.symbol_mapping.items()}
    return bytes(code.code), lowered


_numba_ready = threading.Event()
#: Python's recursion limit while Numba compiles a body: its SSA reconstruction (numba-cuda's core/ssa.py) recurses
#: about twice per basic block between a variable's definition and its use, and long bodies (the selective scan's
#: backward with several channels per program) go deeper than Python's default of 1000
NUMBA_RECURSION_LIMIT = 20000
#: Numba is used by one thread at a time (its typing registries are shared; it holds the GIL anyway).
_numba_lock = threading.Lock()


def numba_ready() -> bool:
    """Whether Numba's one-time setup (`prepare_numba`) is done in this process."""
    return _numba_ready.is_set()


def prepare_numba(arch: str) -> None:
    """Numba's one-time setup: importing it, its typing registries (which import SciPy when
    installed) and NVVM, about a second in all; done by compiling an empty device function, in a
    thread beside NVRTC (which releases the GIL) on a cold compile."""
    import_cuda_core()
    with _numba_lock:
        if _numba_ready.is_set():
            return
        from numba import cuda, types

        def empty():
            pass

        options = {"device": True, "abi": "c", "abi_info": {"abi_name": "coop_setup"}, "output": "ltoir"}
        cuda.compile(empty, types.void(), cc=tuple(int(c) for c in _cc(arch)), **options)
        _numba_ready.set()


def numba_compile(
    source: str, function: str, abi_name: str, shims, param_types: tuple[str, ...], arch: str, fastmath: bool = False
) -> bytes:
    """Compile generated Numba source (the body or a combine function) to LTO-IR (`abi="c"`,
    named `abi_name`), with `param_types` its parameters' Numba type names; `fastmath` is Numba's
    (flush-to-zero, approximate division and math functions, no NaN or infinity assumed)."""
    import_cuda_core()
    with _numba_lock:
        return _numba_compile(source, function, abi_name, shims, param_types, arch, fastmath)


def _numba_compile(
    source: str, function: str, abi_name: str, shims, param_types: tuple[str, ...], arch: str, fastmath: bool
) -> bytes:
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
        "select": _select(intrinsic, types),
        "int_floordiv": _int_division(intrinsic, types, remainder=False),
        "int_mod": _int_division(intrinsic, types, remainder=True),
    }
    for decl in shims:
        sig = nb_type(decl.restype)(*(nb_type(a) for a in decl.argtypes))
        namespace[decl.name] = cuda.declare_device(decl.name, sig, abi="c")
    exec(compile(source, f"<coop_tiles body {function}>", "exec"), namespace)
    sig = types.void(*(nb_type(t) for t in param_types))
    cc = tuple(int(c) for c in _cc(arch))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, NUMBA_RECURSION_LIMIT))
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
    finally:
        sys.setrecursionlimit(limit)
    _numba_ready.set()
    return result[0] if isinstance(result, tuple) else result


def _cc(arch: str) -> tuple[str, str]:
    number = str(arch_number(arch))
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
def _select(intrinsic, types):
    @intrinsic
    def select(typingctx, cond, a, b):
        """`a` if `cond` else `b`, both already evaluated: one select instruction where a conditional
        expression is a branch (Numba's compile time grows with the square of a body's basic blocks)."""
        result = types.unliteral(typingctx.unify_types(a, b))

        def codegen(context, builder, signature, args):
            c = context.cast(builder, args[0], signature.args[0], types.boolean)
            x, y = (context.cast(builder, v, t, result) for v, t in zip(args[1:], signature.args[1:]))
            return builder.select(c, x, y)

        return result(cond, a, b), codegen

    return select


@functools.cache
def _int_division(intrinsic, types, remainder: bool):
    """Python's `//` (or `%`, `remainder`) of two integers as Numba computes it on the GPU (0 for a zero divisor,
    and for the most negative value over -1), but as one unsigned division of magnitudes by a divisor LLVM knows is
    not 0, and no branch: Numba divides in a branch taken when the divisor is not 0, which loop-invariant code
    motion does not lift out of a loop (a 64-bit division is a subroutine of dozens of instructions); a division
    that cannot trap can be lifted, even past calls."""

    @intrinsic
    def int_division(typingctx, a, b):
        result = types.unliteral(typingctx.unify_types(a, b))

        def codegen(context, builder, signature, args):
            x, y = (context.cast(builder, v, t, result) for v, t in zip(args, signature.args))
            zero, one = x.type(0), x.type(1)
            if not result.signed:
                d = builder.select(builder.icmp_unsigned("==", y, zero), one, y)  # (the select's test on y itself)
                q, r = builder.udiv(x, d), builder.urem(x, d)
                return builder.select(builder.icmp_unsigned("==", y, zero), zero, r if remainder else q)
            negative_x, negative_y = builder.icmp_signed("<", x, zero), builder.icmp_signed("<", y, zero)
            ax = builder.select(negative_x, builder.neg(x), x)  # magnitudes, unsigned (the most negative's fits)
            ay = builder.select(negative_y, builder.neg(y), y)
            d = builder.select(builder.icmp_unsigned("==", ay, zero), one, ay)
            uq, ur = builder.udiv(ax, d), builder.urem(ax, d)
            # floor: where the signs differ, -(|x| // |y|), one less when the division is not exact
            inexact = builder.zext(builder.icmp_unsigned("!=", ur, zero), x.type)
            q = builder.select(builder.xor(negative_x, negative_y), builder.neg(builder.add(uq, inexact)), uq)
            minimum = x.type(result.minval)
            overflow = builder.and_(builder.icmp_signed("==", x, minimum), builder.icmp_signed("==", y, x.type(-1)))
            invalid = builder.or_(builder.icmp_unsigned("==", y, zero), overflow)
            value = builder.sub(x, builder.mul(q, y)) if remainder else q
            return builder.select(invalid, zero, value)

        return result(a, b), codegen

    return int_division


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


def frame_bytes(cubin: bytes, function: str) -> int:
    """The per-thread stack frame of `function` in a cubin (local arrays and register spills)."""
    return _function_attribute(cubin, function, EIATTR_FRAME_SIZE)


def register_count(cubin: bytes, function: str) -> int:
    """The registers per thread of `function` in a cubin."""
    return _function_attribute(cubin, function, EIATTR_REGCOUNT)


def _function_attribute(cubin: bytes, function: str, attribute: int) -> int:
    """A per-function attribute (EIATTR_*) of `function` from the cubin ELF's .nv.info section (0 if absent)."""
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
        form, found, size = cubin[at], cubin[at + 1], struct.unpack_from("<H", cubin, at + 2)[0]
        if form == 0x04 and found == attribute:
            owner, value = struct.unpack_from("<II", cubin, at + 4)
            if owner == index:
                return value
        at += 4 + (size if form == 0x04 else 0)
    return 0


def link(ltoirs: list[tuple[str, bytes]], arch: str, output: str = "cubin", info: list[str] | None = None) -> bytes:
    """Link LTO-IR modules with nvJitLink into a cubin (or, with output="ptx", the linked PTX).
    Variables no device code uses (NVRTC's size probes) are dropped. With `info`, ptxas runs verbose and the lines of
    its report (registers, stack, "Potential Performance Loss" notes) are appended to `info`."""
    from cuda.core import Linker, LinkerOptions, ObjectCode

    options = LinkerOptions(
        arch=arch,
        link_time_optimization=True,
        optimization_level=3,
        optimize_unused_variables=True,
        ptx=output == "ptx",
        verbose=info is not None,
    )
    linker = Linker(*(ObjectCode.from_ltoir(blob, name=name) for name, blob in ltoirs), options=options)
    try:
        code = linker.link(output)
        if info is not None:
            info.extend(line for line in linker.get_info_log().rstrip("\x00").splitlines() if line.strip())
    except Exception as e:  # nvJitLinkError: the error log is also on the linker
        raise CompileError(f"nvJitLink failed: {str(e).splitlines()[0]}", log=_linker_log(linker)) from None
    finally:
        linker.close()
    return bytes(code.code).rstrip(b"\x00") if output == "ptx" else bytes(code.code)


def _linker_log(linker) -> str:
    try:
        return linker.get_error_log().rstrip("\x00")
    except Exception:
        return ""
