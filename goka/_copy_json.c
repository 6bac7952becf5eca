/*
 * copy_json: one row of PostgreSQL's `COPY ... TO STDOUT` (text format, one CopyData message)
 * as the compact JSON object goka.codec.JsonCodec would write for the row's dict, and its record
 * key, without building the dict (a snapshot of a table gives millions of rows; see
 * goka/connect/postgres_snapshot_rows.py, whose pure-Python path is the reference).
 *
 * Built into goka._speedups (its module init lists copy_json among its functions).
 *
 * copy_json(prefixes, kinds, key, message) -> (key bytes, JSON bytes) | None (the message last:
 * functools.partial binds the others)
 *   prefixes  a tuple of bytes, one per column: what goes before its value ('{"id":', ',"n":');
 *   kinds     bytes, one per column: 't' text (a JSON string), 'i' an integer (its digits), 'b' a
 *             boolean (t or f);
 *   key       the index of the key column;
 *   message   one row ending in a newline (bytes or any buffer).
 * None where the row is not one that is done here: a message that is not exactly one line, a
 * column count other than the prefixes', an integer or boolean that is not one, an escape COPY
 * does not write, bytes that are not UTF-8, a NULL key. The caller then reads the row itself.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* the UTF-8 of data[0:len] is valid (as Python's strict decoder sees it) */
static int
valid_utf8(const unsigned char *data, Py_ssize_t len)
{
    Py_ssize_t i = 0;
    while (i < len) {
        unsigned char c = data[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t need;
        unsigned char low = 0x80, high = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) {
                low = 0xA0; /* no overlong forms */
            } else if (c == 0xED) {
                high = 0x9F; /* no surrogates */
            }
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) {
                low = 0x90;
            } else if (c == 0xF4) {
                high = 0x8F; /* nothing past U+10FFFF */
            }
        } else {
            return 0;
        }
        if (i + need >= len) {
            return 0;
        }
        if (data[i + 1] < low || data[i + 1] > high) {
            return 0;
        }
        for (Py_ssize_t k = 2; k <= need; k++) {
            if (data[i + k] < 0x80 || data[i + k] > 0xBF) {
                return 0;
            }
        }
        i += need + 1;
    }
    return 1;
}

/* what COPY's backslash and letter stand for (-1: an escape COPY does not write) */
static int
unescaped(unsigned char letter)
{
    switch (letter) {
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'v':
        return '\v';
    case 'x':
    case 'N':
        return -1; /* (a hex escape, or \N inside a value) */
    default:
        return (letter >= '0' && letter <= '7') ? -1 : letter;
    }
}

/* c as Python's json writes it inside a string (ensure_ascii=False) */
static char *
json_char(char *w, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    switch (c) {
    case '"':
        *w++ = '\\';
        *w++ = '"';
        return w;
    case '\\':
        *w++ = '\\';
        *w++ = '\\';
        return w;
    case '\n':
        *w++ = '\\';
        *w++ = 'n';
        return w;
    case '\r':
        *w++ = '\\';
        *w++ = 'r';
        return w;
    case '\t':
        *w++ = '\\';
        *w++ = 't';
        return w;
    case '\b':
        *w++ = '\\';
        *w++ = 'b';
        return w;
    case '\f':
        *w++ = '\\';
        *w++ = 'f';
        return w;
    default:
        if (c < 0x20) {
            memcpy(w, "\\u00", 4);
            w[4] = hex[c >> 4];
            w[5] = hex[c & 15];
            return w + 6;
        }
        *w++ = (char)c;
        return w;
    }
}

PyObject *
speedups_copy_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "copy_json(prefixes: tuple[bytes], kinds: bytes, key: int, message)");
        return NULL;
    }
    PyObject *prefixes = args[0];
    const char *kinds = PyBytes_AS_STRING(args[1]);
    Py_ssize_t columns = PyTuple_GET_SIZE(prefixes);
    Py_ssize_t key = PyLong_AsSsize_t(args[2]);
    if (key == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (columns == 0 || PyBytes_GET_SIZE(args[1]) != columns || key < 0 || key >= columns) {
        PyErr_SetString(PyExc_ValueError, "copy_json: one kind per prefix, and a key among them");
        return NULL;
    }
    Py_ssize_t fixed = 1;
    for (Py_ssize_t i = 0; i < columns; i++) {
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, i);
        if (!PyBytes_CheckExact(prefix)) {
            PyErr_SetString(PyExc_TypeError, "copy_json: prefixes are bytes");
            return NULL;
        }
        fixed += PyBytes_GET_SIZE(prefix) + 5; /* (and up to "false" for one byte) */
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[3], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *line = view.buf;
    Py_ssize_t length = view.len - 1;
    PyObject *value = NULL, *record_key = NULL, *result = NULL;
    if (length < 0 || line[length] != '\n' || memchr(line, '\n', length) != NULL ||
        !valid_utf8(line, length)) {
        goto none;
    }
    value = PyBytes_FromStringAndSize(NULL, fixed + 6 * length);
    if (value == NULL) {
        goto done;
    }
    char *w = PyBytes_AS_STRING(value);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < columns; i++) {
        const unsigned char *tab = memchr(line + at, '\t', length - at);
        Py_ssize_t end = tab == NULL ? length : tab - line;
        if ((tab == NULL) != (i == columns - 1)) {
            goto none; /* (more or fewer columns) */
        }
        PyObject *prefix = PyTuple_GET_ITEM(prefixes, i);
        memcpy(w, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix));
        w += PyBytes_GET_SIZE(prefix);
        const unsigned char *field = line + at;
        Py_ssize_t size = end - at;
        if (size == 2 && field[0] == '\\' && field[1] == 'N') {
            if (i == key) {
                goto none;
            }
            memcpy(w, "null", 4);
            w += 4;
        } else if (kinds[i] == 'i') {
            Py_ssize_t k = size > 0 && field[0] == '-';
            if (k == size) {
                goto none;
            }
            for (; k < size; k++) {
                if (field[k] < '0' || field[k] > '9') {
                    goto none;
                }
            }
            memcpy(w, field, size);
            w += size;
            if (i == key && (record_key = PyBytes_FromStringAndSize((const char *)field,
                                                                     size)) == NULL) {
                goto done;
            }
        } else if (kinds[i] == 'b') {
            if (size != 1 || (field[0] != 't' && field[0] != 'f') || i == key) {
                goto none;
            }
            memcpy(w, field[0] == 't' ? "true" : "false", field[0] == 't' ? 4 : 5);
            w += field[0] == 't' ? 4 : 5;
        } else {
            *w++ = '"';
            int escaped = memchr(field, '\\', size) != NULL;
            char *text = NULL;
            if (i == key) {
                record_key = PyBytes_FromStringAndSize(escaped ? NULL : (const char *)field,
                                                       size);
                if (record_key == NULL) {
                    goto done;
                }
                text = escaped ? PyBytes_AS_STRING(record_key) : NULL;
            }
            for (Py_ssize_t k = 0; k < size; k++) {
                int c = field[k];
                if (c == '\\') {
                    if (++k == size || (c = unescaped(field[k])) < 0) {
                        goto none;
                    }
                }
                w = json_char(w, (unsigned char)c);
                if (text != NULL) {
                    *text++ = (char)c;
                }
            }
            if (text != NULL && _PyBytes_Resize(&record_key,
                                                text - PyBytes_AS_STRING(record_key)) < 0) {
                goto done;
            }
            *w++ = '"';
        }
        at = end + 1;
    }
    *w++ = '}';
    if (_PyBytes_Resize(&value, w - PyBytes_AS_STRING(value)) < 0) {
        goto done;
    }
    result = PyTuple_Pack(2, record_key, value);
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(value);
    Py_XDECREF(record_key);
    PyBuffer_Release(&view);
    return result;
}
