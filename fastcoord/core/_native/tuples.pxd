# cython: language_level=3

cdef extern from *:
    """
    /* tuple.__new__(cls, values) for cls a subclass of tuple that keeps tuple's own
       allocation (a NamedTuple of fastcoord.core.results): the steps tuple's __new__
       takes for a subclass given a tuple, without the call protocol or the
       intermediate tuples it makes (an argument tuple, a copy of values): the type's
       own allocator for len(values) items, then each item, a new reference. Public
       API only: CPython allocates the instance (and tracks it, a GC type), the items
       are set before anything else runs. */
    static PyObject *fc_tuple_new(PyObject *cls, PyObject *values) {
        PyTypeObject *tp = (PyTypeObject *)cls;
        Py_ssize_t i, n = PyTuple_GET_SIZE(values);
        PyObject *t;
        if (tp == &PyTuple_Type) {
            Py_INCREF(values);          /* tuple(values) of a tuple: itself */
            return values;
        }
        if (!PyType_FastSubclass(tp, Py_TPFLAGS_TUPLE_SUBCLASS)) {
            PyErr_Format(PyExc_TypeError, "%s is not a subtype of tuple", tp->tp_name);
            return NULL;
        }
        t = tp->tp_alloc(tp, n);
        if (t == NULL)
            return NULL;
        for (i = 0; i < n; i++) {
            PyObject *v = PyTuple_GET_ITEM(values, i);
            Py_INCREF(v);
            PyTuple_SET_ITEM(t, i, v);
        }
        return t;
    }
    """
    object fc_tuple_new(object cls, tuple values)
