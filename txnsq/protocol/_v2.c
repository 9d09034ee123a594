/*
 * The compiled kernels of txnsq.protocol.v2's command parser: the loops
 * that run once per command or once per message (a command line split on
 * spaces, a run of FIN lines, an MPUB's message bodies, a PUB's body).
 *
 * The parser itself (its state, its hooks, every check and every error
 * text) stays in Python: a kernel only finds bytes and copies them out,
 * and reports what it found; the Python caller raises the errors, so that
 * the texts have one source.  The pure-Python loops in v2.py are the
 * reference: tests/test_protocol_v2_speedups.py feeds both parsers the
 * same streams and requires the same commands, errors and state.
 * PyPy runs the pure Python.
 *
 * Each kernel reads the parser's own bytearray through a pointer taken
 * once per call: nothing else holds that bytearray, so no code that an
 * allocation may run (a collection, a finalizer) can resize it meanwhile.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* As v2.MAX_LINE_LENGTH: a line and its newline fit in Go's 16 KiB reader. */
#define MAX_LINE_LENGTH (16 * 1024)
/* "FIN " and a 16-byte message id. */
#define FIN_LINE_LENGTH 20

/* What mpub_bodies stopped at. */
#define MPUB_DONE 0      /* every message read */
#define MPUB_NEED_SIZE 1 /* fewer than 4 bytes of the next size */
#define MPUB_NEED_BODY 2 /* a size read, its body not all here */
#define MPUB_BAD_SIZE 3  /* a size <= 0 or above the largest message */

static int
get_bytearray(PyObject *obj, char **data, Py_ssize_t *size)
{
    if (!PyByteArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected a bytearray, not %.200s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyByteArray_AS_STRING(obj);
    *size = PyByteArray_GET_SIZE(obj);
    return 0;
}

static int
get_position(PyObject *obj, Py_ssize_t size, Py_ssize_t *pos)
{
    Py_ssize_t value = PyLong_AsSsize_t(obj);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < 0 || value > size) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        return -1;
    }
    *pos = value;
    return 0;
}

static inline int32_t
read_int32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* A Python int as a long long, saturated (limits beyond int64 compare the
 * same with an int32 size). */
static int
get_limit(PyObject *obj, long long *limit)
{
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow > 0) {
        value = LLONG_MAX;
    }
    else if (overflow < 0) {
        value = LLONG_MIN;
    }
    *limit = value;
    return 0;
}

PyDoc_STRVAR(fin_ids_doc,
"fin_ids(buf, pos) -> (ids, pos)\n\n"
"The ids of the plain ``FIN <16-byte id>\\n`` lines of ``buf`` from\n"
"``pos`` on, and where they end.");

static PyObject *
fin_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char *data;
    Py_ssize_t size, pos;
    PyObject *ids, *result, *end_obj;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fin_ids takes a buffer and a position");
        return NULL;
    }
    if (get_bytearray(args[0], &data, &size) < 0 || get_position(args[1], size, &pos) < 0) {
        return NULL;
    }
    ids = PyList_New(0);
    if (ids == NULL) {
        return NULL;
    }
    for (;;) {
        Py_ssize_t end = pos + FIN_LINE_LENGTH;
        const char *line = data + pos;
        PyObject *id;
        if (size <= end || data[end] != '\n' || memcmp(line, "FIN ", 4) != 0 || data[end - 1] == '\r'
            || memchr(line + 4, ' ', 16) != NULL) {
            break;
        }
        id = PyBytes_FromStringAndSize(line + 4, 16);
        if (id == NULL || PyList_Append(ids, id) < 0) {
            Py_XDECREF(id);
            Py_DECREF(ids);
            return NULL;
        }
        Py_DECREF(id);
        pos = end + 1;
    }
    end_obj = PyLong_FromSsize_t(pos);
    if (end_obj == NULL) {
        Py_DECREF(ids);
        return NULL;
    }
    result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(ids);
        Py_DECREF(end_obj);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, ids);
    PyTuple_SET_ITEM(result, 1, end_obj);
    return result;
}

PyDoc_STRVAR(split_line_doc,
"split_line(buf, pos) -> (name, params, pos) or None\n\n"
"The command line of ``buf`` at ``pos`` (one ``\\r`` before its ``\\n``\n"
"dropped) split on single spaces, and where the next line starts; None\n"
"when there is no newline within ``MAX_LINE_LENGTH`` bytes.");

static PyObject *
split_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char *data;
    Py_ssize_t size, pos, limit, end, start, i;
    const char *newline;
    PyObject *name = NULL, *params = NULL, *next = NULL, *result;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "split_line takes a buffer and a position");
        return NULL;
    }
    if (get_bytearray(args[0], &data, &size) < 0 || get_position(args[1], size, &pos) < 0) {
        return NULL;
    }
    limit = size - pos;
    if (limit > MAX_LINE_LENGTH) {
        limit = MAX_LINE_LENGTH;
    }
    newline = memchr(data + pos, '\n', (size_t)limit);
    if (newline == NULL) {
        Py_RETURN_NONE;
    }
    end = newline - data;
    next = PyLong_FromSsize_t(end + 1);
    if (next == NULL) {
        return NULL;
    }
    if (end > pos && data[end - 1] == '\r') {
        end--;
    }
    /* The name: up to the first space. */
    for (i = pos; i < end && data[i] != ' '; i++) {
    }
    name = PyBytes_FromStringAndSize(data + pos, i - pos);
    params = PyList_New(0);
    if (name == NULL || params == NULL) {
        goto fail;
    }
    while (i < end) {
        PyObject *param;
        start = ++i; /* past the space */
        while (i < end && data[i] != ' ') {
            i++;
        }
        param = PyBytes_FromStringAndSize(data + start, i - start);
        if (param == NULL || PyList_Append(params, param) < 0) {
            Py_XDECREF(param);
            goto fail;
        }
        Py_DECREF(param);
    }
    result = PyTuple_New(3);
    if (result == NULL) {
        goto fail;
    }
    PyTuple_SET_ITEM(result, 0, name);
    PyTuple_SET_ITEM(result, 1, params);
    PyTuple_SET_ITEM(result, 2, next);
    return result;

fail:
    Py_XDECREF(name);
    Py_XDECREF(params);
    Py_XDECREF(next);
    return NULL;
}

PyDoc_STRVAR(mpub_bodies_doc,
"mpub_bodies(buf, pos, remaining, max_msg_size, bodies) -> (status, pos, value)\n\n"
"Append to ``bodies`` the next ``remaining`` MPUB messages of ``buf`` from\n"
"``pos``, as far as they have arrived.  ``status`` says why it stopped:\n"
"0 all read; 1 the next size has not arrived; 2 a body has not arrived\n"
"(``pos`` is where it starts, ``value`` its size); 3 a size is 0 or less\n"
"or above ``max_msg_size`` (``value``; ``pos`` is where the size is).");

static PyObject *
mpub_bodies(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char *data;
    Py_ssize_t size, pos, remaining;
    long long max_msg_size;
    PyObject *bodies;
    int status = MPUB_DONE;
    long long value = 0;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "mpub_bodies takes five arguments");
        return NULL;
    }
    if (get_bytearray(args[0], &data, &size) < 0 || get_position(args[1], size, &pos) < 0) {
        return NULL;
    }
    remaining = PyLong_AsSsize_t(args[2]);
    if (remaining == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (get_limit(args[3], &max_msg_size) < 0) {
        return NULL;
    }
    bodies = args[4];
    if (!PyList_Check(bodies)) {
        PyErr_SetString(PyExc_TypeError, "bodies must be a list");
        return NULL;
    }
    while (remaining > 0) {
        int32_t need;
        PyObject *body;
        if (size - pos < 4) {
            status = MPUB_NEED_SIZE;
            break;
        }
        need = read_int32((const unsigned char *)data + pos);
        if (need <= 0 || (long long)need > max_msg_size) {
            status = MPUB_BAD_SIZE;
            value = need;
            break;
        }
        if ((Py_ssize_t)need > size - pos - 4) {
            status = MPUB_NEED_BODY;
            value = need;
            pos += 4;
            break;
        }
        body = PyBytes_FromStringAndSize(data + pos + 4, need);
        if (body == NULL) {
            return NULL;
        }
        if (PyList_Append(bodies, body) < 0) {
            Py_DECREF(body);
            return NULL;
        }
        Py_DECREF(body);
        pos += 4 + (Py_ssize_t)need;
        remaining--;
    }
    return Py_BuildValue("(inL)", status, pos, value);
}

PyDoc_STRVAR(pub_body_doc,
"pub_body(buf, pos, max_msg_size) -> (body, pos) or None\n\n"
"A PUB's body at ``pos`` (its 4-byte size first) and where it ends, when\n"
"the size is 1..``max_msg_size`` and the body has all arrived; else None\n"
"(for the parser's general path, which makes every check).");

static PyObject *
pub_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    char *data;
    Py_ssize_t size, pos;
    long long max_msg_size;
    int32_t need;
    PyObject *body, *end, *result;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pub_body takes three arguments");
        return NULL;
    }
    if (get_bytearray(args[0], &data, &size) < 0 || get_position(args[1], size, &pos) < 0
        || get_limit(args[2], &max_msg_size) < 0) {
        return NULL;
    }
    if (size - pos < 4) {
        Py_RETURN_NONE;
    }
    need = read_int32((const unsigned char *)data + pos);
    if (need <= 0 || (long long)need > max_msg_size || (Py_ssize_t)need > size - pos - 4) {
        Py_RETURN_NONE;
    }
    body = PyBytes_FromStringAndSize(data + pos + 4, need);
    if (body == NULL) {
        return NULL;
    }
    end = PyLong_FromSsize_t(pos + 4 + (Py_ssize_t)need);
    if (end == NULL) {
        Py_DECREF(body);
        return NULL;
    }
    result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(body);
        Py_DECREF(end);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, body);
    PyTuple_SET_ITEM(result, 1, end);
    return result;
}

static PyMethodDef methods[] = {
    {"fin_ids", (PyCFunction)(void (*)(void))fin_ids, METH_FASTCALL, fin_ids_doc},
    {"split_line", (PyCFunction)(void (*)(void))split_line, METH_FASTCALL, split_line_doc},
    {"mpub_bodies", (PyCFunction)(void (*)(void))mpub_bodies, METH_FASTCALL, mpub_bodies_doc},
    {"pub_body", (PyCFunction)(void (*)(void))pub_body, METH_FASTCALL, pub_body_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "txnsq.protocol._v2",
    "The compiled kernels of txnsq.protocol.v2's command parser.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__v2(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "MAX_LINE_LENGTH", MAX_LINE_LENGTH) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
