/*
 * The compiled speed-up of txnsq.storage.log_format: encode_batch, the
 * bytes of a run of retained-log records, which is most of what a publish
 * to a retained topic costs on CPython.
 *
 * Each record is MetaQ's wire layout: int32 data length, int32 checksum
 * (CRC32(data) & 0x7fffffff), 8-byte message id, int32 flag, data; all
 * big-endian.  The pure-Python encode_batch in log_format.py is the
 * reference: this one returns the same bytes and raises the same errors
 * (tests/test_storage_log_format_speedups.py feeds both the same records).
 * frame_records and check_records walk records and check their checksums
 * (a Spark read's framing; every read of the log before it is served),
 * against pure_frame_records and pure_check_records.
 * PyPy runs the pure Python.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 20

/*
 * CRC-32 (IEEE 802.3, zlib's), slicing by 8: zlib's own crc32 spends about
 * 2 ns a byte on 100-byte records, eight table lookups per 8 bytes about
 * a third of that.  The tables are made at import.
 */
static uint32_t crc_table[8][256];

static void
make_crc_tables(void)
{
    uint32_t n, k, c;
    for (n = 0; n < 256; n++) {
        c = n;
        for (k = 0; k < 8; k++) {
            c = c & 1 ? 0xedb88320UL ^ (c >> 1) : c >> 1;
        }
        crc_table[0][n] = c;
    }
    for (n = 0; n < 256; n++) {
        c = crc_table[0][n];
        for (k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
}

static uint32_t
crc32_ieee(const unsigned char *buf, Py_ssize_t length)
{
    uint32_t crc = 0xffffffffUL;
    while (length && ((uintptr_t)buf & 7)) {
        crc = crc_table[0][(crc ^ *buf++) & 0xff] ^ (crc >> 8);
        length--;
    }
    while (length >= 8) {
        uint32_t one, two;
        memcpy(&one, buf, 4);
        memcpy(&two, buf + 4, 4);
#if defined(WORDS_BIGENDIAN)
        one = __builtin_bswap32(one);
        two = __builtin_bswap32(two);
#endif
        one ^= crc;
        crc = crc_table[7][one & 0xff] ^ crc_table[6][(one >> 8) & 0xff]
            ^ crc_table[5][(one >> 16) & 0xff] ^ crc_table[4][one >> 24]
            ^ crc_table[3][two & 0xff] ^ crc_table[2][(two >> 8) & 0xff]
            ^ crc_table[1][(two >> 16) & 0xff] ^ crc_table[0][two >> 24];
        buf += 8;
        length -= 8;
    }
    while (length--) {
        crc = crc_table[0][(crc ^ *buf++) & 0xff] ^ (crc >> 8);
    }
    return crc ^ 0xffffffffUL;
}

/* struct.error, raised for a message id that is not 8 bytes, as
 * struct.pack does in the pure module. */
static PyObject *struct_error = NULL;

static void
put_be32(unsigned char *out, uint32_t value)
{
    out[0] = (unsigned char)(value >> 24);
    out[1] = (unsigned char)(value >> 16);
    out[2] = (unsigned char)(value >> 8);
    out[3] = (unsigned char)value;
}

/* One record's parts, borrowed from the caller's objects for the call. */
typedef struct {
    Py_buffer id;
    Py_buffer data;
    int32_t flag;
} part_t;

static void
release_parts(part_t *parts, Py_ssize_t count)
{
    Py_ssize_t i;
    for (i = 0; i < count; i++) {
        PyBuffer_Release(&parts[i].id);
        PyBuffer_Release(&parts[i].data);
    }
}

/* Read one (msg_id, flag, data) item into part; -1 with an exception set. */
static int
read_part(PyObject *item, part_t *part)
{
    PyObject *fast, *flag_obj;
    long flag;

    fast = PySequence_Fast(item, "a record is (msg_id, flag, data)");
    if (fast == NULL) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        PyErr_Format(PyExc_ValueError, "a record is (msg_id, flag, data), not %zd items",
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    flag_obj = PySequence_Fast_GET_ITEM(fast, 1);
    flag = PyLong_AsLong(flag_obj);
    if (flag == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(struct_error, "required argument is not an integer");
        }
        Py_DECREF(fast);
        return -1;
    }
    if (flag < INT32_MIN || flag > INT32_MAX) {
        PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        Py_DECREF(fast);
        return -1;
    }
    part->flag = (int32_t)flag;
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, 0), &part->id, PyBUF_SIMPLE) < 0) {
        Py_DECREF(fast);
        return -1;
    }
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, 2), &part->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&part->id);
        Py_DECREF(fast);
        return -1;
    }
    Py_DECREF(fast);
    return 0;
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(records) -> bytes\n\n"
"The bytes of records (msg_id, flag, data) back to back, each in MetaQ's\n"
"wire layout; raises struct.error when a message id is not 8 bytes.");

static PyObject *
encode_batch(PyObject *module, PyObject *records)
{
    PyObject *fast, *result = NULL;
    Py_ssize_t count, i, done = 0;
    Py_ssize_t total = 0;
    part_t *parts = NULL;
    unsigned char *out;

    fast = PySequence_Fast(records, "records must be a sequence");
    if (fast == NULL) {
        return NULL;
    }
    count = PySequence_Fast_GET_SIZE(fast);
    if (count == 0) {
        Py_DECREF(fast);
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    parts = PyMem_Malloc(sizeof(part_t) * (size_t)count);
    if (parts == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (i = 0; i < count; i++) {
        if (read_part(PySequence_Fast_GET_ITEM(fast, i), &parts[i]) < 0) {
            goto done;
        }
        done = i + 1;
        if (parts[i].data.len > INT32_MAX) {
            PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
            goto done;
        }
        total += HEADER_SIZE + parts[i].data.len;
    }
    /* As the pure module: every record is checked before any error about
     * an id, and the first wrong id is the one named. */
    for (i = 0; i < count; i++) {
        if (parts[i].id.len != 8) {
            PyErr_Format(struct_error, "a message id is 8 bytes, not %zd", parts[i].id.len);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    for (i = 0; i < count; i++) {
        const unsigned char *data = (const unsigned char *)parts[i].data.buf;
        Py_ssize_t length = parts[i].data.len;
        uint32_t crc = crc32_ieee(data, length);
        put_be32(out, (uint32_t)length);
        put_be32(out + 4, crc & 0x7fffffffUL);
        memcpy(out + 8, parts[i].id.buf, 8);
        put_be32(out + 16, (uint32_t)parts[i].flag);
        if (length) {
            memcpy(out + HEADER_SIZE, data, (size_t)length);
        }
        out += HEADER_SIZE + length;
    }

done:
    release_parts(parts, done);
    PyMem_Free(parts);
    Py_DECREF(fast);
    return result;
}

PyDoc_STRVAR(encode_id_batch_doc,
"encode_id_batch(ids, flag, bodies) -> bytes\n\n"
"encode_batch of records (the 8 bytes of ids[i], flag, bodies[i]): ids are\n"
"the NSQ message ids as integers below 2**64, big-endian in the record.");

static PyObject *
encode_id_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *ids, *bodies, *result = NULL;
    Py_ssize_t count, i, done = 0, total = 0;
    Py_buffer *views = NULL;
    unsigned long long *values = NULL;
    long flag;
    unsigned char *out;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_id_batch(ids, flag, bodies) takes 3 arguments");
        return NULL;
    }
    flag = PyLong_AsLong(args[1]);
    if (flag == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (flag < INT32_MIN || flag > INT32_MAX) {
        PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
        return NULL;
    }
    ids = PySequence_Fast(args[0], "ids must be a sequence");
    if (ids == NULL) {
        return NULL;
    }
    bodies = PySequence_Fast(args[2], "bodies must be a sequence");
    if (bodies == NULL) {
        Py_DECREF(ids);
        return NULL;
    }
    count = PySequence_Fast_GET_SIZE(bodies);
    if (PySequence_Fast_GET_SIZE(ids) != count) {
        PyErr_SetString(PyExc_ValueError, "as many ids as bodies are needed");
        goto done;
    }
    views = PyMem_Malloc(sizeof(Py_buffer) * (size_t)(count ? count : 1));
    values = PyMem_Malloc(sizeof(unsigned long long) * (size_t)(count ? count : 1));
    if (views == NULL || values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < count; i++) {
        values[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(ids, i));
        if (values[i] == (unsigned long long)-1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(struct_error, "a message id is below 2**64");
            }
            goto done;
        }
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(bodies, i), &views[i], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        done = i + 1;
        if (views[i].len > INT32_MAX) {
            PyErr_SetString(struct_error, "'i' format requires -2147483648 <= number <= 2147483647");
            goto done;
        }
        total += HEADER_SIZE + views[i].len;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    for (i = 0; i < count; i++) {
        const unsigned char *data = (const unsigned char *)views[i].buf;
        Py_ssize_t length = views[i].len;
        unsigned long long id = values[i];
        put_be32(out, (uint32_t)length);
        put_be32(out + 4, crc32_ieee(data, length) & 0x7fffffffUL);
        put_be32(out + 8, (uint32_t)(id >> 32));
        put_be32(out + 12, (uint32_t)id);
        put_be32(out + 16, (uint32_t)flag);
        if (length) {
            memcpy(out + HEADER_SIZE, data, (size_t)length);
        }
        out += HEADER_SIZE + length;
    }

done:
    for (i = 0; i < done; i++) {
        PyBuffer_Release(&views[i]);
    }
    PyMem_Free(views);
    PyMem_Free(values);
    Py_DECREF(ids);
    Py_DECREF(bodies);
    return result;
}

static uint32_t
get_be32(const unsigned char *in)
{
    return ((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) | (uint32_t)in[3];
}

PyDoc_STRVAR(frame_records_doc,
"frame_records(data) -> (starts, lengths, error)\n\n"
"The start and data length of each record of data (records back to back\n"
"from its first byte) as native int64 arrays' bytes, each record checked\n"
"whole and its checksum right; error is None, or (position, problem) for\n"
"the first bad record, starts and lengths then empty.  The GIL is released\n"
"while the records are walked.");

static PyObject *
frame_records(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    const unsigned char *buf;
    Py_ssize_t end, pos = 0, count = 0, cap;
    int64_t *starts = NULL, *lengths = NULL;
    int problem = 0;
    int32_t bad_length = 0;
    PyObject *result = NULL;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    buf = (const unsigned char *)view.buf;
    end = view.len;
    cap = end / HEADER_SIZE + 1;
    starts = PyMem_Malloc(sizeof(int64_t) * (size_t)cap);
    lengths = PyMem_Malloc(sizeof(int64_t) * (size_t)cap);
    if (starts == NULL || lengths == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        int32_t length;
        uint32_t check;
        if (end - pos < HEADER_SIZE) {
            problem = 1;
            break;
        }
        length = (int32_t)get_be32(buf + pos);
        check = get_be32(buf + pos + 4);
        if (length < 0 || (Py_ssize_t)length > end - pos - HEADER_SIZE) {
            problem = 2;
            bad_length = length;
            break;
        }
        if ((crc32_ieee(buf + pos + HEADER_SIZE, length) & 0x7fffffffUL) != check) {
            problem = 3;
            break;
        }
        starts[count] = (int64_t)pos;
        lengths[count] = (int64_t)length;
        count++;
        pos += HEADER_SIZE + length;
    }
    Py_END_ALLOW_THREADS
    if (problem == 1) {
        result = Py_BuildValue("(y#y#(ns))", "", (Py_ssize_t)0, "", (Py_ssize_t)0, pos,
                               "record header cut short");
    }
    else if (problem == 2) {
        PyObject *text = PyUnicode_FromFormat("record cut short (data length %d)", (int)bad_length);
        if (text != NULL) {
            result = Py_BuildValue("(y#y#(nN))", "", (Py_ssize_t)0, "", (Py_ssize_t)0, pos, text);
        }
    }
    else if (problem == 3) {
        result = Py_BuildValue("(y#y#(ns))", "", (Py_ssize_t)0, "", (Py_ssize_t)0, pos,
                               "checksum mismatch");
    }
    else {
        result = Py_BuildValue("(y#y#O)", (const char *)starts, count * (Py_ssize_t)sizeof(int64_t),
                               (const char *)lengths, count * (Py_ssize_t)sizeof(int64_t), Py_None);
    }

done:
    PyMem_Free(starts);
    PyMem_Free(lengths);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(check_records_doc,
"check_records(data, start, end) -> (pos, problem)\n\n"
"Walk the records of data[start:end] (records back to back from start),\n"
"each checked whole and its checksum right: pos is where the good records\n"
"end (end when all are), problem None or what is wrong with the record at\n"
"pos.  start and end are clamped to the data.  The GIL is released while\n"
"the records are walked.");

static PyObject *
check_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    const unsigned char *buf;
    Py_ssize_t start, end, pos;
    int problem = 0;
    int32_t bad_length = 0;
    PyObject *result = NULL;

    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "check_records(data, start, end) takes 3 arguments");
        return NULL;
    }
    start = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    end = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if (end == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    buf = (const unsigned char *)view.buf;
    /* As a slice data[start:end] would (without negative indexes). */
    if (end > view.len) {
        end = view.len;
    }
    if (start < 0) {
        start = 0;
    }
    pos = start;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        int32_t length;
        uint32_t check;
        if (end - pos < HEADER_SIZE) {
            problem = 1;
            break;
        }
        length = (int32_t)get_be32(buf + pos);
        check = get_be32(buf + pos + 4);
        if (length < 0 || (Py_ssize_t)length > end - pos - HEADER_SIZE) {
            problem = 2;
            bad_length = length;
            break;
        }
        if ((crc32_ieee(buf + pos + HEADER_SIZE, length) & 0x7fffffffUL) != check) {
            problem = 3;
            break;
        }
        pos += HEADER_SIZE + length;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (problem == 1) {
        result = Py_BuildValue("(ns)", pos, "record header cut short");
    }
    else if (problem == 2) {
        PyObject *text = PyUnicode_FromFormat("record cut short (data length %d)", (int)bad_length);
        if (text != NULL) {
            result = Py_BuildValue("(nN)", pos, text);
        }
    }
    else if (problem == 3) {
        result = Py_BuildValue("(ns)", pos, "checksum mismatch");
    }
    else {
        result = Py_BuildValue("(nO)", pos, Py_None);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"encode_batch", (PyCFunction)encode_batch, METH_O, encode_batch_doc},
    {"frame_records", (PyCFunction)frame_records, METH_O, frame_records_doc},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL, check_records_doc},
    {"encode_id_batch", (PyCFunction)(void (*)(void))encode_id_batch, METH_FASTCALL,
     encode_id_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "txnsq.storage._log_format",
    "The compiled speed-up of txnsq.storage.log_format (CPython only).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit__log_format(void)
{
    PyObject *module, *struct_module;

    make_crc_tables();
    struct_module = PyImport_ImportModule("struct");
    if (struct_module == NULL) {
        return NULL;
    }
    struct_error = PyObject_GetAttrString(struct_module, "error");
    Py_DECREF(struct_module);
    if (struct_error == NULL) {
        return NULL;
    }
    module = PyModule_Create(&module_def);
    return module;
}
