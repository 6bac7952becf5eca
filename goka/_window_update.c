/* The C fast path of goka/time/window_update.py: a record aggregating into windows of a table of
 * fixed windows that its engine keeps in memory (a dense stream: nearly every update).
 *
 * WindowUpdater.update(key, windows, change, source) does what the Python updater does, for
 * each (start, end) of windows: the window's row key is key + "@start-end" (made once per key
 * and window in a call, with the key of its row in the batch's changes), a window kept in memory has its value decoded, changed by change(), encoded and
 * swapped into the batch's changes and the cache (each change journalled when a journal is
 * kept, so a failed record is undone), and its changelog row is an effect (or, with whole
 * commits, the window is marked changed by source). A window not kept, or kept as absent, goes
 * the Python way (general(row, end, change, source)), as does every codec error: an Int64Codec
 * reads and writes plain decimal digits here and leaves anything else to its Python methods.
 *
 * Built into goka._speedups (its module init calls window_update_ready/window_update_add). The
 * Python updater is the reference; tests/unit/test_window_update.py runs both on the same
 * records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *parts;    /* {end: (suffix, close, {key: (row, "w" + row)})} (window_part) */
    PyObject *suffix;   /* suffix(start, end) -> str (goka.time.rows' composite part) */
    PyObject *grace;    /* int */
    PyObject *by_close; /* {close: {row: bytes | None}}: the windows kept (the cache's dict) */
    PyObject *changes;  /* the batch's changes of the window table: {"w" + row: bytes} */
    PyObject *journal;  /* list or None */
    PyObject *decode;
    PyObject *encode;
    int int64;          /* the codec is an Int64Codec: plain digits read and written here */
    PyObject *general;  /* general(row, end, change, source): any other window */
    PyObject *effects;  /* list */
    PyObject *kind;     /* the WINDOW effect kind */
    PyObject *topic;
    PyObject *sources;  /* dict (whole commits: the last record that changed each row) or None */
    PyObject *absent;   /* goka.time.overlay.ABSENT */
} WindowUpdaterObject;

static PyObject *str_w; /* "w" */

/* Int64Codec.decode of plain digits (fewer than 19: in range); NULL without an error set:
 * not such digits (the Python method decides). */
static PyObject *
decode_digits(PyObject *raw)
{
    if (!PyBytes_CheckExact(raw)) {
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    const char *s = PyBytes_AS_STRING(raw);
    if (n < 1 || n > 18) {
        return NULL;
    }
    long long value = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return NULL;
        }
        value = value * 10 + (s[i] - '0');
    }
    return PyLong_FromLongLong(value);
}

/* Int64Codec.encode of an int in range; NULL without an error set: anything else. */
static PyObject *
encode_int(PyObject *value)
{
    if (!PyLong_CheckExact(value)) {
        return NULL;
    }
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return NULL;
    }
    char text[24], *end = text + sizeof(text), *p = end;
    unsigned long long u = n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (n < 0) {
        *--p = '-';
    }
    return PyBytes_FromStringAndSize(p, end - p);
}

static PyObject *
coded(WindowUpdaterObject *self, PyObject *codec, PyObject *value, int decoding)
{
    if (self->int64) {
        PyObject *done = decoding ? decode_digits(value) : encode_int(value);
        if (done != NULL || PyErr_Occurred()) {
            return done;
        }
    }
    return PyObject_CallOneArg(codec, value);
}

/* journal.append((mapping, key, mapping.get(key, ABSENT))) */
static int
journal_entry(WindowUpdaterObject *self, PyObject *mapping, PyObject *key, PyObject *previous)
{
    if (previous == NULL) {
        previous = PyDict_GetItemWithError(mapping, key);
        if (previous == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            previous = self->absent;
        }
    }
    PyObject *entry = PyTuple_Pack(3, mapping, key, previous);
    if (entry == NULL) {
        return -1;
    }
    int failed = PyList_Append(self->journal, entry);
    Py_DECREF(entry);
    return failed;
}

/* (suffix, close, rows) of a window, made once per end (one size: its start is given by its
 * end); rows: {key: (row, "w" + row)}, its row keys made once per key */
static PyObject *
window_part(WindowUpdaterObject *self, PyObject *start, PyObject *end)
{
    PyObject *part = PyDict_GetItemWithError(self->parts, end);
    if (part != NULL || PyErr_Occurred()) {
        return part;
    }
    PyObject *suffix = PyObject_CallFunctionObjArgs(self->suffix, start, end, NULL);
    if (suffix != NULL && !PyUnicode_Check(suffix)) {
        PyErr_SetString(PyExc_TypeError, "a window's suffix must be str");
        Py_CLEAR(suffix);
    }
    PyObject *close = suffix == NULL ? NULL : PyNumber_Add(end, self->grace);
    PyObject *rows = close == NULL ? NULL : PyDict_New();
    part = rows == NULL ? NULL : PyTuple_Pack(3, suffix, close, rows);
    Py_XDECREF(suffix);
    Py_XDECREF(close);
    Py_XDECREF(rows);
    if (part == NULL) {
        return NULL;
    }
    int failed = PyDict_SetItem(self->parts, end, part);
    Py_DECREF(part); /* the dict keeps it */
    return failed < 0 ? NULL : part;
}

/* (row, "w" + row) of key's window (part: window_part's); borrowed */
static PyObject *
window_row(PyObject *part, PyObject *key)
{
    PyObject *rows = PyTuple_GET_ITEM(part, 2);
    PyObject *keys = PyDict_GetItemWithError(rows, key);
    if (keys != NULL || PyErr_Occurred()) {
        return keys;
    }
    PyObject *row = PyUnicode_Concat(key, PyTuple_GET_ITEM(part, 0));
    PyObject *at = row == NULL ? NULL : PyUnicode_Concat(str_w, row);
    keys = at == NULL ? NULL : PyTuple_Pack(2, row, at);
    Py_XDECREF(row);
    Py_XDECREF(at);
    if (keys == NULL) {
        return NULL;
    }
    int failed = PyDict_SetItem(rows, key, keys);
    Py_DECREF(keys); /* the dict keeps it */
    return failed < 0 ? NULL : keys;
}

/* one window of a record; 0 or -1 (an error set) */
static int
update_window(WindowUpdaterObject *self, PyObject *key, PyObject *window, PyObject *change,
              PyObject *source)
{
    if (!PyTuple_Check(window) || PyTuple_GET_SIZE(window) != 2) {
        PyErr_SetString(PyExc_TypeError, "windows are (start, end) pairs");
        return -1;
    }
    PyObject *start = PyTuple_GET_ITEM(window, 0), *end = PyTuple_GET_ITEM(window, 1);
    PyObject *part = window_part(self, start, end);
    PyObject *keys = part == NULL ? NULL : window_row(part, key);
    if (keys == NULL) {
        return -1;
    }
    Py_INCREF(keys); /* (its row and at, whatever a change does to the dicts) */
    PyObject *row = PyTuple_GET_ITEM(keys, 0), *at = PyTuple_GET_ITEM(keys, 1);
    PyObject *kept = PyDict_GetItemWithError(self->by_close, PyTuple_GET_ITEM(part, 1));
    PyObject *raw = NULL;
    if (kept != NULL && PyDict_CheckExact(kept)) {
        raw = PyDict_GetItemWithError(kept, row);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(keys);
        return -1;
    }
    if (raw == NULL || raw == Py_None) { /* not kept, or kept as absent: the general way */
        PyObject *done = PyObject_CallFunctionObjArgs(self->general, row, end, change, source,
                                                      NULL);
        Py_DECREF(keys);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    Py_INCREF(kept);
    Py_INCREF(raw);
    PyObject *data = NULL, *changed = NULL;
    PyObject *value = coded(self, self->decode, raw, 1);
    int failed = -1;
    if (value == NULL) {
        goto done;
    }
    changed = PyObject_CallOneArg(change, value);
    Py_DECREF(value);
    if (changed == NULL || (data = coded(self, self->encode, changed, 0)) == NULL) {
        goto done;
    }
    if (self->journal != Py_None && (journal_entry(self, self->changes, at, NULL) < 0 ||
                                     journal_entry(self, kept, row, raw) < 0)) {
        goto done;
    }
    if (PyDict_SetItem(self->changes, at, data) < 0 || PyDict_SetItem(kept, row, data) < 0) {
        goto done;
    }
    if (self->sources == Py_None) {
        PyObject *effect = PyTuple_Pack(6, self->kind, self->topic, row, data, Py_None, source);
        if (effect == NULL) {
            goto done;
        }
        failed = PyList_Append(self->effects, effect);
        Py_DECREF(effect);
        goto done;
    }
    if (self->journal != Py_None && journal_entry(self, self->sources, row, NULL) < 0) {
        goto done;
    }
    failed = PyDict_SetItem(self->sources, row, source);
done:
    Py_XDECREF(changed);
    Py_XDECREF(data);
    Py_DECREF(raw);
    Py_DECREF(kept);
    Py_DECREF(keys);
    return failed;
}

static PyObject *
updater_update(WindowUpdaterObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "update(key, windows, change, source)");
        return NULL;
    }
    PyObject *key = args[0], *change = args[2], *source = args[3];
    PyObject *windows = PySequence_Fast(args[1], "windows must be a sequence");
    if (windows == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(windows);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* (a change may hold the only other reference: keep the item alive) */
        PyObject *window = PySequence_Fast_GET_ITEM(windows, i);
        Py_INCREF(window);
        int failed = update_window(self, key, window, change, source);
        Py_DECREF(window);
        if (failed < 0) {
            Py_DECREF(windows);
            return NULL;
        }
    }
    Py_DECREF(windows);
    Py_RETURN_NONE;
}

#define UPDATER_FIELDS(X)                                                                      \
    X(parts) X(suffix) X(grace) X(by_close) X(changes) X(journal) X(decode) X(encode)          \
    X(general) X(effects) X(kind) X(topic) X(sources) X(absent)

static PyObject *
updater_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"suffix", "grace", "by_close", "changes", "journal", "decode",
                             "encode", "int64", "general", "effects", "kind", "topic",
                             "sources", "absent", NULL};
    PyObject *suffix, *grace, *by_close, *changes, *journal, *decode, *encode, *general,
        *effects, *kind, *topic, *sources, *absent;
    int int64;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!OOOpOO!OOOO:WindowUpdater", kwlist,
                                     &suffix, &grace, &PyDict_Type, &by_close, &PyDict_Type,
                                     &changes, &journal, &decode, &encode, &int64, &general,
                                     &PyList_Type, &effects, &kind, &topic, &sources,
                                     &absent)) {
        return NULL;
    }
    if ((journal != Py_None && !PyList_Check(journal)) ||
        (sources != Py_None && !PyDict_Check(sources))) {
        PyErr_SetString(PyExc_TypeError, "journal must be a list or None, sources a dict or None");
        return NULL;
    }
    WindowUpdaterObject *self = (WindowUpdaterObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->parts = PyDict_New();
    if (self->parts == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->suffix = Py_NewRef(suffix);
    self->grace = Py_NewRef(grace);
    self->by_close = Py_NewRef(by_close);
    self->changes = Py_NewRef(changes);
    self->journal = Py_NewRef(journal);
    self->decode = Py_NewRef(decode);
    self->encode = Py_NewRef(encode);
    self->general = Py_NewRef(general);
    self->effects = Py_NewRef(effects);
    self->kind = Py_NewRef(kind);
    self->topic = Py_NewRef(topic);
    self->sources = Py_NewRef(sources);
    self->absent = Py_NewRef(absent);
    self->int64 = int64;
    return (PyObject *)self;
}

static int
updater_traverse(WindowUpdaterObject *self, visitproc visit, void *arg)
{
#define VISIT(f) Py_VISIT(self->f);
    UPDATER_FIELDS(VISIT)
#undef VISIT
    return 0;
}

static int
updater_clear(WindowUpdaterObject *self)
{
#define CLEAR(f) Py_CLEAR(self->f);
    UPDATER_FIELDS(CLEAR)
#undef CLEAR
    return 0;
}

static void
updater_dealloc(WindowUpdaterObject *self)
{
    PyObject_GC_UnTrack(self);
    updater_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef updater_methods[] = {
    {"update", (PyCFunction)(void (*)(void))updater_update, METH_FASTCALL,
     "update(key, windows, change, source): set each window of key to change(its value)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WindowUpdaterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goka._speedups.WindowUpdater",
    .tp_doc = "The C fast path of goka.time.window_update's updater.",
    .tp_basicsize = sizeof(WindowUpdaterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = updater_new,
    .tp_dealloc = (destructor)updater_dealloc,
    .tp_traverse = (traverseproc)updater_traverse,
    .tp_clear = (inquiry)updater_clear,
    .tp_methods = updater_methods,
};

int
window_update_ready(void)
{
    str_w = PyUnicode_InternFromString("w");
    return str_w == NULL ? -1 : PyType_Ready(&WindowUpdaterType);
}

int
window_update_add(PyObject *module)
{
    return PyModule_AddObjectRef(module, "WindowUpdater", (PyObject *)&WindowUpdaterType);
}
