/* The optional C launch fast path of coop_tiles (see fastpath.py for the Python one).
 *
 * fast_launch(kernels, constexpr_names, cupy_ndarray, get_current_stream, grid, stream, args, kwargs)
 * handles the common call: CuPy arrays, Python ints and floats, constexprs by keyword, an int
 * grid, a None or int stream. It builds the same cache key as the Python fast path, looks the
 * prepared launch up in `kernels`, writes the arguments into its parameter buffer and calls
 * cuLaunchKernel, all while holding the GIL (so no other thread can touch the buffer). It
 * returns True when it launched and False for anything else, which the Python path then
 * handles and reports. libcuda is opened on first use, so importing needs no driver.
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
    if (nargs != 8 || !load_driver()) Py_RETURN_FALSE;
    PyObject *kernels = a[0], *names = a[1], *cupy_type = a[2], *get_stream = a[3];
    PyObject *grid = a[4], *stream = a[5], *args = a[6], *kwargs = a[7];
    if (!PyLong_CheckExact(grid) || !PyTuple_CheckExact(args) || !PyDict_Check(kwargs) || !PyTuple_CheckExact(names))
        Py_RETURN_FALSE;
    Py_ssize_t n = PyTuple_GET_SIZE(args), nc = PyTuple_GET_SIZE(names);
    if (n > MAX_ARGS || PyDict_GET_SIZE(kwargs) != nc) Py_RETURN_FALSE;
    long long g0 = PyLong_AsLongLong(grid);
    if (g0 <= 0 || g0 > 0x7fffffffLL) { PyErr_Clear(); Py_RETURN_FALSE; }

    unsigned long long first[MAX_ARGS], second[MAX_ARGS];
    double reals[MAX_ARGS];
    int is_real[MAX_ARGS];
    int uses_cupy = 0;
    PyObject *key = PyTuple_New(n + nc);
    if (!key) { PyErr_Clear(); Py_RETURN_FALSE; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i);
        PyTypeObject *t = Py_TYPE(v);
        is_real[i] = 0;
        if ((PyObject *)t == cupy_type) {
            long long contiguous, num, ptr, size;
            PyObject *dtype = NULL, *data = NULL;
            if (int_attr(v, s_c_contiguous, &contiguous) || !contiguous) goto fallback;
            dtype = PyObject_GetAttr(v, s_dtype);
            if (!dtype || int_attr(dtype, s_num, &num)) { Py_XDECREF(dtype); goto fallback; }
            Py_DECREF(dtype);
            data = PyObject_GetAttr(v, s_data);
            if (!data || int_attr(data, s_ptr, &ptr)) { Py_XDECREF(data); goto fallback; }
            Py_DECREF(data);
            if (int_attr(v, s_size, &size)) goto fallback;
            first[i] = (unsigned long long)ptr;
            second[i] = (unsigned long long)size;
            PyTuple_SET_ITEM(key, i, PyLong_FromLongLong(num));
            uses_cupy = 1;
        } else if (t == &PyLong_Type) {
            long long value = PyLong_AsLongLong(v);
            if (value == -1 && PyErr_Occurred()) goto fallback;
            first[i] = (unsigned long long)value;
            Py_INCREF(&PyLong_Type);
            PyTuple_SET_ITEM(key, i, (PyObject *)&PyLong_Type);
        } else if (t == &PyFloat_Type) {
            reals[i] = PyFloat_AS_DOUBLE(v);
            is_real[i] = 1;
            Py_INCREF(&PyFloat_Type);
            PyTuple_SET_ITEM(key, i, (PyObject *)&PyFloat_Type);
        } else {
            goto fallback;
        }
        if (!PyTuple_GET_ITEM(key, i)) goto fallback;
    }
    for (Py_ssize_t j = 0; j < nc; j++) {
        PyObject *value = PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(names, j));
        if (!value) goto fallback;
        Py_INCREF(value);
        PyTuple_SET_ITEM(key, n + j, value);
    }
    {
        PyObject *prepared = PyDict_GetItemWithError(kernels, key); /* borrowed */
        if (!prepared) goto fallback;
        PyObject *info = PyObject_GetAttr(prepared, s_c_info);
        if (!info || !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 6) { Py_XDECREF(info); goto fallback; }
        void *function = PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 0));
        unsigned block = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 1));
        unsigned shared = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(info, 2));
        unsigned char *slots = (unsigned char *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 3));
        void **params = (void **)PyLong_AsVoidPtr(PyTuple_GET_ITEM(info, 4));
        PyObject *kinds = PyTuple_GET_ITEM(info, 5);
        if (PyErr_Occurred() || !PyBytes_CheckExact(kinds) || PyBytes_GET_SIZE(kinds) != n) {
            Py_DECREF(info);
            goto fallback;
        }
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
                if (is_real[i]) { Py_DECREF(info); goto fallback; }
                memcpy(slots + offset, &first[i], 8);
                offset += 8;
            }
        }
        long long handle = 0;
        if (stream == Py_None) {
            if (uses_cupy) {
                PyObject *s = PyObject_CallNoArgs(get_stream);
                if (!s || int_attr(s, s_ptr, &handle)) { Py_XDECREF(s); Py_DECREF(info); goto fallback; }
                Py_DECREF(s);
            }
        } else if (PyLong_CheckExact(stream)) {
            handle = PyLong_AsLongLong(stream);
        } else {
            Py_DECREF(info);
            goto fallback;
        }
        int err = cu_launch(function, (unsigned)g0, 1, 1, block, 1, 1, shared, (void *)(intptr_t)handle, params, NULL);
        Py_DECREF(info);
        Py_DECREF(key);
        if (err != 0) Py_RETURN_FALSE; /* nothing launched: the Python path launches again and reports */
        Py_RETURN_TRUE;
    }
fallback:
    PyErr_Clear();
    Py_DECREF(key);
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
