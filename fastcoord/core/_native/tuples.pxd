# cython: language_level=3

cdef extern from *:
    """
    /* tuple.__new__(cls, values) for cls a subclass of tuple that keeps tuple's own
       allocation (a NamedTuple of fastcoord.core.results): tuple's __new__ slot called,
       as the method's wrapper calls it once it has checked cls, without the wrapper's
       call protocol. Public API only: CPython allocates and fills the instance. */
    static PyObject *fc_tuple_new(PyObject *cls, PyObject *values) {
        PyObject *t, *args = PyTuple_Pack(1, values);
        if (args == NULL)
            return NULL;
        t = PyTuple_Type.tp_new((PyTypeObject *)cls, args, NULL);
        Py_DECREF(args);
        return t;
    }
    """
    object fc_tuple_new(object cls, tuple values)
