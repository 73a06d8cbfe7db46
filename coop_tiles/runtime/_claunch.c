/* The optional C launch path of coop_tiles (fastpath.py has the Python one it stands in for).
 *
 * KernelBase is the base class of JITFunction. `kernel[grid]` (mp_subscript) returns a
 * BoundLaunch, and calling that (vectorcall) handles the common call without running any
 * Python code of coop_tiles: CuPy 1-D contiguous arrays (when CuPy is loaded), PyTorch CUDA
 * tensors of any rank and strides (torch.Tensor and nn.Parameter, when PyTorch is loaded),
 * Python ints and floats positional, constexprs by keyword, an int grid or a tuple of 1 to 3
 * ints, a None or int stream. It reads each argument's signature tokens (an array's dtype
 * object, a scalar's type, then the constexpr values) and each tensor's form (rank and
 * last-axis stride kind); when they are those of this kernel's previous launch it reuses that
 * launch's prepared facts, else it builds the same key as the Python path (a tensor's is the
 * key the kernel's Classifier learnt for its kind) and looks the PreparedLaunch up in
 * `kernels`. It then writes the arguments into the prepared parameter buffer and calls
 * cuLaunchKernel (cuLaunchKernelEx allowing programmatic stream serialization, for kernels the
 * Python path launches so: PreparedLaunch.programmatic) on the current stream of PyTorch when a
 * tensor is among the arguments, else of CuPy, all while holding the GIL (so no other thread
 * touches the buffer). The launch runs on its arrays' device: the prepared launch belongs to one
 * device, whose primary context must be current (else the Python path makes it current for the
 * launch); with several GPUs in the process it reads each array's device and checks that a
 * stream handle belongs to that context. Anything else (a new signature, the first tensor of a kind, another array type, a
 * failed launch) goes to the Python method `run(grid, stream, args, kwargs)`, which compiles,
 * reports errors and launches. libcuda is opened on first use, so importing needs no driver.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define MAX_ARGS 64
/* the most shape-and-stride values of one launch's arrays the C path packs (more: the Python path) */
#define MAX_EXTENTS 512

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
/* cuda.h's CUlaunchAttribute (an id, padding, a 64-byte value) and CUlaunchConfig, for cuLaunchKernelEx */
typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int allowed;
    } value;
} launch_attribute;
typedef struct {
    unsigned grid[3], block[3], shared;
    void *stream;
    launch_attribute *attrs;
    unsigned count;
} launch_config;
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef int (*launch_ex_fn)(const launch_config *, void *, void **, void **);
typedef intptr_t (*stream_fn)(void);
typedef int (*context_fn)(void **);
typedef int (*device_fn)(int *);
typedef int (*stream_context_fn)(void *, void **);
/* cuLaunchKernel's `extra` markers, as cuda.h defines them */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
static launch_fn cu_launch = NULL;
static launch_ex_fn cu_launch_ex = NULL; /* NULL with a driver older than CUDA 12: plain launches */
static context_fn cu_ctx_get_current = NULL;
static device_fn cu_ctx_get_device = NULL;
static stream_context_fn cu_stream_get_ctx = NULL;
static PyObject *s_c_contiguous, *s_ndim, *s_dtype, *s_num, *s_data, *s_ptr, *s_size, *s_device_id, *s_c_info, *s_run,
    *s_split_launch, *s_is_cuda, *s_shape, *s_stride, *s_data_ptr, *s_get_device;

static int load_driver(void) {
    if (cu_launch) return 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return 0;
    cu_ctx_get_current = (context_fn)dlsym(lib, "cuCtxGetCurrent");
    cu_ctx_get_device = (device_fn)dlsym(lib, "cuCtxGetDevice");
    cu_stream_get_ctx = (stream_context_fn)dlsym(lib, "cuStreamGetCtx");
    if (!cu_ctx_get_current || !cu_ctx_get_device || !cu_stream_get_ctx) return 0;
    cu_launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
    cu_launch_ex = (launch_ex_fn)dlsym(lib, "cuLaunchKernelEx");
    return cu_launch != NULL;
}

/* A getset attribute's getter, taken once from the class so that reading it skips the lookup. */
typedef struct {
    getter get;
    void *closure;
} Getter;

static int find_getter(PyObject *type, PyObject *name, Getter *out) {
    PyObject *descr = PyObject_GetAttr(type, name);
    if (!descr) return -1;
    int ok = Py_IS_TYPE(descr, &PyGetSetDescr_Type) && ((PyGetSetDescrObject *)descr)->d_getset->get;
    if (ok) {
        out->get = ((PyGetSetDescrObject *)descr)->d_getset->get;
        out->closure = ((PyGetSetDescrObject *)descr)->d_getset->closure;
    }
    Py_DECREF(descr);
    if (!ok) PyErr_Format(PyExc_TypeError, "%R is not a C attribute", name);
    return ok ? 0 : -1;
}

/* `obj.<attr>` as an integer through its getter; 0 on success */
static int int_of(Getter g, PyObject *obj, long long *out) {
    PyObject *v = g.get(obj, g.closure);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* ----- KernelBase ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    /* set by _enable_c_launch; kernels is NULL until then */
    PyObject *kernels; /* dict: signature key -> PreparedLaunch */
    PyObject *names;   /* tuple of the constexpr parameter names, in order */
    PyObject *array_type;   /* cupy.ndarray, or NULL without CuPy */
    PyObject *pointer_type; /* the class of array.data */
    PyObject *get_stream;   /* cupy.cuda.get_current_stream, when stream_ptr is NULL */
    stream_fn stream_ptr;   /* CuPy's C function for the current stream's handle, or NULL */
    Getter contiguous, ndim, dtype, data, ptr, size, device_id;
    PyObject *tensor_types; /* tuple: torch.Tensor, torch.nn.Parameter; NULL without PyTorch */
    PyObject *torch_stream; /* torch._C._cuda_getCurrentRawStream */
    PyObject *learnt_keys;  /* the kernel's Classifier.learnt_keys: (torch dtype, rank, unit) -> key */
    int many_devices; /* read each array's device (several GPUs in the process), else all are on device 0 */
    /* the previous launch: its tokens (strong references), tensor forms and prepared facts */
    Py_ssize_t memo_count; /* -1: none */
    PyObject *memo_tokens[2 * MAX_ARGS];
    int memo_forms[MAX_ARGS];
    PyObject *memo_prepared; /* keeps the buffers below alive */
    void *function;
    unsigned block, shared;
    void *context;    /* the primary context of the memo's device, current at its launches */
    long memo_device; /* the device of the memo's arrays */
    unsigned char *slots;
    void **params;
    size_t buffer_size; /* the slots' size when they are the kernel's exact parameter layout, else 0 */
    int programmatic;   /* launched allowing programmatic stream serialization */
    char kinds[MAX_ARGS];
} KernelBase;

static void forget(KernelBase *self) {
    for (Py_ssize_t i = 0; i < self->memo_count; i++) Py_CLEAR(self->memo_tokens[i]);
    self->memo_count = -1;
    Py_CLEAR(self->memo_prepared);
}

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    KernelBase *self = (KernelBase *)type->tp_alloc(type, 0);
    if (self) self->memo_count = -1;
    return (PyObject *)self;
}

static int kernel_traverse(KernelBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->kernels);
    Py_VISIT(self->names);
    Py_VISIT(self->array_type);
    Py_VISIT(self->pointer_type);
    Py_VISIT(self->get_stream);
    Py_VISIT(self->tensor_types);
    Py_VISIT(self->torch_stream);
    Py_VISIT(self->learnt_keys);
    Py_VISIT(self->memo_prepared);
    for (Py_ssize_t i = 0; i < self->memo_count; i++) Py_VISIT(self->memo_tokens[i]);
    return 0;
}

static int kernel_clear(KernelBase *self) {
    forget(self);
    Py_CLEAR(self->kernels);
    Py_CLEAR(self->names);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->pointer_type);
    Py_CLEAR(self->get_stream);
    Py_CLEAR(self->tensor_types);
    Py_CLEAR(self->torch_stream);
    Py_CLEAR(self->learnt_keys);
    return 0;
}

static void kernel_dealloc(KernelBase *self) {
    PyObject_GC_UnTrack(self);
    kernel_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* _enable_c_launch(kernels, names, cupy, torch, many_devices): the C path launches from now on.
 * cupy is None or (cupy.ndarray, cupy.cuda.get_current_stream, capi), capi a capsule holding
 * `intptr_t (void)` that returns the current stream's handle, or None; torch is None or
 * ((torch.Tensor, torch.nn.Parameter), torch._C._cuda_getCurrentRawStream, the Classifier's
 * learnt keys). False when CuPy's array class has no C attributes to read (the C path stays off). */
static PyObject *kernel_enable(KernelBase *self, PyObject *const *a, Py_ssize_t nargs) {
    PyObject *cupy = nargs == 5 ? a[2] : NULL, *torch = nargs == 5 ? a[3] : NULL;
    if (nargs != 5 || !PyDict_Check(a[0]) || !PyTuple_Check(a[1]) ||
        (cupy != Py_None && !(PyTuple_CheckExact(cupy) && PyTuple_GET_SIZE(cupy) == 3 &&
                              PyType_Check(PyTuple_GET_ITEM(cupy, 0)))) ||
        (torch != Py_None &&
         !(PyTuple_CheckExact(torch) && PyTuple_GET_SIZE(torch) == 3 && PyTuple_Check(PyTuple_GET_ITEM(torch, 0)) &&
           PyDict_Check(PyTuple_GET_ITEM(torch, 2))))) {
        PyErr_SetString(PyExc_TypeError, "_enable_c_launch(kernels: dict, names: tuple, cupy: (array_type, "
                                         "get_stream, capi) | None, torch: (types, raw_stream, keys) | None, "
                                         "many_devices)");
        return NULL;
    }
    int many_devices = PyObject_IsTrue(a[4]);
    if (many_devices < 0) return NULL;
    if (PyTuple_GET_SIZE(a[1]) > MAX_ARGS) Py_RETURN_FALSE;
    Getter contiguous = {0}, ndim = {0}, dtype = {0}, data = {0}, size = {0};
    stream_fn stream_ptr = NULL;
    if (cupy != Py_None) {
        PyObject *array_type = PyTuple_GET_ITEM(cupy, 0), *capi = PyTuple_GET_ITEM(cupy, 2);
        if (find_getter(array_type, s_c_contiguous, &contiguous) || find_getter(array_type, s_ndim, &ndim) ||
            find_getter(array_type, s_dtype, &dtype) || find_getter(array_type, s_data, &data) ||
            find_getter(array_type, s_size, &size)) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        if (capi != Py_None) {
            const char *name = PyCapsule_GetName(capi);
            if (name && strcmp(name, "intptr_t (void)") == 0) stream_ptr = (stream_fn)PyCapsule_GetPointer(capi, name);
            PyErr_Clear();
        }
    }
    Py_INCREF(a[0]);
    Py_INCREF(a[1]);
    kernel_clear(self);
    self->kernels = a[0];
    self->names = a[1];
    if (cupy != Py_None) {
        self->array_type = Py_NewRef(PyTuple_GET_ITEM(cupy, 0));
        self->get_stream = Py_NewRef(PyTuple_GET_ITEM(cupy, 1));
    }
    if (torch != Py_None) {
        self->tensor_types = Py_NewRef(PyTuple_GET_ITEM(torch, 0));
        self->torch_stream = Py_NewRef(PyTuple_GET_ITEM(torch, 1));
        self->learnt_keys = Py_NewRef(PyTuple_GET_ITEM(torch, 2));
    }
    self->stream_ptr = stream_ptr;
    self->contiguous = contiguous;
    self->ndim = ndim;
    self->dtype = dtype;
    self->data = data;
    self->size = size;
    self->many_devices = many_devices;
    self->ptr.get = NULL; /* found on the first array's `.data`, whose class is then remembered */
    self->device_id.get = NULL;
    Py_RETURN_TRUE;
}

static PyObject *kernel_forget(KernelBase *self, PyObject *unused) {
    forget(self);
    Py_RETURN_NONE;
}

/* the memo's prepared facts, from PreparedLaunch.c_info; 0 on success */
static int remember(KernelBase *self, PyObject *prepared, PyObject *const *tokens, const int *forms, Py_ssize_t count,
                    Py_ssize_t n, long device) {
    PyObject *info = PyObject_GetAttr(prepared, s_c_info);
    if (!info) return -1;
    int bad = !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 10;
    void *function = NULL, *slots = NULL, *params = NULL, *context = NULL;
    unsigned long block = 0, shared = 0;
    size_t buffer_size = 0;
    int programmatic = 0;
    PyObject *kinds = NULL;
    if (!bad) {
        function = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 0));
        block = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 1));
        shared = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 2));
        slots = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 3));
        params = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 4));
        kinds = PyTuple_GET_ITEM(info, 5);
        buffer_size = PyLong_AsSize_t(PyTuple_GET_ITEM(info, 6));
        context = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 7));
        programmatic = PyObject_IsTrue(PyTuple_GET_ITEM(info, 9));
        bad = PyErr_Occurred() || !PyBytes_CheckExact(kinds) || PyBytes_GET_SIZE(kinds) != n;
    }
    if (bad) {
        Py_DECREF(info);
        return -1;
    }
    forget(self);
    memcpy(self->kinds, PyBytes_AS_STRING(kinds), (size_t)n);
    memcpy(self->memo_forms, forms, (size_t)n * sizeof(int));
    Py_DECREF(info);
    self->function = function;
    self->block = (unsigned)block;
    self->shared = (unsigned)shared;
    self->slots = (unsigned char *)slots;
    self->params = (void **)params;
    self->buffer_size = buffer_size;
    self->programmatic = programmatic == 1;
    self->context = context;
    self->memo_device = device;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_INCREF(tokens[i]);
        self->memo_tokens[i] = tokens[i];
    }
    self->memo_count = count;
    Py_INCREF(prepared);
    self->memo_prepared = prepared;
    return 0;
}

/* The grid as three dimensions: an int, or a tuple of 1 to 3 ints (not bools), each from 1 to
 * 2^31 - 1 (a zero dimension, which launches nothing, and every other grid: the Python path).
 * 1: read; 0: not. */
static int read_grid(PyObject *grid, unsigned dims[3]) {
    PyObject *const *items = &grid;
    Py_ssize_t count = 1;
    if (PyTuple_CheckExact(grid)) {
        items = PySequence_Fast_ITEMS(grid);
        count = PyTuple_GET_SIZE(grid);
    }
    if (count < 1 || count > 3) return 0;
    dims[1] = dims[2] = 1;
    for (Py_ssize_t k = 0; k < count; k++) {
        int overflow;
        if (!PyLong_CheckExact(items[k])) return 0;
        long long g = PyLong_AsLongLongAndOverflow(items[k], &overflow);
        if (overflow || g <= 0 || g > 0x7fffffffLL) return 0;
        dims[k] = (unsigned)g;
    }
    return 1;
}

/* A PyTorch tensor read as classify.py's Classifier._torch_tensor reads it: its dtype, its form
 * (2 * rank + 1 when its last-axis stride is a unit one, as the Python path decides it, else
 * 2 * rank), its device (0 with one GPU), its data pointer and its extents (arguments.launch_extents:
 * the shape, then the strides but a unit last one; a 1-D unit-stride tensor's is its length).
 * Returns how many extents it wrote to `extents`, or 0 (an error perhaps set) when the Python path
 * must classify it: not a CUDA tensor, 0-d, more than `room` extents. */
static int read_tensor(KernelBase *self, PyObject *v, PyObject **dtype, int *form, long *device,
                       unsigned long long *ptr, long long *extents, Py_ssize_t room) {
    PyObject *flag = PyObject_GetAttr(v, s_is_cuda);
    if (!flag) return 0;
    Py_DECREF(flag); /* a bool singleton */
    if (flag != Py_True) return 0;
    *dtype = PyObject_GetAttr(v, s_dtype);
    if (!*dtype) return 0;
    Py_DECREF(*dtype); /* torch's dtypes live as long as the torch module */
    int count = 0;
    PyObject *shape = PyObject_GetAttr(v, s_shape), *strides = NULL, *p = NULL, *d = NULL;
    if (!shape || !PyTuple_Check(shape)) goto done;
    Py_ssize_t rank = PyTuple_GET_SIZE(shape);
    if (rank == 0 || 2 * rank > room) goto done;
    for (Py_ssize_t k = 0; k < rank; k++) {
        extents[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k));
        if (extents[k] == -1 && PyErr_Occurred()) goto done;
    }
    int unit = 1;
    if (rank > 1 || extents[0] > 1) { /* (a tensor of one element or none has a unit stride) */
        strides = PyObject_CallMethodNoArgs(v, s_stride);
        if (!strides || !PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != rank) goto done;
        for (Py_ssize_t k = 0; k < rank; k++) {
            extents[rank + k] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, k));
            if (extents[rank + k] == -1 && PyErr_Occurred()) goto done;
        }
        unit = extents[rank - 1] <= 1 || extents[2 * rank - 1] == 1;
    }
    p = PyObject_CallMethodNoArgs(v, s_data_ptr);
    if (!p) goto done;
    *ptr = PyLong_AsUnsignedLongLong(p);
    if (PyErr_Occurred()) goto done;
    *device = 0;
    if (self->many_devices) {
        d = PyObject_CallMethodNoArgs(v, s_get_device);
        if (!d) goto done;
        *device = PyLong_AsLong(d);
        if (*device < 0) goto done;
    }
    *form = (int)(2 * rank + unit);
    count = (int)(2 * rank - unit);
done:
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(p);
    Py_XDECREF(d);
    return count;
}

/* Whether `t` is one of the PyTorch tensor classes the C path reads (not their other subclasses,
 * whose attributes may run Python code: the Python path reads those). */
static int is_tensor_type(KernelBase *self, PyTypeObject *t) {
    if (!self->tensor_types) return 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(self->tensor_types); k++)
        if ((PyObject *)t == PyTuple_GET_ITEM(self->tensor_types, k)) return 1;
    return 0;
}

/* `result` (a new reference, or NULL on error), a stream handle from CuPy or PyTorch, as an integer;
 * -1 with an error set when there is none. */
static long long handle_of(PyObject *result) {
    if (!result) return -1;
    long long handle = PyLong_AsLongLong(result);
    Py_DECREF(result);
    return (handle == -1 && PyErr_Occurred()) ? -1 : handle;
}

/* Launch the common call. 1: launched; 0: not handled (no error set), the Python path runs. */
static int try_launch(KernelBase *self, PyObject *grid, PyObject *stream, PyObject *const *args, Py_ssize_t n,
                      PyObject *kwnames) {
    unsigned dims[3];
    if (!self->kernels || n > MAX_ARGS || !read_grid(grid, dims) || !load_driver()) return 0;
    Py_ssize_t nc = PyTuple_GET_SIZE(self->names);
    if ((kwnames ? PyTuple_GET_SIZE(kwnames) : 0) != nc) return 0;
    int overflow;

    /* each argument's values: an array's pointer and extents (first, then extent_count[i] values
     * from extents[extent_start[i]]), an int's value (first), a float's (reals) */
    unsigned long long first[MAX_ARGS];
    double reals[MAX_ARGS];
    long long extents[MAX_EXTENTS];
    Py_ssize_t extent_start[MAX_ARGS], used = 0;
    int extent_count[MAX_ARGS];
    PyObject *tokens[2 * MAX_ARGS]; /* borrowed: dtype objects, types, constexpr values */
    int forms[MAX_ARGS];            /* a tensor's form (read_tensor), 0 for other arguments */
    int uses_cupy = 0, uses_torch = 0;
    long device = -1; /* the arrays' device */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = args[i];
        PyTypeObject *t = Py_TYPE(v);
        long where = 0;
        forms[i] = 0;
        if ((PyObject *)t == self->array_type) {
            PyObject *flag = self->contiguous.get(v, self->contiguous.closure);
            if (!flag) goto decline;
            Py_DECREF(flag); /* a bool singleton */
            if (flag != Py_True) return 0;
            long long rank;
            if (int_of(self->ndim, v, &rank)) goto decline;
            if (rank != 1) return 0; /* N-D CuPy arrays: the Python path */
            PyObject *dtype = self->dtype.get(v, self->dtype.closure);
            if (!dtype) goto decline;
            Py_DECREF(dtype); /* still referenced by the array */
            tokens[i] = dtype;
            PyObject *data = self->data.get(v, self->data.closure);
            if (!data) goto decline;
            long long ptr, size, on = 0;
            if (!self->ptr.get) {
                if (find_getter((PyObject *)Py_TYPE(data), s_ptr, &self->ptr)) {
                    self->ptr.get = NULL;
                    Py_DECREF(data);
                    goto decline;
                }
                self->pointer_type = (PyObject *)Py_TYPE(data);
                Py_INCREF(self->pointer_type);
            }
            if (self->many_devices && !self->device_id.get &&
                find_getter(self->pointer_type, s_device_id, &self->device_id)) {
                self->device_id.get = NULL;
                Py_DECREF(data);
                goto decline;
            }
            int bad = (PyObject *)Py_TYPE(data) != self->pointer_type || int_of(self->ptr, data, &ptr) ||
                      (self->many_devices && int_of(self->device_id, data, &on));
            Py_DECREF(data);
            if (bad || int_of(self->size, v, &size) || used == MAX_EXTENTS) goto decline;
            where = (long)on;
            first[i] = (unsigned long long)ptr;
            extent_start[i] = used;
            extent_count[i] = 1;
            extents[used++] = size;
            uses_cupy = 1;
        } else if (is_tensor_type(self, t)) {
            int count = read_tensor(self, v, &tokens[i], &forms[i], &where, &first[i], extents + used,
                                    MAX_EXTENTS - used);
            if (!count) goto decline;
            extent_start[i] = used;
            extent_count[i] = count;
            used += count;
            uses_torch = 1;
        } else if (t == &PyLong_Type) {
            long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (value == -1 && PyErr_Occurred())) goto decline;
            first[i] = (unsigned long long)value;
            tokens[i] = (PyObject *)&PyLong_Type;
            extent_count[i] = 0;
            continue;
        } else if (t == &PyFloat_Type) {
            reals[i] = PyFloat_AS_DOUBLE(v);
            tokens[i] = (PyObject *)&PyFloat_Type;
            extent_count[i] = 0;
            continue;
        } else {
            return 0;
        }
        if (device < 0)
            device = where;
        else if (device != where)
            return 0; /* arrays on two devices: the Python path reports it */
    }
    /* constexprs: each name once, by keyword (interned names compare by identity) */
    for (Py_ssize_t j = 0; j < nc; j++) {
        PyObject *name = PyTuple_GET_ITEM(self->names, j);
        Py_ssize_t found = -1;
        for (Py_ssize_t m = 0; m < nc && found < 0; m++)
            if (PyTuple_GET_ITEM(kwnames, m) == name) found = m;
        for (Py_ssize_t m = 0; m < nc && found < 0; m++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, m), name) == 0) found = m;
        if (found < 0) goto decline;
        tokens[n + j] = args[n + found];
    }
    Py_ssize_t count = n + nc;
    /* the launch runs in its device's primary context, which must be current (else the Python
     * path makes it current); without arrays, on the current context's device */
    void *current = NULL;
    if (cu_ctx_get_current(&current) != 0 || !current) return 0;
    if (device < 0) {
        int ordinal;
        if (cu_ctx_get_device(&ordinal) != 0) return 0;
        device = ordinal;
    }
    /* the stream, before the memo is read or written: every call into the array libraries comes before it */
    long long handle = 0;
    if (stream == Py_None) { /* the current stream of PyTorch when a tensor is among the arguments, else CuPy's */
        if (uses_torch) {
            PyObject *ordinal = PyLong_FromLong(device);
            if (!ordinal) goto decline;
            handle = handle_of(PyObject_CallOneArg(self->torch_stream, ordinal));
            Py_DECREF(ordinal);
        } else if (uses_cupy && self->stream_ptr) {
            handle = (long long)self->stream_ptr();
        } else if (uses_cupy) {
            PyObject *s = PyObject_CallNoArgs(self->get_stream);
            handle = s ? handle_of(PyObject_GetAttr(s, s_ptr)) : -1;
            Py_XDECREF(s);
        }
        if (PyErr_Occurred()) goto decline;
    } else if (PyLong_CheckExact(stream)) {
        handle = PyLong_AsLongLongAndOverflow(stream, &overflow);
        if (overflow) return 0;
        if (self->many_devices && (handle < 0 || handle > 2)) { /* not a default stream: it must be this device's */
            void *stream_context = NULL;
            if (cu_stream_get_ctx((void *)(intptr_t)handle, &stream_context) != 0 || stream_context != current)
                return 0;
        }
    } else {
        return 0;
    }
    int same = self->memo_count == count && self->memo_device == device;
    for (Py_ssize_t i = 0; same && i < count; i++) same = self->memo_tokens[i] == tokens[i];
    for (Py_ssize_t i = 0; same && i < n; i++) same = self->memo_forms[i] == forms[i];
    if (!same) {
        /* the key the Python path builds: a CuPy array's dtype.num, a tensor's learnt key, a
         * scalar's type, the constexprs, the device */
        PyObject *key = PyTuple_New(count + 1), *ordinal = PyLong_FromLong(device);
        if (!key || !ordinal) {
            Py_XDECREF(key);
            Py_XDECREF(ordinal);
            goto decline;
        }
        PyTuple_SET_ITEM(key, count, ordinal);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item = tokens[i];
            if (i < n && forms[i]) {
                /* the kind Classifier._torch_tensor learns keys by: (torch dtype, rank, unit) */
                PyObject *kind = Py_BuildValue("(OiO)", tokens[i], forms[i] / 2, forms[i] % 2 ? Py_True : Py_False);
                item = kind ? PyDict_GetItemWithError(self->learnt_keys, kind) : NULL; /* borrowed */
                Py_XDECREF(kind);
                Py_XINCREF(item); /* none yet: the first tensor of its kind, which the Python path learns */
            } else if (i < n && Py_TYPE(args[i]) == (PyTypeObject *)self->array_type) {
                item = PyObject_GetAttr(tokens[i], s_num);
            } else {
                Py_INCREF(item);
            }
            if (!item) {
                Py_DECREF(key);
                goto decline;
            }
            PyTuple_SET_ITEM(key, i, item);
        }
        PyObject *prepared = PyDict_GetItemWithError(self->kernels, key); /* borrowed */
        Py_DECREF(key);
        if (!prepared || remember(self, prepared, tokens, forms, count, n, device)) goto decline;
    }
    if (current != self->context) return 0;
    /* the tokens and forms matched, so each argument has the kind its slot expects */
    unsigned char *slot = self->slots;
    for (Py_ssize_t i = 0; i < n; i++) {
        switch (self->kinds[i]) {
        case 'A': /* a 1-D unit-stride array: pointer and length */
        case 'V': /* any other array: pointer, then its extents */
            if (!extent_count[i] || (self->kinds[i] == 'A') != (extent_count[i] == 1)) return 0;
            memcpy(slot, &first[i], 8);
            memcpy(slot + 8, &extents[extent_start[i]], 8 * (size_t)extent_count[i]);
            slot += 8 * (1 + (size_t)extent_count[i]);
            break;
        case 'd':
            memcpy(slot, &reals[i], 8);
            slot += 8;
            break;
        case 'f': {
            float f = (float)reals[i];
            memset(slot, 0, 8);
            memcpy(slot, &f, 4);
            slot += 8;
            break;
        }
        case 'q': /* a Python int, always an int64 parameter */
            if (tokens[i] != (PyObject *)&PyLong_Type) return 0;
            memcpy(slot, &first[i], 8);
            slot += 8;
            break;
        default:
            return 0;
        }
    }
    /* a failed launch launched nothing: the Python path launches again and reports the error */
    void *stream_handle = (void *)(intptr_t)handle;
    size_t size = self->buffer_size;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, self->slots, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    void **params = size ? NULL : self->params, **extras = size ? extra : NULL;
    if (self->programmatic && cu_launch_ex) {
        launch_attribute allow;
        memset(&allow, 0, sizeof allow);
        allow.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        allow.value.allowed = 1;
        launch_config config = {{dims[0], dims[1], dims[2]}, {self->block, 1, 1}, self->shared, stream_handle,
                                &allow, 1};
        return cu_launch_ex(&config, self->function, params, extras) == 0;
    }
    return cu_launch(self->function, dims[0], dims[1], dims[2], self->block, 1, 1, self->shared, stream_handle,
                     params, extras) == 0;
decline:
    PyErr_Clear();
    return 0;
}

/* ----- BoundLaunch: `kernel[grid]` or `kernel[grid, stream]` ----------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    KernelBase *kernel;
    PyObject *grid, *stream;
} BoundLaunch;

static PyObject *bound_vectorcall(BoundLaunch *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (try_launch(self->kernel, self->grid, self->stream, args, n, kwnames)) Py_RETURN_NONE;
    PyObject *positional = PyTuple_New(n), *keywords = PyDict_New(), *result = NULL;
    if (!positional || !keywords) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(positional, i, args[i]);
    }
    for (Py_ssize_t j = 0; kwnames && j < PyTuple_GET_SIZE(kwnames); j++)
        if (PyDict_SetItem(keywords, PyTuple_GET_ITEM(kwnames, j), args[n + j])) goto done;
    result = PyObject_CallMethodObjArgs((PyObject *)self->kernel, s_run, self->grid, self->stream, positional,
                                        keywords, NULL);
done:
    Py_XDECREF(positional);
    Py_XDECREF(keywords);
    return result;
}

static void bound_dealloc(BoundLaunch *self) {
    Py_DECREF(self->kernel);
    Py_DECREF(self->grid);
    Py_DECREF(self->stream);
    PyObject_Free(self);
}

static PyMemberDef bound_members[] = {
    {"kernel", T_OBJECT, offsetof(BoundLaunch, kernel), READONLY, "the tile program"},
    {"grid", T_OBJECT, offsetof(BoundLaunch, grid), READONLY, "the grid, as given"},
    {"stream", T_OBJECT, offsetof(BoundLaunch, stream), READONLY, "the stream, or None for the current one"},
    {NULL},
};

static PyTypeObject BoundLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coop_tiles.runtime._claunch.BoundLaunch",
    .tp_basicsize = sizeof(BoundLaunch),
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_vectorcall_offset = offsetof(BoundLaunch, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A tile program bound to a grid and stream; calling it launches.",
    .tp_members = bound_members,
};

static PyObject *bind(KernelBase *kernel, PyObject *grid, PyObject *stream) {
    BoundLaunch *self = PyObject_New(BoundLaunch, &BoundLaunchType);
    if (!self) return NULL;
    self->vectorcall = (vectorcallfunc)bound_vectorcall;
    Py_INCREF(kernel);
    Py_INCREF(grid);
    Py_INCREF(stream);
    self->kernel = kernel;
    self->grid = grid;
    self->stream = stream;
    return (PyObject *)self;
}

/* kernel[launch]: an int, or a tuple of 1 to 3 ints, is a grid (as `_split_launch` says); anything
 * else is split by the Python `_split_launch`. */
static PyObject *kernel_subscript(KernelBase *self, PyObject *launch) {
    unsigned dims[3];
    if (PyLong_CheckExact(launch) || read_grid(launch, dims)) return bind(self, launch, Py_None);
    PyObject *pair = PyObject_CallMethodOneArg((PyObject *)self, s_split_launch, launch);
    if (!pair) return NULL;
    PyObject *result = NULL;
    if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2)
        result = bind(self, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1));
    else
        PyErr_SetString(PyExc_TypeError, "_split_launch must return (grid, stream)");
    Py_DECREF(pair);
    return result;
}

static PyMappingMethods kernel_mapping = {.mp_subscript = (binaryfunc)kernel_subscript};

static PyMethodDef kernel_methods[] = {
    {"_enable_c_launch", (PyCFunction)(void (*)(void))kernel_enable, METH_FASTCALL,
     "Launch common calls in C from now on; False if this array class is not supported."},
    {"_forget_c_launch", (PyCFunction)kernel_forget, METH_NOARGS, "Drop the remembered previous launch."},
    {NULL},
};

static PyTypeObject KernelBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coop_tiles.runtime._claunch.KernelBase",
    .tp_basicsize = sizeof(KernelBase),
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_as_mapping = &kernel_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C launch path under a tile program: kernel[grid] and the call that launches.",
    .tp_traverse = (traverseproc)kernel_traverse,
    .tp_clear = (inquiry)kernel_clear,
    .tp_methods = kernel_methods,
    .tp_new = kernel_new,
};

/* current_context(): the handle of the context current on this thread (0: none), for the Python
 * fast path, which checks it on every launch when the process sees several GPUs. */
static PyObject *module_current_context(PyObject *module, PyObject *unused) {
    void *current = NULL;
    if (!load_driver()) {
        PyErr_SetString(PyExc_RuntimeError, "the CUDA driver (libcuda.so.1) could not be loaded");
        return NULL;
    }
    if (cu_ctx_get_current(&current) != 0) current = NULL;
    return PyLong_FromVoidPtr(current);
}

static PyMethodDef module_methods[] = {
    {"current_context", (PyCFunction)module_current_context, METH_NOARGS,
     "The handle of the context current on this thread (0: none)."},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_claunch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__claunch(void) {
    s_c_contiguous = PyUnicode_InternFromString("_c_contiguous");
    s_ndim = PyUnicode_InternFromString("ndim");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_num = PyUnicode_InternFromString("num");
    s_data = PyUnicode_InternFromString("data");
    s_ptr = PyUnicode_InternFromString("ptr");
    s_size = PyUnicode_InternFromString("size");
    s_device_id = PyUnicode_InternFromString("device_id");
    s_c_info = PyUnicode_InternFromString("c_info");
    s_run = PyUnicode_InternFromString("run");
    s_split_launch = PyUnicode_InternFromString("_split_launch");
    s_is_cuda = PyUnicode_InternFromString("is_cuda");
    s_shape = PyUnicode_InternFromString("shape");
    s_stride = PyUnicode_InternFromString("stride");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_get_device = PyUnicode_InternFromString("get_device");
    if (PyType_Ready(&KernelBaseType) < 0 || PyType_Ready(&BoundLaunchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "KernelBase", (PyObject *)&KernelBaseType) < 0 ||
        PyModule_AddObjectRef(m, "BoundLaunch", (PyObject *)&BoundLaunchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
