/* walgate.wire._record_check: check_records of walgate/wire/record_batch.py in C.
 *
 * The same walk as the pure-Python check_records, read for read: every byte read is bounds-checked against the end
 * of the batch (where Python's indexing raises IndexError, this reports "overrun"), varints are decoded as
 * record_batch._varint decodes them (at most 10 bytes, zig-zag, 64-bit), and every failure returns the message the
 * Python code raises. It returns None for a valid batch and the message (str) otherwise; record_batch.check_records
 * raises InvalidRecord with it. tests/wire/test_record_check.py checks both give the same answer for every input it
 * tries. Header keys that are not ASCII are checked as UTF-8 by Python's own strict decoder.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define HEADER_SIZE 61
#define CODEC_MASK 0x07

enum { OK = 0, OVERRUN = 1, TOO_LONG = 2 };

/* The zig-zag varint at *pos (advanced past it) into *out; TOO_LONG with *pos after its 10th byte. */
static int varint(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end)
            return OVERRUN;
        uint8_t b = buf[p++];
        if (shift < 64)
            raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return OK;
        }
        shift += 7;
        if (shift > 63) {
            *pos = p;
            return TOO_LONG;
        }
    }
}

/* The message of a failed read (NULL: OK). */
#define READ(var)                                                                                                   \
    do {                                                                                                            \
        int rc_ = varint(buf, end, &pos, &(var));                                                                   \
        if (rc_ == OVERRUN)                                                                                         \
            goto overrun;                                                                                           \
        if (rc_ == TOO_LONG)                                                                                        \
            return PyUnicode_FromFormat("varint longer than 10 bytes at byte %zd", pos);                           \
    } while (0)

static PyObject *check(const uint8_t *buf, Py_ssize_t end, int sequential)
{
    if (end < HEADER_SIZE)
        return PyUnicode_FromFormat("record batch of %zd bytes is shorter than its header", end);
    if (buf[22] & CODEC_MASK)
        return PyUnicode_FromString("check_records reads uncompressed batches");
    int32_t count = (int32_t)(((uint32_t)buf[57] << 24) | ((uint32_t)buf[58] << 16) | ((uint32_t)buf[59] << 8) |
                              (uint32_t)buf[60]);
    Py_ssize_t pos = HEADER_SIZE;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, offset_delta, n;
        READ(length);
        if (length < 6 || length > end - pos)
            return PyUnicode_FromFormat("record of %lld bytes at byte %zd overruns its batch", (long long)length,
                                        pos);
        Py_ssize_t stop = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        Py_ssize_t start = pos; /* the timestamp delta: skipped */
        for (;;) {
            if (pos >= end)
                goto overrun;
            if (buf[pos++] < 0x80)
                break;
        }
        if (pos - start > 10)
            return PyUnicode_FromFormat("varint longer than 10 bytes at byte %zd", start);
        READ(offset_delta);
        if (sequential && offset_delta != i)
            return PyUnicode_FromString("record offset deltas must be 0, 1, 2, ...");
        READ(n); /* key */
        if (n > 0) {
            if (n >= end - pos)
                goto overrun; /* the next read is at or past the end */
            pos += (Py_ssize_t)n;
        }
        READ(n); /* value */
        if (n > 0) {
            if (n >= end - pos)
                goto overrun;
            pos += (Py_ssize_t)n;
        }
        if (pos >= end)
            goto overrun;
        if (buf[pos] == 0) {
            pos += 1;
        } else {
            int64_t headers;
            READ(headers);
            /* 2 * headers > stop - pos, without overflow */
            if (headers < 0 || stop - pos < 0 || headers > (stop - pos) / 2)
                return PyUnicode_FromFormat("record header count %lld", (long long)headers);
            for (int64_t h = 0; h < headers; h++) {
                READ(n);
                if (n < 0 || n > stop - pos)
                    return PyUnicode_FromFormat("record header key length %lld", (long long)n);
                for (Py_ssize_t k = pos; k < pos + n; k++) {
                    if (buf[k] >= 0x80) {
                        PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + pos, (Py_ssize_t)n, "strict");
                        if (key == NULL) {
                            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                                return NULL;
                            PyErr_Clear();
                            return PyUnicode_FromString("record header key is not UTF-8");
                        }
                        Py_DECREF(key);
                        break;
                    }
                }
                pos += (Py_ssize_t)n;
                READ(n);
                if (n >= 0) {
                    if (n > stop - pos)
                        return PyUnicode_FromFormat("record header value of %lld bytes overruns its record",
                                                    (long long)n);
                    pos += (Py_ssize_t)n;
                }
            }
        }
        if (pos != stop)
            return PyUnicode_FromFormat("record ends at byte %zd, its length says %zd", pos, stop);
    }
    if (pos != end)
        return PyUnicode_FromFormat("%zd bytes left after %d records", end - pos, (int)count);
    Py_RETURN_NONE;
overrun:
    return PyUnicode_FromFormat("%d records overrun byte %zd of their batch", (int)count, end);
}

static PyObject *check_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check_records(batch, sequential) takes 2 arguments");
        return NULL;
    }
    int sequential = PyObject_IsTrue(args[1]);
    if (sequential < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = check((const uint8_t *)view.buf, view.len, sequential);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_FASTCALL,
     "check_records(batch, sequential) -> None, or why the records of the uncompressed RecordBatch v2 *batch* are "
     "invalid (see walgate.wire.record_batch.check_records)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "walgate.wire._record_check",
    "check_records of walgate.wire.record_batch in C (see _record_check.c).", 0, methods,
};

PyMODINIT_FUNC PyInit__record_check(void)
{
    return PyModule_Create(&module);
}
