# cython: language_level=3

cdef extern from *:
    """
    /* tuple.__new__(cls, values) for cls a subclass of tuple that keeps tuple's own
       allocation (a NamedTuple of fastcoord.core.results): tuple's __new__ slot called,
       as the method's wrapper calls it once it has checked cls, without the wrapper's
       call protocol. Public API only: CPython allocates and fills the instance (the
       instance's layout is CPython's business: filling one here would break where a
       tuple gains fields). The slot only asserts that cls is a tuple subtype, so the
       check is made here. */
    static PyObject *fc_tuple_new(PyObject *cls, PyObject *values) {
        PyObject *t, *args;
        if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
            PyErr_Format(PyExc_TypeError, "%R is not a subtype of tuple", cls);
            return NULL;
        }
        args = PyTuple_Pack(1, values);
        if (args == NULL)
            return NULL;
        t = PyTuple_Type.tp_new((PyTypeObject *)cls, args, NULL);
        Py_DECREF(args);
        return t;
    }
    """
    object fc_tuple_new(object cls, tuple values)
