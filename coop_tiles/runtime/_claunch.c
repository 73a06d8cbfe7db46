/* The optional C launch fast path of coop_tiles (see fastpath.py for the Python one).
 *
 * fast_launch(kernels, constexpr_names, cupy_ndarray, get_current_stream, grid, stream, args, kwargs, memo)
 * handles the common call: CuPy arrays, Python ints and floats, constexprs by keyword, an int
 * grid, a None or int stream. It builds the same cache key as the Python fast path, looks the
 * prepared launch up in `kernels`, writes the arguments into its parameter buffer and calls
 * cuLaunchKernel, all while holding the GIL (so no other thread can touch the buffer). It
 * returns True when it launched and False for anything else, which the Python path then
 * handles and reports. `memo` (a list of 3) keeps the last call's per-argument tokens (the
 * dtype object of an array, the type of a scalar, then the constexpr values) and its
 * prepared launch info: a call whose tokens are identical skips building and hashing the
 * key. libcuda is opened on first use, so importing needs no driver.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **);
static launch_fn cu_launch = NULL;
static PyObject *s_c_contiguous, *s_dtype, *s_num, *s_data, *s_ptr, *s_size, *s_c_info;

static int load_driver(void) {
    if (cu_launch) return 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return 0;
    cu_launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
    return cu_launch != NULL;
}

/* attribute `name` of `obj` as an integer; 0 on success */
static int int_attr(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

#define MAX_ARGS 64

static PyObject *fast_launch(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (nargs != 9 || !load_driver()) Py_RETURN_FALSE;
    PyObject *kernels = a[0], *names = a[1], *cupy_type = a[2], *get_stream = a[3];
    PyObject *grid = a[4], *stream = a[5], *args = a[6], *kwargs = a[7], *memo = a[8];
    if (!PyLong_CheckExact(grid) || !PyTuple_CheckExact(args) || !PyDict_Check(kwargs) ||
        !PyTuple_CheckExact(names) || !PyList_CheckExact(memo) || PyList_GET_SIZE(memo) != 3)
        Py_RETURN_FALSE;
    Py_ssize_t n = PyTuple_GET_SIZE(args), nc = PyTuple_GET_SIZE(names);
    if (n > MAX_ARGS || nc > MAX_ARGS || PyDict_GET_SIZE(kwargs) != nc) Py_RETURN_FALSE;
    long long g0 = PyLong_AsLongLong(grid);
    if (g0 <= 0 || g0 > 0x7fffffffLL) { PyErr_Clear(); Py_RETURN_FALSE; }

    unsigned long long first[MAX_ARGS], second[MAX_ARGS];
    double reals[MAX_ARGS];
    int is_real[MAX_ARGS];
    PyObject *tokens[MAX_ARGS + MAX_ARGS]; /* borrowed: dtype objects, types, constexpr values */
    PyObject *dtypes[MAX_ARGS];             /* borrowed from tokens for cupy arrays, else NULL */
    int uses_cupy = 0;
    PyObject *key = NULL, *info = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i);
        PyTypeObject *t = Py_TYPE(v);
        is_real[i] = 0;
        dtypes[i] = NULL;
        if ((PyObject *)t == cupy_type) {
            long long contiguous, ptr, size;
            PyObject *dtype = NULL, *data = NULL;
            if (int_attr(v, s_c_contiguous, &contiguous) || !contiguous) goto fallback;
            dtype = PyObject_GetAttr(v, s_dtype); /* NumPy's builtin dtypes are singletons */
            if (!dtype) goto fallback;
            dtypes[i] = tokens[i] = dtype;
            Py_DECREF(dtype); /* still referenced by the array */
            data = PyObject_GetAttr(v, s_data);
            if (!data || int_attr(data, s_ptr, &ptr)) { Py_XDECREF(data); goto fallback; }
            Py_DECREF(data);
            if (int_attr(v, s_size, &size)) goto fallback;
            first[i] = (unsigned long long)ptr;
            second[i] = (unsigned long long)size;
            uses_cupy = 1;
        } else if (t == &PyLong_Type) {
            long long value = PyLong_AsLongLong(v);
            if (value == -1 && PyErr_Occurred()) goto fallback;
            first[i] = (unsigned long long)value;
            tokens[i] = (PyObject *)&PyLong_Type;
        } else if (t == &PyFloat_Type) {
            reals[i] = PyFloat_AS_DOUBLE(v);
            is_real[i] = 1;
            tokens[i] = (PyObject *)&PyFloat_Type;
        } else {
            goto fallback;
        }
    }
    for (Py_ssize_t j = 0; j < nc; j++) {
        PyObject *value = PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(names, j));
        if (!value) goto fallback;
        tokens[n + j] = value;
    }
    /* the last call's signature, if every token is the same object */
    PyObject *last = PyList_GET_ITEM(memo, 0);
    if (last != Py_None && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) == n + nc) {
        Py_ssize_t i = 0;
        while (i < n + nc && PyTuple_GET_ITEM(last, i) == tokens[i]) i++;
        if (i == n + nc) {
            info = PyList_GET_ITEM(memo, 2);
            Py_INCREF(info);
        }
    }
    if (!info) {
        key = PyTuple_New(n + nc);
        if (!key) goto fallback;
        for (Py_ssize_t i = 0; i < n + nc; i++) {
            PyObject *item;
            if (i < n && dtypes[i]) {
                long long num;
                if (int_attr(dtypes[i], s_num, &num)) goto fallback;
                item = PyLong_FromLongLong(num);
                if (!item) goto fallback;
            } else {
                item = tokens[i];
                Py_INCREF(item);
            }
            PyTuple_SET_ITEM(key, i, item);
        }
        PyObject *prepared = PyDict_GetItemWithError(kernels, key); /* borrowed */
        if (!prepared) goto fallback;
        info = PyObject_GetAttr(prepared, s_c_info);
        if (!info) goto fallback;
        PyObject *remembered = PyTuple_New(n + nc);
        if (!remembered) goto fallback;
        for (Py_ssize_t i = 0; i < n + nc; i++) {
            Py_INCREF(tokens[i]);
            PyTuple_SET_ITEM(remembered, i, tokens[i]);
        }
        PyList_SetItem(memo, 0, remembered); /* steals */
        Py_INCREF(info);
        PyList_SetItem(memo, 2, info);
    }
    {
        if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 6) goto fallback;
        void *function = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 0));
        unsigned block = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 1));
        unsigned shared = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 2));
        unsigned char *slots = (unsigned char *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 3));
        void **params = (void **)PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 4));
        PyObject *kinds = PyTuple_GET_ITEM(info, 5);
        if (PyErr_Occurred() || !PyBytes_CheckExact(kinds) || PyBytes_GET_SIZE(kinds) != n) goto fallback;
        const char *k = PyBytes_AS_STRING(kinds);
        /* the key matched, so each argument has the kind its slot expects */
        size_t offset = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            switch (k[i]) {
            case 'A':
                memcpy(slots + offset, &first[i], 8);
                memcpy(slots + offset + 8, &second[i], 8);
                offset += 16;
                break;
            case 'd':
                memcpy(slots + offset, &reals[i], 8);
                offset += 8;
                break;
            case 'f': {
                float f = (float)reals[i];
                memset(slots + offset, 0, 8);
                memcpy(slots + offset, &f, 4);
                offset += 8;
                break;
            }
            default: /* 'q': a signed 64-bit integer */
                if (is_real[i]) goto fallback;
                memcpy(slots + offset, &first[i], 8);
                offset += 8;
            }
        }
        long long handle = 0;
        if (stream == Py_None) {
            if (uses_cupy) {
                PyObject *s = PyObject_CallNoArgs(get_stream);
                if (!s || int_attr(s, s_ptr, &handle)) { Py_XDECREF(s); goto fallback; }
                Py_DECREF(s);
            }
        } else if (PyLong_CheckExact(stream)) {
            handle = PyLong_AsLongLong(stream);
        } else {
            goto fallback;
        }
        int err = cu_launch(function, (unsigned)g0, 1, 1, block, 1, 1, shared, (void *)(intptr_t)handle, params, NULL);
        Py_DECREF(info);
        Py_XDECREF(key);
        if (err != 0) Py_RETURN_FALSE; /* nothing launched: the Python path launches again and reports */
        Py_RETURN_TRUE;
    }
fallback:
    PyErr_Clear();
    Py_XDECREF(info);
    Py_XDECREF(key);
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"fast_launch", (PyCFunction)(void (*)(void))fast_launch, METH_FASTCALL, "Launch the common call; False if not."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_claunch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__claunch(void) {
    s_c_contiguous = PyUnicode_InternFromString("_c_contiguous");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_num = PyUnicode_InternFromString("num");
    s_data = PyUnicode_InternFromString("data");
    s_ptr = PyUnicode_InternFromString("ptr");
    s_size = PyUnicode_InternFromString("size");
    s_c_info = PyUnicode_InternFromString("c_info");
    return PyModule_Create(&module);
}
