/*
 * The compiled encoders of txnsq.protocol.message: the payload of every
 * message published (encode_message) and of every delivery
 * (with_attempts), one allocation and two copies each, and the frame
 * that carries a delivery to its consumer (message_frame).
 *
 * Only the common case is handled here: an int timestamp and attempts in
 * range, a bytes id of 16 bytes, a bytes body.  Anything else is handed to
 * the pure-Python function (message.pure_encode_message,
 * message.pure_with_attempts), which returns the same result or raises
 * the error the pure module raises, with its text, so there is one source
 * for both.  tests/test_protocol_message_speedups.py compares the two byte
 * for byte.  PyPy runs the pure Python.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MESSAGE_ID_LENGTH 16
#define PREFIX_LENGTH 10 /* int64 timestamp, uint16 attempts */

static PyObject *
call_pure(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *module, *function, *result;
    module = PyImport_ImportModule("txnsq.protocol.message");
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

static inline void
write_prefix(char *out, long long timestamp, unsigned int attempts)
{
    uint64_t t = (uint64_t)timestamp;
    int i;
    for (i = 7; i >= 0; i--) {
        out[i] = (char)(t & 0xff);
        t >>= 8;
    }
    out[8] = (char)((attempts >> 8) & 0xff);
    out[9] = (char)(attempts & 0xff);
}

PyDoc_STRVAR(encode_message_doc,
"encode_message(timestamp_ns, attempts, msg_id, body) -> bytes\n\n"
"The payload for one message: as message.pure_encode_message.");

static PyObject *
encode_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long timestamp;
    long attempts;
    int overflow = 0;
    PyObject *msg_id, *body, *result;
    Py_ssize_t body_size;
    char *out;

    if (nargs != 4 || !PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1])
        || !PyBytes_CheckExact(args[2]) || !PyBytes_CheckExact(args[3])
        || PyBytes_GET_SIZE(args[2]) != MESSAGE_ID_LENGTH) {
        return call_pure("pure_encode_message", args, nargs);
    }
    timestamp = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (overflow) {
        return call_pure("pure_encode_message", args, nargs);
    }
    attempts = PyLong_AsLongAndOverflow(args[1], &overflow);
    if (overflow || attempts < 0 || attempts > 0xffff) {
        return call_pure("pure_encode_message", args, nargs);
    }
    msg_id = args[2];
    body = args[3];
    body_size = PyBytes_GET_SIZE(body);
    result = PyBytes_FromStringAndSize(NULL, PREFIX_LENGTH + MESSAGE_ID_LENGTH + body_size);
    if (result == NULL) {
        return NULL;
    }
    out = PyBytes_AS_STRING(result);
    write_prefix(out, timestamp, (unsigned int)attempts);
    memcpy(out + PREFIX_LENGTH, PyBytes_AS_STRING(msg_id), MESSAGE_ID_LENGTH);
    memcpy(out + PREFIX_LENGTH + MESSAGE_ID_LENGTH, PyBytes_AS_STRING(body), (size_t)body_size);
    return result;
}

PyDoc_STRVAR(with_attempts_doc,
"with_attempts(data, attempts) -> bytes\n\n"
"A copy of the payload with its attempts counter set: as\n"
"message.pure_with_attempts.");

static PyObject *
with_attempts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long attempts;
    int overflow = 0;
    Py_ssize_t size;
    PyObject *result;
    char *out;

    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1])
        || PyBytes_GET_SIZE(args[0]) < PREFIX_LENGTH) {
        return call_pure("pure_with_attempts", args, nargs);
    }
    attempts = PyLong_AsLongAndOverflow(args[1], &overflow);
    if (overflow || attempts < 0 || attempts > 0xffff) {
        return call_pure("pure_with_attempts", args, nargs);
    }
    size = PyBytes_GET_SIZE(args[0]);
    result = PyBytes_FromStringAndSize(PyBytes_AS_STRING(args[0]), size);
    if (result == NULL) {
        return NULL;
    }
    out = PyBytes_AS_STRING(result);
    out[8] = (char)((attempts >> 8) & 0xff);
    out[9] = (char)(attempts & 0xff);
    return result;
}

PyDoc_STRVAR(message_frame_doc,
"message_frame(data) -> bytes\n\n"
"The V2 message frame of a payload, header and payload in one bytes:\n"
"as message.pure_message_frame.");

static PyObject *
message_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t size;
    uint32_t frame_size;
    PyObject *result;
    unsigned char *out;

    if (nargs != 1 || !PyBytes_CheckExact(args[0])
        || PyBytes_GET_SIZE(args[0]) > (Py_ssize_t)INT32_MAX - 4) {
        return call_pure("pure_message_frame", args, nargs);
    }
    size = PyBytes_GET_SIZE(args[0]);
    result = PyBytes_FromStringAndSize(NULL, size + 8);
    if (result == NULL) {
        return NULL;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    frame_size = (uint32_t)size + 4;
    out[0] = (unsigned char)(frame_size >> 24);
    out[1] = (unsigned char)(frame_size >> 16);
    out[2] = (unsigned char)(frame_size >> 8);
    out[3] = (unsigned char)frame_size;
    out[4] = 0;
    out[5] = 0;
    out[6] = 0;
    out[7] = 2; /* FRAME_TYPE_MESSAGE */
    memcpy(out + 8, PyBytes_AS_STRING(args[0]), (size_t)size);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_message", (PyCFunction)(void (*)(void))encode_message, METH_FASTCALL, encode_message_doc},
    {"with_attempts", (PyCFunction)(void (*)(void))with_attempts, METH_FASTCALL, with_attempts_doc},
    {"message_frame", (PyCFunction)(void (*)(void))message_frame, METH_FASTCALL, message_frame_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "txnsq.protocol._message",
    "The compiled encoders of txnsq.protocol.message.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__message(void)
{
    return PyModule_Create(&module_def);
}
