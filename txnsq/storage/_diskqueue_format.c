/*
 * The compiled speed-up of txnsq.storage.diskqueue_format: the framing of
 * the disk queue's records, <4-byte big-endian length><message>, when
 * messages spill to the segment files (append_record for one,
 * append_records for a run, one resize of the write buffer for all) and
 * when a read-ahead chunk of a segment is cut into messages
 * (split_records).
 *
 * Only the common case is handled here: a bytearray, a list of bytes
 * messages shorter than 4 GiB, a bytes chunk, int offsets that fit a
 * Py_ssize_t.  Anything else is handed to the pure-Python function
 * (diskqueue_format.pure_append_record, pure_append_records,
 * pure_split_records), which returns the same result or raises the error
 * the pure module raises, so there is one source for both.
 * tests/test_storage_diskqueue_format_speedups.py compares the two.  PyPy
 * runs the pure Python.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 4

static PyObject *
call_pure(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *module, *function, *result;
    module = PyImport_ImportModule("txnsq.storage.diskqueue_format");
    if (module == NULL) {
        return NULL;
    }
    function = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    if (function == NULL) {
        return NULL;
    }
    result = PyObject_Vectorcall(function, args, (size_t)nargs, NULL);
    Py_DECREF(function);
    return result;
}

PyDoc_STRVAR(append_record_doc,
"append_record(pending, data) -> int\n\n"
"Frame data as a record at the end of pending: as\n"
"diskqueue_format.pure_append_record.");

static PyObject *
append_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *pending, *data;
    Py_ssize_t size, old_size;
    char *out;
    uint32_t length;

    if (nargs != 2 || !PyByteArray_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        return call_pure("pure_append_record", args, nargs);
    }
    pending = args[0];
    data = args[1];
    size = PyBytes_GET_SIZE(data);
    if ((uint64_t)size > 0xffffffffULL) {
        return call_pure("pure_append_record", args, nargs);
    }
    old_size = PyByteArray_GET_SIZE(pending);
    if (size > PY_SSIZE_T_MAX - HEADER_SIZE - old_size) {
        return PyErr_NoMemory();
    }
    /* Resizing a bytearray over-allocates as += does, so a run of appends
     * copies the buffer a logarithmic number of times; it raises
     * BufferError while the buffer is exported, as += does. */
    if (PyByteArray_Resize(pending, old_size + HEADER_SIZE + size) < 0) {
        return NULL;
    }
    out = PyByteArray_AS_STRING(pending) + old_size;
    length = (uint32_t)size;
    out[0] = (char)(length >> 24);
    out[1] = (char)(length >> 16);
    out[2] = (char)(length >> 8);
    out[3] = (char)length;
    memcpy(out + HEADER_SIZE, PyBytes_AS_STRING(data), (size_t)size);
    return PyLong_FromSsize_t(old_size + HEADER_SIZE + size);
}

/* An exact int that fits a Py_ssize_t, into *value; 0 if it is not one
 * (no exception set). */
static int
ssize_arg(PyObject *arg, Py_ssize_t *value)
{
    if (!PyLong_CheckExact(arg)) {
        return 0;
    }
    *value = PyLong_AsSsize_t(arg);
    if (*value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(append_records_doc,
"append_records(pending, messages, start, write_pos, max_bytes, flush_bytes)\n"
"-> (int, int)\n\n"
"Frame messages[start:] at the end of pending while they fit the segment:\n"
"as diskqueue_format.pure_append_records.");

static PyObject *
append_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *pending, *messages, *result, *rest_args[6];
    Py_ssize_t start, write_pos, max_bytes, flush_bytes, count, index, i;
    Py_ssize_t old_size, size;
    int odd = 0;
    char *out;

    if (nargs != 6 || !PyByteArray_CheckExact(args[0]) || !PyList_CheckExact(args[1])
        || !ssize_arg(args[2], &start) || !ssize_arg(args[3], &write_pos)
        || !ssize_arg(args[4], &max_bytes) || !ssize_arg(args[5], &flush_bytes) || start < 0) {
        return call_pure("pure_append_records", args, nargs);
    }
    pending = args[0];
    messages = args[1];
    count = PyList_GET_SIZE(messages);
    old_size = size = PyByteArray_GET_SIZE(pending);
    /* First how many records go, and their size, so that the buffer is
     * resized once for the run. */
    for (index = start; index < count;) {
        PyObject *data = PyList_GET_ITEM(messages, index);
        Py_ssize_t total;
        if (!PyBytes_CheckExact(data) || (uint64_t)PyBytes_GET_SIZE(data) > 0xffffffffULL) {
            odd = 1;
            break;
        }
        total = HEADER_SIZE + PyBytes_GET_SIZE(data);
        if (write_pos > PY_SSIZE_T_MAX - total || size > PY_SSIZE_T_MAX - total) {
            odd = 1;
            break;
        }
        if (write_pos && write_pos + total > max_bytes) {
            break;
        }
        write_pos += total;
        size += total;
        index++;
        if (size >= flush_bytes) {
            break;
        }
    }
    if (size > old_size) {
        if (PyByteArray_Resize(pending, size) < 0) {
            return NULL;
        }
        out = PyByteArray_AS_STRING(pending) + old_size;
        for (i = start; i < index; i++) {
            PyObject *data = PyList_GET_ITEM(messages, i);
            Py_ssize_t length = PyBytes_GET_SIZE(data);
            uint32_t prefix = (uint32_t)length;
            out[0] = (char)(prefix >> 24);
            out[1] = (char)(prefix >> 16);
            out[2] = (char)(prefix >> 8);
            out[3] = (char)prefix;
            memcpy(out + HEADER_SIZE, PyBytes_AS_STRING(data), (size_t)length);
            out += HEADER_SIZE + length;
        }
    }
    if (odd) {
        /* The rest from where the pure function would be now: it frames
         * or refuses the odd message as the reference does. */
        rest_args[0] = pending;
        rest_args[1] = messages;
        rest_args[2] = PyLong_FromSsize_t(index);
        rest_args[3] = PyLong_FromSsize_t(write_pos);
        rest_args[4] = args[4];
        rest_args[5] = args[5];
        if (rest_args[2] == NULL || rest_args[3] == NULL) {
            Py_XDECREF(rest_args[2]);
            Py_XDECREF(rest_args[3]);
            return NULL;
        }
        result = call_pure("pure_append_records", rest_args, 6);
        Py_DECREF(rest_args[2]);
        Py_DECREF(rest_args[3]);
        return result;
    }
    return Py_BuildValue("(nn)", index, write_pos);
}

PyDoc_STRVAR(split_records_doc,
"split_records(buf, start, stop, min_size, max_size) -> (list, int)\n\n"
"The messages of the whole, valid records of buf[start:stop] and the\n"
"offset after the last: as diskqueue_format.pure_split_records.");

static PyObject *
split_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start, stop, min_size, max_size, end, offset;
    const unsigned char *buf;
    PyObject *records, *record, *result;

    if (nargs != 5 || !PyBytes_CheckExact(args[0]) || !ssize_arg(args[1], &start)
        || !ssize_arg(args[2], &stop) || !ssize_arg(args[3], &min_size)
        || !ssize_arg(args[4], &max_size) || start < 0) {
        return call_pure("pure_split_records", args, nargs);
    }
    buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    end = PyBytes_GET_SIZE(args[0]);
    if (stop < end) {
        end = stop;
    }
    records = PyList_New(0);
    if (records == NULL) {
        return NULL;
    }
    offset = start;
    /* offset <= end - HEADER_SIZE, written so that it cannot overflow. */
    while (end >= HEADER_SIZE && offset <= end - HEADER_SIZE) {
        const unsigned char *at = buf + offset;
        Py_ssize_t length = (Py_ssize_t)(((uint32_t)at[0] << 24) | ((uint32_t)at[1] << 16)
                                         | ((uint32_t)at[2] << 8) | (uint32_t)at[3]);
        if (length < min_size || length > max_size) {
            break;
        }
        if (length > end - offset - HEADER_SIZE) {
            break;
        }
        record = PyBytes_FromStringAndSize((const char *)at + HEADER_SIZE, length);
        if (record == NULL) {
            Py_DECREF(records);
            return NULL;
        }
        if (PyList_Append(records, record) < 0) {
            Py_DECREF(record);
            Py_DECREF(records);
            return NULL;
        }
        Py_DECREF(record);
        offset += HEADER_SIZE + length;
    }
    result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(records);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, records);
    record = PyLong_FromSsize_t(offset);
    if (record == NULL) {
        Py_DECREF(result);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 1, record);
    return result;
}

static PyMethodDef methods[] = {
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL, append_record_doc},
    {"append_records", (PyCFunction)(void (*)(void))append_records, METH_FASTCALL, append_records_doc},
    {"split_records", (PyCFunction)(void (*)(void))split_records, METH_FASTCALL, split_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "txnsq.storage._diskqueue_format",
    "The compiled record framing of txnsq.storage.diskqueue_format (CPython only).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__diskqueue_format(void)
{
    return PyModule_Create(&module_def);
}
