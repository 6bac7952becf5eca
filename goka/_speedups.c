/* Optional C accelerator for the emitter's per-message work (and, in goka/_window_update.c,
 * built into the same module, for a windowed group's per-record update).
 *
 * goka/emitter.py works without this module (pure-Python fallback); with it, the two things an
 * emitter does for every message run in C:
 *
 *   DeliveryState  the base of an emitter's delivery futures. An instance is itself the
 *                  producer's on_delivery callback: on success it keeps the partition and offset
 *                  as C integers, counts the message and puts its latency into a histogram
 *                  bucket, and calls back into Python only if someone waits on the future or
 *                  added a done-callback; a failure is handed to the Python method
 *                  _fail(err, msg). A future holds no Python objects until someone waits, adds
 *                  a callback or it fails, and stays out of the cyclic GC until then: a caller
 *                  keeping a million futures must not make every GC pass walk them.
 *   Counters       per-topic delivered/failed counts and the latency histogram, read at scrape.
 *   Sender         emit()'s fast path: encode, create the future, produce, serve due deliveries.
 *                  Anything unusual (closed emitter, full queue, bad key, headers, timestamp) is
 *                  handed to a Python fallback so every error path stays in one Python place.
 *
 * Everything here runs with the GIL held (producer callbacks are called with it), so the plain
 * C counters need no further locking.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

static PyObject *str_latency;   /* "latency" */
static PyObject *str_partition; /* "partition" */
static PyObject *str_offset;    /* "offset" */
static PyObject *str_complete;  /* "_complete" */
static PyObject *str_fail;      /* "_fail" */
static PyObject *kw_on_delivery; /* ("on_delivery",) */

/* goka/_window_update.c: WindowUpdater, the hot path of a windowed group */
int window_update_ready(void);
int window_update_add(PyObject *module);
PyObject *speedups_copy_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long delivered;
    long long failed;
    double latency_sum;
    Py_ssize_t nbounds;
    double *bounds;       /* ascending upper bounds (seconds) */
    long long *counts;    /* nbounds + 1 buckets; the last is +Inf */
} CountersObject;

static PyTypeObject CountersType;

static void
counters_record(CountersObject *c, double latency)
{
    Py_ssize_t i = 0;
    while (i < c->nbounds && latency > c->bounds[i]) {
        i++;
    }
    c->counts[i]++;
    c->delivered++;
    c->latency_sum += latency;
}

static PyObject *
counters_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *bounds_arg;
    static char *kwlist[] = {"bounds", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Counters", kwlist, &bounds_arg)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(bounds_arg, "bounds must be a sequence of floats");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    CountersObject *self = (CountersObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    self->nbounds = n;
    self->bounds = PyMem_Calloc(n ? n : 1, sizeof(double));
    self->counts = PyMem_Calloc(n + 1, sizeof(long long));
    if (self->bounds == NULL || self->counts == NULL) {
        Py_DECREF(seq);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double bound = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (bound == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            Py_DECREF(self);
            return NULL;
        }
        if (i > 0 && bound <= self->bounds[i - 1]) {
            Py_DECREF(seq);
            Py_DECREF(self);
            PyErr_SetString(PyExc_ValueError, "bounds must be strictly ascending");
            return NULL;
        }
        self->bounds[i] = bound;
    }
    Py_DECREF(seq);
    return (PyObject *)self;
}

static void
counters_dealloc(CountersObject *self)
{
    PyMem_Free(self->bounds);
    PyMem_Free(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
counters_record_method(CountersObject *self, PyObject *arg)
{
    double latency = PyFloat_AsDouble(arg);
    if (latency == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    counters_record(self, latency);
    Py_RETURN_NONE;
}

static PyObject *
counters_add_failed(CountersObject *self, PyObject *Py_UNUSED(ignored))
{
    self->failed++;
    Py_RETURN_NONE;
}

static PyObject *
counters_bucket_counts(CountersObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *list = PyList_New(self->nbounds + 1);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= self->nbounds; i++) {
        PyObject *count = PyLong_FromLongLong(self->counts[i]);
        if (count == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, count);
    }
    return list;
}

static PyMethodDef counters_methods[] = {
    {"record", (PyCFunction)counters_record_method, METH_O,
     "record(latency): count one delivered message and its latency in seconds."},
    {"add_failed", (PyCFunction)counters_add_failed, METH_NOARGS, "Count one failed message."},
    {"bucket_counts", (PyCFunction)counters_bucket_counts, METH_NOARGS,
     "Per-bucket (not cumulative) latency counts; the last bucket is +Inf."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef counters_members[] = {
    {"delivered", T_LONGLONG, offsetof(CountersObject, delivered), READONLY,
     "Messages acknowledged by the broker."},
    {"failed", T_LONGLONG, offsetof(CountersObject, failed), READONLY,
     "Messages whose delivery failed."},
    {"latency_sum", T_DOUBLE, offsetof(CountersObject, latency_sum), READONLY,
     "Sum of delivery latencies in seconds."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CountersType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goka._speedups.Counters",
    .tp_doc = "Counters(bounds): delivered/failed counts and a latency histogram.",
    .tp_basicsize = sizeof(CountersObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = counters_new,
    .tp_dealloc = (destructor)counters_dealloc,
    .tp_methods = counters_methods,
    .tp_members = counters_members,
};

/* ---------------------------------------------------------------------------------------------
 * DeliveryState
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    long long partition;  /* where the message was stored (valid once done without error) */
    long long offset;
    PyObject *result;     /* goka.delivery.Delivery, built lazily by Python */
    PyObject *error;      /* the exception of a failed delivery */
    PyObject *callbacks;  /* done-callbacks (list) or NULL/None */
    PyObject *event;      /* threading.Event of a waiter, or NULL/None */
    CountersObject *counters;
    PyObject *weakrefs;
    char done;
} DeliveryStateObject;

static PyTypeObject DeliveryStateType;

static PyObject *
state_alloc(PyTypeObject *type, CountersObject *counters)
{
    DeliveryStateObject *self = (DeliveryStateObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    /* Nothing to traverse yet (Counters holds no references): tracked again by the setters
     * below when a Python object is stored. */
    PyObject_GC_UnTrack(self);
    self->partition = -1;
    self->offset = -1;
    if (counters != NULL) {
        Py_INCREF(counters);
        self->counters = counters;
    }
    return (PyObject *)self;
}

static PyObject *
state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *counters = NULL;
    static char *kwlist[] = {"counters", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O!:DeliveryState", kwlist, &CountersType,
                                     &counters)) {
        return NULL;
    }
    return state_alloc(type, (CountersObject *)counters);
}

static int
state_traverse(DeliveryStateObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->result);
    Py_VISIT(self->error);
    Py_VISIT(self->callbacks);
    Py_VISIT(self->event);
    Py_VISIT(self->counters);
    return 0;
}

static int
state_clear(DeliveryStateObject *self)
{
    Py_CLEAR(self->result);
    Py_CLEAR(self->error);
    Py_CLEAR(self->callbacks);
    Py_CLEAR(self->event);
    Py_CLEAR(self->counters);
    return 0;
}

/* A Python subclass's instances are deallocated by subtype_dealloc, which visits and releases
 * the heap type itself and then calls this. */
static void
state_dealloc(DeliveryStateObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int
is_set(PyObject *o)
{
    return o != NULL && o != Py_None;
}

/* confluent_kafka.Message's leading fields (confluent-kafka 2.x, built against a librdkafka with
 * header support). Read directly only after calibrate() saw a probe Message, built with the
 * public constructor, read back right; otherwise, or for any other type, the Message methods are
 * called (three method calls cost more than the rest of a delivery). */
typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *value;
    PyObject *key;
    PyObject *headers;
    void *c_headers;
    PyObject *error;
    int32_t partition;
    int64_t offset;
    int32_t leader_epoch;
    int64_t timestamp;
    int timestamp_type;
    int64_t latency; /* microseconds, -1 if unknown */
} KafkaMessageFields;

static PyTypeObject *known_message_type; /* set by calibrate() */

static int
message_by_methods(DeliveryStateObject *self, PyObject *msg, double *seconds)
{
    PyObject *number = PyObject_CallMethodNoArgs(msg, str_partition);
    if (number == NULL) {
        return -1;
    }
    self->partition = PyLong_AsLongLong(number);
    Py_DECREF(number);
    number = PyObject_CallMethodNoArgs(msg, str_offset);
    if (number == NULL) {
        return -1;
    }
    self->offset = PyLong_AsLongLong(number);
    Py_DECREF(number);
    if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *latency = PyObject_CallMethodNoArgs(msg, str_latency);
    if (latency == NULL) {
        return -1;
    }
    if (latency != Py_None) {
        *seconds = PyFloat_AsDouble(latency);
    }
    Py_DECREF(latency);
    return (*seconds == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* calibrate(probe, partition, offset, latency_us) -> bool: whether the probe's fields read back
 * as given; if so, messages of its type are read directly from then on. */
static PyObject *
speedups_calibrate(PyObject *module, PyObject *args)
{
    PyObject *probe;
    long long partition, offset, latency;
    if (!PyArg_ParseTuple(args, "OLLL:calibrate", &probe, &partition, &offset, &latency)) {
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(probe);
    const KafkaMessageFields *fields = (const KafkaMessageFields *)probe;
    if (type->tp_basicsize < (Py_ssize_t)sizeof(KafkaMessageFields) || type->tp_itemsize != 0 ||
        fields->partition != partition || fields->offset != offset ||
        fields->latency != latency) {
        known_message_type = NULL;
        Py_RETURN_FALSE;
    }
    known_message_type = type; /* a static type of the confluent_kafka extension */
    Py_RETURN_TRUE;
}

/* Consumed records: their fields are read directly once calibrate_record() saw a probe Message
 * (topic, key, value, headers, partition, offset, timestamp given) read back right. */
static PyTypeObject *known_record_type;

/* calibrate_record(probe, topic, key, value, headers, partition, offset, timestamp) -> bool */
static PyObject *
speedups_calibrate_record(PyObject *module, PyObject *args)
{
    PyObject *probe, *topic, *key, *value, *headers;
    long long partition, offset, timestamp;
    if (!PyArg_ParseTuple(args, "OOOOOLLL:calibrate_record", &probe, &topic, &key, &value,
                          &headers, &partition, &offset, &timestamp)) {
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(probe);
    const KafkaMessageFields *fields = (const KafkaMessageFields *)probe;
    known_record_type = NULL;
    if (type->tp_basicsize < (Py_ssize_t)sizeof(KafkaMessageFields) || type->tp_itemsize != 0 ||
        fields->topic != topic || fields->key != key || fields->value != value ||
        fields->headers != headers || fields->c_headers != NULL || fields->error != NULL ||
        fields->partition != partition || fields->offset != offset ||
        fields->timestamp != timestamp) {
        Py_RETURN_FALSE;
    }
    known_record_type = type; /* a static type of the confluent_kafka extension */
    Py_RETURN_TRUE;
}

static PyObject *str_headers; /* "headers" */

/* The row of a consumed record: (topic, offset, key, value, timestamp, headers). */
static PyObject *
record_row(PyObject *msg, const KafkaMessageFields *fields)
{
    PyObject *headers;
    if (fields->headers != NULL || fields->c_headers == NULL) {
        headers = Py_NewRef(fields->headers != NULL ? fields->headers : Py_None);
    }
    else if ((headers = PyObject_CallMethodNoArgs(msg, str_headers)) == NULL) {
        return NULL; /* (the method makes the list of the record's C headers) */
    }
    PyObject *row = PyTuple_New(6);
    PyObject *offset = PyLong_FromLongLong(fields->offset);
    PyObject *timestamp = PyLong_FromLongLong(fields->timestamp);
    if (row == NULL || offset == NULL || timestamp == NULL) {
        Py_XDECREF(row);
        Py_XDECREF(offset);
        Py_XDECREF(timestamp);
        Py_DECREF(headers);
        return NULL;
    }
    PyTuple_SET_ITEM(row, 0, Py_NewRef(fields->topic != NULL ? fields->topic : Py_None));
    PyTuple_SET_ITEM(row, 1, offset);
    PyTuple_SET_ITEM(row, 2, Py_NewRef(fields->key != NULL ? fields->key : Py_None));
    PyTuple_SET_ITEM(row, 3, Py_NewRef(fields->value != NULL ? fields->value : Py_None));
    PyTuple_SET_ITEM(row, 4, timestamp);
    PyTuple_SET_ITEM(row, 5, headers);
    return row;
}

/* tail_rows(messages) -> (rows, errors) | None: the consumed records of the list ``messages``
 * as rows by partition ({partition: [row, ...]}, in order), and the messages that carry an
 * error, in order; None if a message is not of the calibrated type (the caller reads them by
 * their methods). */
static PyObject *
speedups_tail_rows(PyObject *module, PyObject *messages)
{
    if (!PyList_CheckExact(messages)) {
        PyErr_SetString(PyExc_TypeError, "tail_rows() takes a list of messages");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(messages);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyTypeObject *type = Py_TYPE(PyList_GET_ITEM(messages, i));
        if (known_record_type == NULL || type != known_record_type) {
            Py_RETURN_NONE;
        }
    }
    PyObject *rows = PyDict_New(), *errors = PyList_New(0);
    PyObject *found = NULL; /* the list of the last record's partition (borrowed) */
    int32_t last = 0;
    if (rows == NULL || errors == NULL) {
        goto failed;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        const KafkaMessageFields *fields = (const KafkaMessageFields *)msg;
        if (fields->error != NULL && fields->error != Py_None) {
            if (PyList_Append(errors, msg) < 0) {
                goto failed;
            }
            continue;
        }
        if (found == NULL || fields->partition != last) {
            PyObject *partition = PyLong_FromLong(fields->partition);
            if (partition == NULL) {
                goto failed;
            }
            found = PyDict_GetItemWithError(rows, partition);
            if (found == NULL) {
                if (PyErr_Occurred() || (found = PyList_New(0)) == NULL ||
                    PyDict_SetItem(rows, partition, found) < 0) {
                    Py_XDECREF(found);
                    Py_DECREF(partition);
                    goto failed;
                }
                Py_DECREF(found); /* (the dict holds it) */
            }
            Py_DECREF(partition);
            last = fields->partition;
        }
        PyObject *row = record_row(msg, fields);
        if (row == NULL || PyList_Append(found, row) < 0) {
            Py_XDECREF(row);
            goto failed;
        }
        Py_DECREF(row);
    }
    return Py_BuildValue("(NN)", rows, errors);
failed:
    Py_XDECREF(rows);
    Py_XDECREF(errors);
    return NULL;
}

/* The delivery callback: on_delivery(err, msg). */
static PyObject *
state_deliver(DeliveryStateObject *self, PyObject *err, PyObject *msg)
{
    if (err != Py_None) {
        if (self->counters != NULL) {
            self->counters->failed++;
        }
        return PyObject_CallMethodObjArgs((PyObject *)self, str_fail, err, msg, NULL);
    }
    double seconds = 0.0;
    if (Py_TYPE(msg) == known_message_type) {
        const KafkaMessageFields *fields = (const KafkaMessageFields *)msg;
        self->partition = fields->partition;
        self->offset = fields->offset;
        if (fields->latency >= 0) {
            seconds = (double)fields->latency / 1e6;
        }
    }
    else if (message_by_methods(self, msg, &seconds) < 0) {
        return NULL;
    }
    if (self->counters != NULL) {
        counters_record(self->counters, seconds);
    }
    self->done = 1;
    if (is_set(self->event) || is_set(self->callbacks)) {
        return PyObject_CallMethodNoArgs((PyObject *)self, str_complete);
    }
    Py_RETURN_NONE;
}

static PyObject *
state_call(DeliveryStateObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *err, *msg;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "a delivery callback takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "on_delivery", 2, 2, &err, &msg)) {
        return NULL;
    }
    return state_deliver(self, err, msg);
}

static PyMemberDef state_members[] = {
    {"_done", T_BOOL, offsetof(DeliveryStateObject, done), 0, "True once delivered or failed."},
    {"_partition", T_LONGLONG, offsetof(DeliveryStateObject, partition), READONLY,
     "The partition the message was stored in (-1 until delivered)."},
    {"_offset", T_LONGLONG, offsetof(DeliveryStateObject, offset), READONLY,
     "The offset the message was stored at (-1 until delivered)."},
    {NULL, 0, 0, 0, NULL},
};

/* Object fields read as None when empty; storing an object puts the future under the GC. */
static PyObject *
state_get_field(DeliveryStateObject *self, void *offset)
{
    PyObject *value = *(PyObject **)((char *)self + (size_t)offset);
    return Py_NewRef(value != NULL ? value : Py_None);
}

static int
state_set_field(DeliveryStateObject *self, PyObject *value, void *offset)
{
    PyObject **slot = (PyObject **)((char *)self + (size_t)offset);
    if (value == Py_None) {
        value = NULL;
    }
    Py_XINCREF(value);
    Py_XSETREF(*slot, value);
    if (value != NULL && !PyObject_GC_IsTracked((PyObject *)self)) {
        PyObject_GC_Track(self);
    }
    return 0;
}

#define STATE_FIELD(name, field, doc)                                                         \
    {name, (getter)state_get_field, (setter)state_set_field, doc,                             \
     (void *)offsetof(DeliveryStateObject, field)}

static PyGetSetDef state_getset[] = {
    STATE_FIELD("_result", result, "The Delivery, or None."),
    STATE_FIELD("_error", error, "The exception of a failed delivery, or None."),
    STATE_FIELD("_callbacks", callbacks, "Done-callbacks, or None."),
    STATE_FIELD("_event", event, "A waiter's threading.Event, or None."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DeliveryStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goka._speedups.DeliveryState",
    .tp_doc = "DeliveryState([counters]): the C part of an emitter's delivery future; calling "
              "it with (err, msg) records the outcome.",
    .tp_basicsize = sizeof(DeliveryStateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = state_new,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_traverse = (traverseproc)state_traverse,
    .tp_clear = (inquiry)state_clear,
    .tp_call = (ternaryfunc)state_call,
    .tp_members = state_members,
    .tp_getset = state_getset,
    .tp_weaklistoffset = offsetof(DeliveryStateObject, weakrefs),
};

/* ---------------------------------------------------------------------------------------------
 * Sender: emit()'s fast path
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *topic;          /* str */
    PyObject *encode;         /* codec.encode, or None to pass bytes values through */
    PyTypeObject *future_type;/* a subclass of DeliveryState */
    CountersObject *counters;
    PyObject *produce;        /* producer.produce */
    PyObject *poll;           /* producer.poll */
    PyObject *slow;           /* the Python emit(key, value, *, headers, timestamp) */
    PyObject *failed;         /* produce_failed(future, key, data, exception) -> future */
    PyObject *callbacks_running; /* goka.delivery.USER_CALLBACKS_RUNNING: [int] */
    PyObject *zero;           /* 0 */
    unsigned long long served; /* how often emit() served due deliveries itself */
    int serving;              /* emit() calls serving deliveries right now */
    char closed;
} SenderObject;

static PyObject *
sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *topic, *encode, *future_type, *counters, *produce, *poll, *slow, *failed;
    PyObject *running;
    static char *kwlist[] = {"topic", "encode", "future_type", "counters", "produce", "poll",
                             "slow", "failed", "callbacks_running", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UOO!O!OOOOO!:Sender", kwlist, &topic, &encode,
                                     &PyType_Type, &future_type, &CountersType, &counters,
                                     &produce, &poll, &slow, &failed, &PyList_Type, &running)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)future_type, &DeliveryStateType)) {
        PyErr_SetString(PyExc_TypeError, "future_type must be a subclass of DeliveryState");
        return NULL;
    }
    if (PyList_GET_SIZE(running) != 1) {
        PyErr_SetString(PyExc_ValueError, "callbacks_running must be a one-element list");
        return NULL;
    }
    SenderObject *self = (SenderObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->zero = PyLong_FromLong(0);
    if (self->zero == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(topic);
    self->topic = topic;
    if (encode != Py_None) {
        Py_INCREF(encode);
        self->encode = encode;
    }
    Py_INCREF(future_type);
    self->future_type = (PyTypeObject *)future_type;
    Py_INCREF(counters);
    self->counters = (CountersObject *)counters;
    Py_INCREF(produce);
    self->produce = produce;
    Py_INCREF(poll);
    self->poll = poll;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(failed);
    self->failed = failed;
    Py_INCREF(running);
    self->callbacks_running = running;
    return (PyObject *)self;
}

static int
sender_traverse(SenderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->topic);
    Py_VISIT(self->encode);
    Py_VISIT(self->future_type);
    Py_VISIT(self->counters);
    Py_VISIT(self->produce);
    Py_VISIT(self->poll);
    Py_VISIT(self->slow);
    Py_VISIT(self->failed);
    Py_VISIT(self->callbacks_running);
    return 0;
}

static int
sender_clear(SenderObject *self)
{
    Py_CLEAR(self->topic);
    Py_CLEAR(self->encode);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->counters);
    Py_CLEAR(self->produce);
    Py_CLEAR(self->poll);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->callbacks_running);
    Py_CLEAR(self->zero);
    return 0;
}

static void
sender_dealloc(SenderObject *self)
{
    PyObject_GC_UnTrack(self);
    sender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* emit(key, value) -> future; anything else goes to the Python emit */
static PyObject *
sender_emit(SenderObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs != 2 || self->closed || !PyUnicode_CheckExact(args[0])) {
        /* keywords (headers, timestamp), a closed emitter or an odd key: the Python path */
        return PyObject_Vectorcall(self->slow, args, nargs, kwnames);
    }
    PyObject *key = args[0];
    PyObject *value = args[1];
    PyObject *data;
    if (value == Py_None) {
        data = Py_NewRef(Py_None);
    }
    else if (self->encode == NULL) {
        if (!PyBytes_CheckExact(value)) {
            return PyObject_Vectorcall(self->slow, args, nargs, NULL);
        }
        data = Py_NewRef(value);
    }
    else {
        data = PyObject_CallOneArg(self->encode, value);
        if (data == NULL) {
            return NULL;
        }
    }
    PyObject *future = state_alloc(self->future_type, self->counters);
    if (future == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    /* produce(topic, data, key, on_delivery=future) */
    PyObject *call_args[4] = {self->topic, data, key, future};
    PyObject *produced = PyObject_Vectorcall(self->produce, call_args, 3, kw_on_delivery);
    if (produced == NULL) {
        /* a full queue, a refused message: the Python path waits or raises, with the same
         * future and data */
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        PyErr_NormalizeException(&exc_type, &exc_value, &exc_tb);
        if (exc_value != NULL && exc_tb != NULL) {
            PyException_SetTraceback(exc_value, exc_tb);
        }
        PyObject *retried = PyObject_CallFunctionObjArgs(
            self->failed, future, key, data, exc_value ? exc_value : Py_None, NULL);
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        Py_DECREF(data);
        Py_DECREF(future);
        return retried;
    }
    Py_DECREF(data);
    Py_DECREF(produced);
    PyObject *running = PyList_GET_ITEM(self->callbacks_running, 0);
    if (running == self->zero || (PyLong_Check(running) && PyLong_AsLong(running) == 0)) {
        self->served++;
        self->serving++;
        PyObject *served = PyObject_CallOneArg(self->poll, self->zero);
        self->serving--;
        if (served == NULL) {
            Py_DECREF(future);
            return NULL;
        }
        Py_DECREF(served);
    }
    return future;
}

static PyObject *
sender_close(SenderObject *self, PyObject *Py_UNUSED(ignored))
{
    self->closed = 1;
    Py_RETURN_NONE;
}

static PyMethodDef sender_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))sender_emit, METH_FASTCALL | METH_KEYWORDS,
     "emit(key, value) -> future; other calls go to the Python path."},
    {"close", (PyCFunction)sender_close, METH_NOARGS, "Send every later call to the Python path."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sender_members[] = {
    {"served", T_ULONGLONG, offsetof(SenderObject, served), READONLY,
     "How often emit() served due deliveries itself (the poll thread stands back meanwhile)."},
    {"serving", T_INT, offsetof(SenderObject, serving), READONLY,
     "How many emit() calls are serving deliveries right now (a burst can take milliseconds)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject SenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goka._speedups.Sender",
    .tp_doc = "The C fast path of Emitter.emit.",
    .tp_basicsize = sizeof(SenderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = sender_new,
    .tp_dealloc = (destructor)sender_dealloc,
    .tp_traverse = (traverseproc)sender_traverse,
    .tp_clear = (inquiry)sender_clear,
    .tp_methods = sender_methods,
    .tp_members = sender_members,
};

/* ---------------------------------------------------------------------------------------------
 * module
 * ------------------------------------------------------------------------------------------- */

/* text_lossless(data) -> str: UTF-8 with surrogate escapes for the bytes that are not (keys and
 * StringCodec values, see goka/keys.py); bytes.decode("utf-8", "surrogateescape") without the
 * cost of parsing its arguments on every record */
static PyObject *
speedups_text_lossless(PyObject *module, PyObject *data)
{
    if (PyBytes_CheckExact(data)) {
        return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data),
                                    "surrogateescape");
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *text = PyUnicode_DecodeUTF8(view.buf, view.len, "surrogateescape");
    PyBuffer_Release(&view);
    return text;
}

static PyMethodDef speedups_functions[] = {
    {"text_lossless", speedups_text_lossless, METH_O,
     "text_lossless(data) -> str: data.decode('utf-8', 'surrogateescape')."},
    {"calibrate", speedups_calibrate, METH_VARARGS,
     "calibrate(probe, partition, offset, latency_us) -> bool: read messages of the probe's "
     "type directly if its fields read back as given."},
    {"calibrate_record", speedups_calibrate_record, METH_VARARGS,
     "calibrate_record(probe, topic, key, value, headers, partition, offset, timestamp) -> bool: "
     "read consumed records of the probe's type directly if its fields read back as given."},
    {"tail_rows", speedups_tail_rows, METH_O,
     "tail_rows(messages) -> ({partition: [row, ...]}, errors) | None: the consumed records as "
     "(topic, offset, key, value, timestamp, headers) rows by partition, the messages with an "
     "error; None if a message is not of the calibrated type."},
    {"copy_json", (PyCFunction)(void (*)(void))speedups_copy_json, METH_FASTCALL,
     "copy_json(prefixes, kinds, key, message) -> (key, value) | None: a row of COPY TO "
     "STDOUT as JsonCodec's JSON of its dict, and its key (see goka/_copy_json.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "goka._speedups",
    .m_doc = "C fast paths of goka.emitter, goka.keys and goka.time.window_update (optional; "
              "the pure-Python code is the reference).",
    .m_size = -1,
    .m_methods = speedups_functions,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    str_latency = PyUnicode_InternFromString("latency");
    str_partition = PyUnicode_InternFromString("partition");
    str_offset = PyUnicode_InternFromString("offset");
    str_complete = PyUnicode_InternFromString("_complete");
    str_fail = PyUnicode_InternFromString("_fail");
    str_headers = PyUnicode_InternFromString("headers");
    kw_on_delivery = Py_BuildValue("(s)", "on_delivery");
    if (!str_latency || !str_partition || !str_offset || !str_complete || !str_fail ||
        !str_headers || !kw_on_delivery) {
        return NULL;
    }
    if (PyType_Ready(&CountersType) < 0 || PyType_Ready(&DeliveryStateType) < 0 ||
        PyType_Ready(&SenderType) < 0 || window_update_ready() < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Counters", (PyObject *)&CountersType) < 0 ||
        PyModule_AddObjectRef(module, "DeliveryState", (PyObject *)&DeliveryStateType) < 0 ||
        PyModule_AddObjectRef(module, "Sender", (PyObject *)&SenderType) < 0 ||
        window_update_add(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
