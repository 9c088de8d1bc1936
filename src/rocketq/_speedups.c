/* rocketq._speedups: the compiled versions of the record codec's hottest functions.
 *
 * Optional: built by `pip install` when a C compiler and the Python headers are there
 * (setup.py); rocketq.speedups decides at import whether it is used (ROCKETQ_PURE=1 forces the
 * pure-Python path). Each function here has the exact semantics of its pure counterpart in
 * rocketq/protocol/record.py: it handles the common case itself and hands every other case
 * (a record that is not a clean MESSAGE, an argument of an unusual type, a value out of range)
 * to the pure function, so results and errors are the pure function's by construction.
 *
 *   decode_record(buf, pos=0, *, check_crc=True, read_body=True, verify_prop_crc=False)
 *   view_to_message(view)
 *
 * and of the store's dispatch (their pure counterparts: rocketq/store/record_scan.py's
 * parse_window, IndexFile.put_keys' and ConsumeQueue.put_units' loops; each leaves what it does
 * not handle exactly to them):
 *
 *   scan_window(data, base=None, objects_below=0), index_put_keys(...), cq_pack_run(...)
 *
 * setup_record() is called once by rocketq.protocol.record with the classes and the pure
 * functions. RecordView and MessageExt are slots dataclasses without __post_init__; their
 * instances are filled slot by slot (the member offsets are read from the classes' slot
 * descriptors at setup), which is what their generated __init__ does, without running it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define MESSAGE_MAGIC_CODE ((int32_t)-626843481)
#define MESSAGE_MAGIC_CODE_V2 ((int32_t)-626843477)
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20

/* RecordView fields, in declaration (and __init__) order. */
enum {
    RV_KIND, RV_SIZE, RV_REASON, RV_BODY_CRC, RV_QUEUE_ID, RV_FLAG, RV_QUEUE_OFFSET,
    RV_PHYSICAL_OFFSET, RV_SYS_FLAG, RV_BORN_TIMESTAMP, RV_BORN_HOST, RV_STORE_TIMESTAMP,
    RV_STORE_HOST, RV_RECONSUME_TIMES, RV_PREPARED_OFFSET, RV_BODY_OFFSET, RV_BODY_LENGTH,
    RV_BODY, RV_TOPIC, RV_PROPERTIES, RV_V2, RV_COUNT
};
static const char *const rv_names[RV_COUNT] = {
    "kind", "size", "reason", "body_crc", "queue_id", "flag", "queue_offset", "physical_offset",
    "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body_offset", "body_length", "body", "topic", "properties", "v2",
};

/* MessageExt fields, in declaration order. */
enum {
    ME_TOPIC, ME_BODY, ME_PROPERTIES, ME_FLAG, ME_QUEUE_ID, ME_STORE_SIZE, ME_QUEUE_OFFSET,
    ME_SYS_FLAG, ME_BORN_TIMESTAMP, ME_BORN_HOST, ME_STORE_TIMESTAMP, ME_STORE_HOST,
    ME_COMMIT_LOG_OFFSET, ME_BODY_CRC, ME_RECONSUME_TIMES, ME_PREPARED_OFFSET, ME_MSG_ID, ME_COUNT
};
static const char *const me_names[ME_COUNT] = {
    "topic", "body", "properties", "flag", "queue_id", "store_size", "queue_offset", "sys_flag",
    "born_timestamp", "born_host", "store_timestamp", "store_host", "commit_log_offset", "body_crc",
    "reconsume_times", "prepared_transaction_offset", "msg_id",
};

typedef struct {
    int ready;
    PyTypeObject *record_view;
    PyObject *message_kind;
    PyTypeObject *message_ext;
    PyObject *pure_decode_record;
    PyObject *pure_view_to_message;
    PyObject *unpack_socket_addr;
    PyObject *crc32;
    PyObject *empty_str;
    PyObject *empty_bytes;
    Py_ssize_t rv_off[RV_COUNT];
    Py_ssize_t me_off[ME_COUNT];
} state_t;

static state_t st;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* The slot offsets of a slots class's fields; -1 with an exception set when the class is not
 * what this module expects. */
static int read_offsets(PyTypeObject *type, const char *const *names, Py_ssize_t *out, int n) {
    PyObject *post_init = PyObject_GetAttrString((PyObject *)type, "__post_init__");
    if (post_init != NULL) {
        Py_DECREF(post_init);
        PyErr_Format(PyExc_TypeError, "%s has a __post_init__", type->tp_name);
        return -1;
    }
    PyErr_Clear();
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyObject_GetAttrString((PyObject *)type, names[i]);
        if (descr == NULL) return -1;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, names[i]);
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
            Py_DECREF(descr);
            PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name, names[i]);
            return -1;
        }
        out[i] = m->offset;
        Py_DECREF(descr);
    }
    return 0;
}

static PyObject *setup_record(PyObject *self, PyObject *args) {
    PyObject *rv, *kind, *me, *pure_decode, *pure_v2m, *unpack, *crc32;
    if (!PyArg_ParseTuple(args, "OOOOOOO:setup_record", &rv, &kind, &me, &pure_decode, &pure_v2m, &unpack,
                          &crc32))
        return NULL;
    if (!PyType_Check(rv) || !PyType_Check(me)) {
        PyErr_SetString(PyExc_TypeError, "setup_record: RecordView and MessageExt must be classes");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)rv, rv_names, st.rv_off, RV_COUNT) < 0) return NULL;
    if (read_offsets((PyTypeObject *)me, me_names, st.me_off, ME_COUNT) < 0) return NULL;
    Py_INCREF(rv); Py_INCREF(kind); Py_INCREF(me); Py_INCREF(pure_decode); Py_INCREF(pure_v2m);
    Py_INCREF(unpack); Py_INCREF(crc32);
    Py_XSETREF(st.record_view, (PyTypeObject *)rv);
    Py_XSETREF(st.message_kind, kind);
    Py_XSETREF(st.message_ext, (PyTypeObject *)me);
    Py_XSETREF(st.pure_decode_record, pure_decode);
    Py_XSETREF(st.pure_view_to_message, pure_v2m);
    Py_XSETREF(st.unpack_socket_addr, unpack);
    Py_XSETREF(st.crc32, crc32);
    st.ready = 1;
    Py_RETURN_NONE;
}

static PyObject *not_ready(void) {
    PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_record() was not called");
    return NULL;
}

/* A new instance of a slots class with every field NULL (filled by the caller). */
static PyObject *blank_instance(PyTypeObject *type) {
    return type->tp_alloc(type, 0);
}

/* -- decode_record ------------------------------------------------------------------------ */

/* The MESSAGE view of the clean record at data[pos:], or NULL without an exception when the
 * record is anything else (the pure function then decides what it is), or NULL with an
 * exception on a failure of this process (memory). */
static PyObject *fast_decode(const unsigned char *data, Py_ssize_t end, Py_ssize_t pos, int check_crc,
                             int read_body) {
    if (pos > end - 8) return NULL;
    const unsigned char *r = data + pos;
    int32_t total = be32(r);
    int32_t magic = be32(r + 4);
    int v2;
    if (magic == MESSAGE_MAGIC_CODE) v2 = 0;
    else if (magic == MESSAGE_MAGIC_CODE_V2) v2 = 1;
    else return NULL;
    if (total < 91 || total > end - pos) return NULL;
    int32_t crc = be32(r + 8);
    int32_t queue_id = be32(r + 12);
    int32_t flag = be32(r + 16);
    int64_t queue_offset = be64(r + 20);
    int64_t physical_offset = be64(r + 28);
    int32_t sys_flag = be32(r + 36);
    int64_t born_ts = be64(r + 40);
    Py_ssize_t bh = (sys_flag & BORNHOST_V6_FLAG) ? 20 : 8;
    Py_ssize_t sh = (sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8;
    Py_ssize_t p = 48; /* relative to the record start from here on */
    if (p + bh + 8 + sh + 16 > total) return NULL;
    const unsigned char *born_host = r + p;
    p += bh;
    int64_t store_ts = be64(r + p);
    p += 8;
    const unsigned char *store_host = r + p;
    p += sh;
    int32_t reconsume = be32(r + p);
    int64_t prepared = be64(r + p + 4);
    int32_t body_len = be32(r + p + 12);
    p += 16;
    if (body_len < 0 || p + body_len > total) return NULL;
    Py_ssize_t body_offset = p;
    const unsigned char *body_ptr = r + p;
    p += body_len;
    Py_ssize_t tl_width = v2 ? 2 : 1;
    if (p + tl_width > total) return NULL;
    Py_ssize_t topic_len = v2 ? be16(r + p) : (int8_t)r[p];
    p += tl_width;
    if (topic_len <= 0 || p + topic_len + 2 > total) return NULL;
    const unsigned char *topic_ptr = r + p;
    p += topic_len;
    Py_ssize_t props_len = be16(r + p);
    p += 2;
    if (props_len < 0 || p + props_len > total) return NULL;
    if (72 + bh + sh + body_len + tl_width + topic_len + 2 + props_len != total) return NULL;
    const unsigned char *props_ptr = r + p;

    PyObject *body = NULL;
    if (read_body || check_crc) {
        body = PyBytes_FromStringAndSize((const char *)body_ptr, body_len);
        if (body == NULL) return NULL;
        if (check_crc) {
            PyObject *computed = PyObject_CallOneArg(st.crc32, body);
            if (computed == NULL) {
                Py_DECREF(body);
                return NULL;
            }
            unsigned long value = PyLong_AsUnsignedLongMask(computed);
            Py_DECREF(computed);
            if (value == (unsigned long)-1 && PyErr_Occurred()) {
                Py_DECREF(body);
                return NULL;
            }
            if ((int64_t)(value & 0x7FFFFFFFUL) != (int64_t)crc) {
                Py_DECREF(body); /* a mismatch: the pure function names it */
                return NULL;
            }
        }
        if (!read_body) Py_CLEAR(body);
    }
    PyObject *view = blank_instance(st.record_view);
    if (view == NULL) {
        Py_XDECREF(body);
        return NULL;
    }
    PyObject *v[RV_COUNT];
    Py_INCREF(st.message_kind);
    v[RV_KIND] = st.message_kind;
    v[RV_SIZE] = PyLong_FromLong(total);
    Py_INCREF(st.empty_str);
    v[RV_REASON] = st.empty_str;
    v[RV_BODY_CRC] = PyLong_FromLong(crc);
    v[RV_QUEUE_ID] = PyLong_FromLong(queue_id);
    v[RV_FLAG] = PyLong_FromLong(flag);
    v[RV_QUEUE_OFFSET] = PyLong_FromLongLong(queue_offset);
    v[RV_PHYSICAL_OFFSET] = PyLong_FromLongLong(physical_offset);
    v[RV_SYS_FLAG] = PyLong_FromLong(sys_flag);
    v[RV_BORN_TIMESTAMP] = PyLong_FromLongLong(born_ts);
    v[RV_BORN_HOST] = PyBytes_FromStringAndSize((const char *)born_host, bh);
    v[RV_STORE_TIMESTAMP] = PyLong_FromLongLong(store_ts);
    v[RV_STORE_HOST] = PyBytes_FromStringAndSize((const char *)store_host, sh);
    v[RV_RECONSUME_TIMES] = PyLong_FromLong(reconsume);
    v[RV_PREPARED_OFFSET] = PyLong_FromLongLong(prepared);
    v[RV_BODY_OFFSET] = PyLong_FromSsize_t(body_offset);
    v[RV_BODY_LENGTH] = PyLong_FromLong(body_len);
    if (body == NULL) {
        Py_INCREF(Py_None);
        body = Py_None;
    }
    v[RV_BODY] = body;
    v[RV_TOPIC] = PyUnicode_DecodeUTF8((const char *)topic_ptr, topic_len, "replace");
    v[RV_PROPERTIES] = PyUnicode_DecodeUTF8((const char *)props_ptr, props_len, "replace");
    v[RV_V2] = PyBool_FromLong(v2);
    int failed = 0;
    for (int i = 0; i < RV_COUNT; i++) {
        if (v[i] == NULL) failed = 1;
        SLOT(view, st.rv_off[i]) = v[i];
    }
    if (failed) {
        Py_DECREF(view);
        return NULL;
    }
    return view;
}

/* The arguments other than buf and pos, by keyword: check_crc, read_body, verify_prop_crc. */
static const char *const decode_kwnames[] = {"check_crc", "read_body", "verify_prop_crc"};

static PyObject *decode_record(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (!st.ready) return not_ready();
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* flags[0..2]: check_crc, read_body, verify_prop_crc as given (NULL: the default) */
    PyObject *flags[3] = {NULL, NULL, NULL};
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int usual = nargs >= 1 && nargs <= 2;
    for (Py_ssize_t k = 0; usual && k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int j = 0; j < 3; j++) {
            if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, decode_kwnames[j]) == 0) {
                slot = j;
                break;
            }
        }
        if (slot < 0 || flags[slot] != NULL) usual = 0;
        else flags[slot] = args[nargs + k];
    }
    if (usual) {
        Py_ssize_t pos = 0;
        if (nargs == 2) {
            pos = PyLong_CheckExact(args[1]) ? PyLong_AsSsize_t(args[1]) : -1;
            if (pos == -1 && PyErr_Occurred()) PyErr_Clear();
        }
        int check = flags[0] ? PyObject_IsTrue(flags[0]) : 1;
        int read = flags[1] ? PyObject_IsTrue(flags[1]) : 1;
        int verify = flags[2] ? PyObject_IsTrue(flags[2]) : 0;
        if (check < 0 || read < 0 || verify < 0) {
            PyErr_Clear(); /* the pure function meets the same failure and raises it */
        } else if (pos >= 0 && !verify) {
            /* A C-contiguous buffer of single bytes, one-dimensional: what the pure function
             * indexes byte by byte too (len() of an array of wider items counts items). */
            Py_buffer view;
            if (PyObject_GetBuffer(args[0], &view, PyBUF_ND) == 0) {
                PyObject *out = NULL;
                if (view.itemsize == 1 && view.ndim == 1)
                    out = fast_decode((const unsigned char *)view.buf, view.len, pos, check, read);
                PyBuffer_Release(&view);
                if (out != NULL || PyErr_Occurred()) return out;
            } else {
                PyErr_Clear();
            }
        }
    }
    /* Not a clean MESSAGE record, or unusual arguments: the pure function decides. */
    return PyObject_Vectorcall(st.pure_decode_record, args, nargsf, kwnames);
}

/* -- view_to_message ---------------------------------------------------------------------- */

/* "a.b.c.d:port" of a packed IPv4 socket address (rocketq.message.unpack_socket_addr); other
 * widths go to the Python function, which knows IPv6 and raises for the rest. */
static PyObject *socket_addr(PyObject *raw) {
    if (PyBytes_CheckExact(raw) && PyBytes_GET_SIZE(raw) == 8) {
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
        return PyUnicode_FromFormat("%u.%u.%u.%u:%d", b[0], b[1], b[2], b[3], (int)be32(b + 4));
    }
    return PyObject_CallOneArg(st.unpack_socket_addr, raw);
}

/* rocketq.message.decode_properties: split on \x02, skip pieces shorter than 3 characters,
 * split at the first \x01, keep pairs whose key and value are both non-empty. */
static PyObject *properties_dict(PyObject *text) {
    if (PyUnicode_READY(text) < 0) return NULL;
    PyObject *result = PyDict_New();
    if (result == NULL) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t start = 0;
    while (start <= n && n > 0) {
        Py_ssize_t stop = start;
        Py_ssize_t sep = -1;
        while (stop < n) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, stop);
            if (ch == 2) break;
            if (ch == 1 && sep < 0) sep = stop;
            stop++;
        }
        if (stop - start >= 3 && sep > start && sep + 1 < stop) {
            PyObject *key = PyUnicode_Substring(text, start, sep);
            PyObject *value = key ? PyUnicode_Substring(text, sep + 1, stop) : NULL;
            if (value == NULL || PyDict_SetItem(result, key, value) < 0) {
                Py_XDECREF(key);
                Py_XDECREF(value);
                Py_DECREF(result);
                return NULL;
            }
            Py_DECREF(key);
            Py_DECREF(value);
        }
        start = stop + 1;
    }
    return result;
}

static const char HEX[] = "0123456789ABCDEF";

/* rocketq.message.create_offset_msg_id: packed store host ‖ int64 offset, uppercase hex. */
static PyObject *offset_msg_id(PyObject *store_host, long long offset) {
    Py_ssize_t hl = PyBytes_GET_SIZE(store_host);
    const unsigned char *h = (const unsigned char *)PyBytes_AS_STRING(store_host);
    PyObject *out = PyUnicode_New((hl + 8) * 2, 127);
    if (out == NULL) return NULL;
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < hl; i++) {
        *w++ = HEX[h[i] >> 4];
        *w++ = HEX[h[i] & 15];
    }
    uint64_t v = (uint64_t)offset;
    for (int i = 7; i >= 0; i--) {
        unsigned b = (unsigned)(v >> (8 * i)) & 0xFF;
        *w++ = HEX[b >> 4];
        *w++ = HEX[b & 15];
    }
    return out;
}

static PyObject *view_to_message(PyObject *self, PyObject *view) {
    if (!st.ready) return not_ready();
    if (Py_TYPE(view) != st.record_view) return PyObject_CallOneArg(st.pure_view_to_message, view);
    PyObject *f[RV_COUNT];
    for (int i = 0; i < RV_COUNT; i++) {
        f[i] = SLOT(view, st.rv_off[i]);
        if (f[i] == NULL) /* a field never set: the pure function raises AttributeError */
            return PyObject_CallOneArg(st.pure_view_to_message, view);
    }
    PyObject *topic = f[RV_TOPIC], *body = f[RV_BODY], *props = f[RV_PROPERTIES];
    PyObject *born = f[RV_BORN_HOST], *store = f[RV_STORE_HOST], *phys = f[RV_PHYSICAL_OFFSET];
    /* Only the common shapes here; anything else is the pure function's. */
    if (!PyUnicode_CheckExact(props) || !PyBytes_CheckExact(born) || !PyBytes_CheckExact(store) ||
        !(body == Py_None || PyBytes_CheckExact(body)) || !PyLong_CheckExact(phys))
        return PyObject_CallOneArg(st.pure_view_to_message, view);
    long long offset = PyLong_AsLongLong(phys);
    if (offset == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return PyObject_CallOneArg(st.pure_view_to_message, view);
    }
    PyObject *v[ME_COUNT] = {NULL};
    /* store host first, as the pure function does: an unpackable one raises before the rest */
    if (PyBytes_GET_SIZE(store)) {
        v[ME_STORE_HOST] = socket_addr(store);
        if (v[ME_STORE_HOST] == NULL) return NULL;
    } else {
        Py_INCREF(st.empty_str);
        v[ME_STORE_HOST] = st.empty_str;
    }
    v[ME_PROPERTIES] = properties_dict(props);
    if (v[ME_PROPERTIES] == NULL) goto fail;
    if (PyBytes_GET_SIZE(born)) {
        v[ME_BORN_HOST] = socket_addr(born);
        if (v[ME_BORN_HOST] == NULL) goto fail;
    } else {
        Py_INCREF(st.empty_str);
        v[ME_BORN_HOST] = st.empty_str;
    }
    if (PyBytes_GET_SIZE(store)) {
        v[ME_MSG_ID] = offset_msg_id(store, offset);
        if (v[ME_MSG_ID] == NULL) goto fail;
    } else {
        Py_INCREF(st.empty_str);
        v[ME_MSG_ID] = st.empty_str;
    }
    PyObject *msg = blank_instance(st.message_ext);
    if (msg == NULL) goto fail;
    if (body == Py_None || PyBytes_GET_SIZE(body) == 0) body = st.empty_bytes;
    Py_INCREF(topic);
    v[ME_TOPIC] = topic;
    Py_INCREF(body);
    v[ME_BODY] = body;
#define COPY(me, rv)    \
    Py_INCREF(f[rv]);   \
    v[me] = f[rv];
    COPY(ME_FLAG, RV_FLAG)
    COPY(ME_QUEUE_ID, RV_QUEUE_ID)
    COPY(ME_STORE_SIZE, RV_SIZE)
    COPY(ME_QUEUE_OFFSET, RV_QUEUE_OFFSET)
    COPY(ME_SYS_FLAG, RV_SYS_FLAG)
    COPY(ME_BORN_TIMESTAMP, RV_BORN_TIMESTAMP)
    COPY(ME_STORE_TIMESTAMP, RV_STORE_TIMESTAMP)
    COPY(ME_COMMIT_LOG_OFFSET, RV_PHYSICAL_OFFSET)
    COPY(ME_BODY_CRC, RV_BODY_CRC)
    COPY(ME_RECONSUME_TIMES, RV_RECONSUME_TIMES)
    COPY(ME_PREPARED_OFFSET, RV_PREPARED_OFFSET)
#undef COPY
    for (int i = 0; i < ME_COUNT; i++) SLOT(msg, st.me_off[i]) = v[i];
    return msg;
fail:
    for (int i = 0; i < ME_COUNT; i++) Py_XDECREF(v[i]);
    return NULL;
}

/* Helpers defined with the index loop below. */
static void put_be32(unsigned char *p, int32_t v);
static void put_be64(unsigned char *p, int64_t v);
static int long_in(PyObject *v, long long lo, long long hi, long long *out);

/* -- the broker's send path ------------------------------------------------------------------
 *
 * A plain single send's hot codecs, each with the exact semantics of its pure counterpart and
 * handing it every case it does not take itself (so values and errors are the pure ones):
 *
 *   decode_send_header(ext, *, v2)                rocketq.protocol.headers.decode_send_header
 *   sent_properties(text, cluster, new_id)        rocketq.broker.send_properties.sent_properties
 *   send_ok_frame(opaque, result, queue_id, transaction_id, region_id, trace_on)
 *                                                 rocketq.broker.send.send_ok_frame
 *
 * Their setup_* functions (called once by those modules) bind the classes, key names, constants
 * and pure fallbacks. What each takes itself: header values that are ASCII digits short enough
 * to be in range, "true"/"false" flags and a born timestamp that is there; property text that is
 * ASCII (the record's properties are then ASCII too, written here without a second walk over a
 * dict by Python code); a single message's SUCCESS answer whose texts need no JSON escaping. */

enum {
    SH_PRODUCER_GROUP, SH_TOPIC, SH_DEFAULT_TOPIC, SH_DEFAULT_TOPIC_QUEUE_NUMS, SH_QUEUE_ID, SH_SYS_FLAG,
    SH_BORN_TIMESTAMP, SH_FLAG, SH_PROPERTIES, SH_RECONSUME_TIMES, SH_UNIT_MODE, SH_MAX_RECONSUME_TIMES,
    SH_BATCH, SH_BROKER_NAME, SH_COUNT
};
static const char *const sh_names[SH_COUNT] = {
    "producer_group", "topic", "default_topic", "default_topic_queue_nums", "queue_id", "sys_flag",
    "born_timestamp", "flag", "properties", "reconsume_times", "unit_mode", "max_reconsume_times", "batch",
    "broker_name",
};

static struct {
    PyTypeObject *header_type;      /* SendMessageRequestHeader */
    Py_ssize_t sh_off[SH_COUNT];
    PyObject *keys[2][SH_COUNT];    /* extFields keys: V1 names, V2 letters, in field order */
    PyObject *pure_header;          /* pure decode_send_header */
    PyObject *str_v2, *str_true, *str_false, *str_default_topic;
    PyObject *pure_properties;      /* pure sent_properties */
    PyObject *encoded_or_none;      /* encode_properties(props).encode() or None when refused */
    PyObject *str_pop_ck, *str_uniq_key, *str_cluster;
    PyObject *pure_answer;          /* pure send_ok_frame */
    PyTypeObject *result_type;      /* PutMessageResult, a tuple subclass */
    long long flag_response, version;
    char language[32];
} ss;

static PyObject *setup_send_header(PyObject *self, PyObject *args) {
    PyObject *cls, *pure, *v1, *v2;
    if (!PyArg_ParseTuple(args, "OOO!O!:setup_send_header", &cls, &pure, &PyTuple_Type, &v1, &PyTuple_Type, &v2))
        return NULL;
    if (!PyType_Check(cls) || PyTuple_GET_SIZE(v1) != SH_COUNT || PyTuple_GET_SIZE(v2) != SH_COUNT) {
        PyErr_SetString(PyExc_TypeError, "setup_send_header(SendMessageRequestHeader, pure, 14 V1 keys, 14 V2 keys)");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, sh_names, ss.sh_off, SH_COUNT) < 0) return NULL;
    for (int i = 0; i < SH_COUNT; i++) {
        PyObject *k1 = PyTuple_GET_ITEM(v1, i), *k2 = PyTuple_GET_ITEM(v2, i);
        if (!PyUnicode_CheckExact(k1) || !PyUnicode_CheckExact(k2)) {
            PyErr_SetString(PyExc_TypeError, "setup_send_header: the keys must be str");
            return NULL;
        }
        Py_INCREF(k1); Py_INCREF(k2);
        Py_XSETREF(ss.keys[0][i], k1);
        Py_XSETREF(ss.keys[1][i], k2);
    }
    if (ss.str_v2 == NULL) {
        ss.str_v2 = PyUnicode_InternFromString("v2");
        ss.str_true = PyUnicode_InternFromString("true");
        ss.str_false = PyUnicode_InternFromString("false");
        ss.str_default_topic = PyUnicode_InternFromString("TBW102");
        if (ss.str_v2 == NULL || ss.str_true == NULL || ss.str_false == NULL || ss.str_default_topic == NULL)
            return NULL;
    }
    Py_INCREF(cls); Py_INCREF(pure);
    Py_XSETREF(ss.header_type, (PyTypeObject *)cls);
    Py_XSETREF(ss.pure_header, pure);
    Py_RETURN_NONE;
}

/* ext[key], borrowed; NULL when absent (-2 in *err on a lookup failure) */
static PyObject *ext_get(PyObject *ext, PyObject *key, int *err) {
    PyObject *v = PyDict_GetItemWithError(ext, key);
    if (v == NULL && PyErr_Occurred()) *err = 1;
    return v;
}

/* An int field: 1 with its value when v is 1..maxd ASCII digits, 0 when v is absent, -1 when it
 * is anything else (the pure function decides). */
static int digits_of(PyObject *v, Py_ssize_t maxd, long long *out) {
    if (v == NULL) return 0;
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v)) return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    if (n < 1 || n > maxd) return -1;
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(v);
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        x = x * 10 + (p[i] - '0');
    }
    *out = x;
    return 1;
}

/* A boolean field: 0/1 for absent, "false" or "true"; -1 for anything else. */
static int flag_of(PyObject *v) {
    if (v == NULL) return 0;
    if (!PyUnicode_CheckExact(v)) return -1;
    if (v == ss.str_false || PyUnicode_Compare(v, ss.str_false) == 0) return 0;
    if (v == ss.str_true || PyUnicode_Compare(v, ss.str_true) == 0) return 1;
    return -1;
}

static PyObject *pure_send_header(PyObject *ext, PyObject *v2) {
    PyObject *args = PyTuple_Pack(1, ext);
    if (args == NULL) return NULL;
    PyObject *kwargs = Py_BuildValue("{OO}", ss.str_v2, v2);
    PyObject *out = kwargs == NULL ? NULL : PyObject_Call(ss.pure_header, args, kwargs);
    Py_DECREF(args);
    Py_XDECREF(kwargs);
    return out;
}

static PyObject *send_header_of(PyObject *ext, PyObject *v2obj, PyObject *const *val);

static PyObject *decode_send_header(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (ss.header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_send_header() was not called");
        return NULL;
    }
    if (nargs != 1 || kwnames == NULL || PyTuple_GET_SIZE(kwnames) != 1 ||
        PyTuple_GET_ITEM(kwnames, 0) != ss.str_v2) /* an interned name: any other call is the pure one's */
        return PyObject_Vectorcall(ss.pure_header, args, nargsf, kwnames);
    PyObject *ext = args[0], *v2obj = args[1];
    if (!PyDict_CheckExact(ext)) return pure_send_header(ext, v2obj);
    int v2 = PyObject_IsTrue(v2obj);
    if (v2 < 0) return NULL;
    PyObject *const *keys = ss.keys[v2];
    PyObject *val[SH_COUNT];
    int err = 0;
    for (int i = 0; i < SH_COUNT; i++) { /* held: a lookup may compare keys with Python code */
        val[i] = ext_get(ext, keys[i], &err);
        Py_XINCREF(val[i]);
    }
    PyObject *h = err ? NULL : send_header_of(ext, v2obj, val);
    for (int i = 0; i < SH_COUNT; i++) Py_XDECREF(val[i]);
    return h;
}

/* The header of the extFields values val (by field; NULL: absent), or the pure function's. */
static PyObject *send_header_of(PyObject *ext, PyObject *v2obj, PyObject *const *val) {
    long long nums[SH_COUNT];
    /* field: max digits, default (-1: required / absent is unusual, -2: None when absent) */
    static const struct { int field; Py_ssize_t digits; long long absent; } ints[] = {
        {SH_DEFAULT_TOPIC_QUEUE_NUMS, 9, 4}, {SH_QUEUE_ID, 9, -1}, {SH_SYS_FLAG, 9, 0},
        {SH_BORN_TIMESTAMP, 18, -1}, {SH_FLAG, 9, 0}, {SH_RECONSUME_TIMES, 9, -2},
        {SH_MAX_RECONSUME_TIMES, 9, -2},
    };
    int present[SH_COUNT] = {0};
    if (val[SH_TOPIC] == NULL) return pure_send_header(ext, v2obj);
    for (size_t j = 0; j < sizeof ints / sizeof ints[0]; j++) {
        int f = ints[j].field;
        int got = digits_of(val[f], ints[j].digits, &nums[f]);
        if (got < 0 || (got == 0 && ints[j].absent == -1)) return pure_send_header(ext, v2obj);
        present[f] = got;
        if (!got) nums[f] = ints[j].absent;
    }
    int unit_mode = flag_of(val[SH_UNIT_MODE]), batch = flag_of(val[SH_BATCH]);
    PyObject *dt = val[SH_DEFAULT_TOPIC];
    if (unit_mode < 0 || batch < 0 || (dt != NULL && !PyUnicode_CheckExact(dt)))
        return pure_send_header(ext, v2obj);
    if (dt == NULL || PyUnicode_GET_LENGTH(dt) == 0) dt = ss.str_default_topic;

    PyObject *h = blank_instance(ss.header_type);
    if (h == NULL) return NULL;
    const Py_ssize_t *off = ss.sh_off;
    for (int i = 0; i < SH_COUNT; i++) {
        PyObject *v;
        switch (i) {
        case SH_PRODUCER_GROUP: v = val[i] != NULL ? val[i] : st.empty_str; Py_INCREF(v); break;
        case SH_DEFAULT_TOPIC: v = dt; Py_INCREF(v); break;
        case SH_TOPIC: case SH_PROPERTIES: case SH_BROKER_NAME:
            v = val[i] != NULL ? val[i] : Py_None; Py_INCREF(v); break;
        case SH_UNIT_MODE: v = PyBool_FromLong(unit_mode); break;
        case SH_BATCH: v = PyBool_FromLong(batch); break;
        case SH_RECONSUME_TIMES: case SH_MAX_RECONSUME_TIMES:
            if (!present[i]) { v = Py_None; Py_INCREF(v); break; }
            /* fall through */
        default: v = PyLong_FromLongLong(nums[i]); break;
        }
        if (v == NULL) {
            Py_DECREF(h);
            return NULL;
        }
        SLOT(h, off[i]) = v;
    }
    return h;
}

static PyObject *setup_sent_properties(PyObject *self, PyObject *args) {
    PyObject *pure, *encoded_or_none;
    if (!PyArg_ParseTuple(args, "OO:setup_sent_properties", &pure, &encoded_or_none)) return NULL;
    if (ss.str_pop_ck == NULL) {
        ss.str_pop_ck = PyUnicode_InternFromString("POP_CK");
        ss.str_uniq_key = PyUnicode_InternFromString("UNIQ_KEY");
        ss.str_cluster = PyUnicode_InternFromString("CLUSTER");
        if (ss.str_pop_ck == NULL || ss.str_uniq_key == NULL || ss.str_cluster == NULL) return NULL;
    }
    Py_INCREF(pure); Py_INCREF(encoded_or_none);
    Py_XSETREF(ss.pure_properties, pure);
    Py_XSETREF(ss.encoded_or_none, encoded_or_none);
    Py_RETURN_NONE;
}

/* True when s is an exact str of ASCII characters other than the two separators. */
static int plain_ascii(PyObject *s) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) return 0;
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    return memchr(p, 1, (size_t)n) == NULL && memchr(p, 2, (size_t)n) == NULL;
}

/* The properties' record bytes, written here when every name and value is plain ASCII, else
 * by the pure encoding (which gives None for what encode_properties refuses). */
static PyObject *encode_plain(PyObject *props) {
    Py_ssize_t pos = 0, total = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!plain_ascii(k) || !plain_ascii(v)) return PyObject_CallOneArg(ss.encoded_or_none, props);
        total += PyUnicode_GET_LENGTH(k) + PyUnicode_GET_LENGTH(v) + 2;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    char *w = PyBytes_AS_STRING(out);
    pos = 0;
    while (PyDict_Next(props, &pos, &k, &v)) {
        Py_ssize_t kl = PyUnicode_GET_LENGTH(k), vl = PyUnicode_GET_LENGTH(v);
        memcpy(w, PyUnicode_1BYTE_DATA(k), (size_t)kl);
        w += kl;
        *w++ = '\x01';
        memcpy(w, PyUnicode_1BYTE_DATA(v), (size_t)vl);
        w += vl;
        *w++ = '\x02';
    }
    return out;
}

static PyObject *sent_properties(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ss.pure_properties == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_sent_properties() was not called");
        return NULL;
    }
    if (nargs != 3) return PyObject_Vectorcall(ss.pure_properties, args, (size_t)nargs, NULL);
    PyObject *text = args[0], *cluster = args[1], *new_id = args[2];
    if (text == Py_None) text = st.empty_str;
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text))
        return PyObject_Vectorcall(ss.pure_properties, args, 3, NULL);
    PyObject *props = PyDict_New();
    if (props == NULL) return NULL;
    const char *p = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), at = 0;
    /* text.split("\x02"): every piece of 3 or more chars whose first "\x01" has a name before
     * it and a value after it is a property (a later piece of the same name wins) */
    while (at < n) {
        const char *end = memchr(p + at, 2, (size_t)(n - at));
        Py_ssize_t stop = end != NULL ? end - p : n;
        if (stop - at >= 3) {
            const char *sep = memchr(p + at, 1, (size_t)(stop - at));
            if (sep != NULL && sep > p + at && sep < p + stop - 1) {
                Py_ssize_t ks = sep - p;
                PyObject *key = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, p + at, ks - at);
                PyObject *value = key == NULL ? NULL
                                  : PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, sep + 1, stop - ks - 1);
                int bad = value == NULL || PyDict_SetItem(props, key, value) < 0;
                Py_XDECREF(key);
                Py_XDECREF(value);
                if (bad) {
                    Py_DECREF(props);
                    return NULL;
                }
            }
        }
        at = stop + 1;
    }
    /* base_properties: POP_CK dropped, UNIQ_KEY added when missing, CLUSTER set */
    PyObject *uniq;
    if (PyDict_GetItemWithError(props, ss.str_pop_ck) != NULL) {
        if (PyDict_DelItem(props, ss.str_pop_ck) < 0) goto fail;
    } else if (PyErr_Occurred()) {
        goto fail;
    }
    uniq = PyDict_GetItemWithError(props, ss.str_uniq_key); /* a decoded value is never empty */
    if (uniq == NULL) {
        if (PyErr_Occurred()) goto fail;
        PyObject *id = PyObject_CallNoArgs(new_id);
        if (id == NULL) goto fail;
        int bad = PyDict_SetItem(props, ss.str_uniq_key, id);
        Py_DECREF(id);
        if (bad < 0) goto fail;
    }
    if (PyDict_SetItem(props, ss.str_cluster, cluster) < 0) goto fail;
    PyObject *encoded = encode_plain(props);
    if (encoded == NULL) goto fail;
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(encoded);
        goto fail;
    }
    PyTuple_SET_ITEM(out, 0, props);
    PyTuple_SET_ITEM(out, 1, encoded);
    return out;
fail:
    Py_DECREF(props);
    return NULL;
}

static PyObject *setup_send_ok_frame(PyObject *self, PyObject *args) {
    PyObject *pure, *cls;
    long long flag, version;
    const char *language;
    if (!PyArg_ParseTuple(args, "OOLsL:setup_send_ok_frame", &pure, &cls, &flag, &language, &version)) return NULL;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "setup_send_ok_frame: PutMessageResult must be a tuple class");
        return NULL;
    }
    if (strlen(language) >= sizeof ss.language) {
        PyErr_SetString(PyExc_ValueError, "setup_send_ok_frame: language name too long");
        return NULL;
    }
    strcpy(ss.language, language);
    ss.flag_response = flag;
    ss.version = version;
    Py_INCREF(pure); Py_INCREF(cls);
    Py_XSETREF(ss.pure_answer, pure);
    Py_XSETREF(ss.result_type, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* The length of s as a JSON string's content that needs no escaping (ASCII, no control
 * character, quote or backslash), or -1. */
static Py_ssize_t json_plain(PyObject *s, Py_ssize_t max) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n > max) return -1;
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\') return -1;
    return n;
}

static int ll_of(PyObject *v, long long *out) {
    if (!PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

#define TEXT_MAX 256

/* v in decimal at w (at most 20 characters); the position after it */
static char *put_decimal(char *w, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *w++ = '-';
    while (n) *w++ = tmp[--n];
    return w;
}

static PyObject *send_ok_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ss.pure_answer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_send_ok_frame() was not called");
        return NULL;
    }
    if (nargs != 6) return PyObject_Vectorcall(ss.pure_answer, args, (size_t)nargs, NULL);
    PyObject *result = args[1], *tx = args[3], *region = args[4];
    long long opaque, queue_id, physical, queue_offset;
    if (Py_TYPE(result) != ss.result_type || PyTuple_GET_SIZE(result) != 8 || PyTuple_GET_ITEM(result, 7) != Py_None ||
        ll_of(args[0], &opaque) < 0 || ll_of(args[2], &queue_id) < 0 ||
        ll_of(PyTuple_GET_ITEM(result, 1), &physical) < 0 || ll_of(PyTuple_GET_ITEM(result, 3), &queue_offset) < 0)
        return PyObject_Vectorcall(ss.pure_answer, args, 6, NULL);
    PyObject *host = PyTuple_GET_ITEM(result, 5);
    Py_ssize_t region_len = json_plain(region, TEXT_MAX), tx_len = 0;
    int with_tx = 0;
    if (tx != Py_None) {
        if (!PyUnicode_CheckExact(tx)) return PyObject_Vectorcall(ss.pure_answer, args, 6, NULL);
        tx_len = json_plain(tx, TEXT_MAX);
        with_tx = PyUnicode_GET_LENGTH(tx) > 0;
    }
    if (!PyBytes_CheckExact(host) || (PyBytes_GET_SIZE(host) != 8 && PyBytes_GET_SIZE(host) != 20) ||
        region_len < 0 || tx_len < 0)
        return PyObject_Vectorcall(ss.pure_answer, args, 6, NULL);
    int trace_on = PyObject_IsTrue(args[5]);
    if (trace_on < 0) return NULL;
    /* the offset message id: store host ‖ physical offset, uppercase hex */
    unsigned char raw[28];
    Py_ssize_t hl = PyBytes_GET_SIZE(host);
    memcpy(raw, PyBytes_AS_STRING(host), (size_t)hl);
    put_be64(raw + hl, physical);
    char msg_id[57];
    for (Py_ssize_t i = 0; i < hl + 8; i++) {
        msg_id[2 * i] = HEX[raw[i] >> 4];
        msg_id[2 * i + 1] = HEX[raw[i] & 0xF];
    }
    msg_id[2 * (hl + 8)] = '\0';
    char frame[8 + 512 + 2 * TEXT_MAX]; /* the fixed text, the numbers and the two texts fit */
    char *w = frame + 8;
#define PUT_TEXT(t) (memcpy(w, (t), sizeof(t) - 1), w += sizeof(t) - 1)
    PUT_TEXT("{\"code\":0,\"extFields\":{\"msgId\":\"");
    memcpy(w, msg_id, (size_t)(2 * (hl + 8)));
    w += 2 * (hl + 8);
    PUT_TEXT("\",\"queueId\":\"");
    w = put_decimal(w, queue_id);
    PUT_TEXT("\",\"queueOffset\":\"");
    w = put_decimal(w, queue_offset);
    PUT_TEXT("\",\"MSG_REGION\":\"");
    memcpy(w, PyUnicode_1BYTE_DATA(region), (size_t)region_len);
    w += region_len;
    if (trace_on) PUT_TEXT("\",\"TRACE_ON\":\"true\"");
    else PUT_TEXT("\",\"TRACE_ON\":\"false\"");
    if (with_tx) {
        PUT_TEXT(",\"transactionId\":\"");
        memcpy(w, PyUnicode_1BYTE_DATA(tx), (size_t)tx_len);
        w += tx_len;
        *w++ = '"';
    }
    PUT_TEXT("},\"flag\":");
    w = put_decimal(w, ss.flag_response);
    PUT_TEXT(",\"language\":\"");
    size_t lang_len = strlen(ss.language);
    memcpy(w, ss.language, lang_len);
    w += lang_len;
    PUT_TEXT("\",\"opaque\":");
    w = put_decimal(w, opaque);
    PUT_TEXT(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    w = put_decimal(w, ss.version);
    *w++ = '}';
#undef PUT_TEXT
    Py_ssize_t len = w - (frame + 8);
    put_be32((unsigned char *)frame, (int32_t)(4 + len));
    put_be32((unsigned char *)frame + 4, (int32_t)len);
    return PyBytes_FromStringAndSize(frame, 8 + len);
}

/* -- the remoting JSON header ------------------------------------------------------------------
 *
 *   decode_json_header(header, body=b"")          rocketq.remoting.command.decode_json_header
 *
 * Takes the header a Java or Go client writes (fastjson: no whitespace, ASCII, integers, strings
 * whose escapes stand for ASCII characters, extFields an object of strings) and makes the
 * RemotingCommand itself, filling its slots; anything else (whitespace, non-ASCII bytes, a
 * number that is not a plain integer of up to 18 digits, true/false/null, arrays, a nested
 * object other than extFields, a key twice, a value of an unusual type for its field) goes to
 * the pure function, so values and errors are the pure ones. */

enum {
    RC_CODE, RC_LANGUAGE, RC_VERSION, RC_OPAQUE, RC_FLAG, RC_REMARK, RC_EXT_FIELDS, RC_BODY, RC_SERIALIZE_TYPE,
    RC_COUNT
};
static const char *const rc_names[RC_COUNT] = {
    "code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body", "serialize_type",
};

static struct {
    PyTypeObject *command_type;     /* RemotingCommand */
    Py_ssize_t rc_off[RC_COUNT];
    PyObject *pure;                 /* pure decode_json_header */
    PyObject *language_by_name;     /* name -> LanguageCode */
    PyObject *language_default;     /* LanguageCode.JAVA: no language key */
    PyObject *language_other;       /* LanguageCode.OTHER: a name it does not know */
    PyObject *serialize_json;       /* SerializeType.JSON */
    PyObject *str_java;             /* "JAVA" */
} jh;

static PyObject *setup_json_header(PyObject *self, PyObject *args) {
    PyObject *cls, *pure, *by_name, *dflt, *other, *json;
    if (!PyArg_ParseTuple(args, "OOO!OOO:setup_json_header", &cls, &pure, &PyDict_Type, &by_name, &dflt, &other,
                          &json))
        return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_json_header: RemotingCommand must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, rc_names, jh.rc_off, RC_COUNT) < 0) return NULL;
    Py_INCREF(cls); Py_INCREF(pure); Py_INCREF(by_name); Py_INCREF(dflt); Py_INCREF(other); Py_INCREF(json);
    Py_XSETREF(jh.command_type, (PyTypeObject *)cls);
    Py_XSETREF(jh.pure, pure);
    Py_XSETREF(jh.language_by_name, by_name);
    Py_XSETREF(jh.language_default, dflt);
    Py_XSETREF(jh.language_other, other);
    Py_XSETREF(jh.serialize_json, json);
    if (jh.str_java == NULL && (jh.str_java = PyUnicode_InternFromString("JAVA")) == NULL) return NULL;
    Py_RETURN_NONE;
}

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, at;
} jscan;

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The JSON string at s->at (its opening quote), scanned: its content is p[*start, *end), its
 * decoded length *out_len, *escaped when it has escapes; s->at moves past it. 0 when it is not a
 * string this takes (s->at unchanged). */
static int jspan(jscan *s, Py_ssize_t *start, Py_ssize_t *end, Py_ssize_t *out_len, int *escaped) {
    const unsigned char *p = s->p;
    Py_ssize_t i = s->at;
    if (i >= s->n || p[i] != '"') return 0;
    i++;
    *start = i;
    Py_ssize_t len = 0;
    int esc = 0;
    for (;;) {
        if (i >= s->n) return 0;
        unsigned char c = p[i];
        if (c == '"') break;
        if (c < 0x20 || c >= 0x80) return 0;
        if (c == '\\') {
            esc = 1;
            if (i + 1 >= s->n) return 0;
            unsigned char e = p[i + 1];
            if (e == 'u') {
                if (i + 5 >= s->n) return 0;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[i + k]);
                    if (h < 0) return 0;
                    v = v * 16 + h;
                }
                if (v >= 0x80) return 0;
                i += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                i += 2;
            } else {
                return 0;
            }
        } else {
            i++;
        }
        len++;
    }
    *end = i;
    *out_len = len;
    *escaped = esc;
    s->at = i + 1;
    return 1;
}

/* The JSON string at s->at as a str; NULL without an exception when it is not one this takes
 * (NULL with one on a failure of memory). */
static PyObject *jstring(jscan *s) {
    Py_ssize_t start, end, out_len;
    int escaped;
    if (!jspan(s, &start, &end, &out_len, &escaped)) return NULL;
    const unsigned char *p = s->p;
    if (!escaped) return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, p + start, end - start);
    PyObject *str = PyUnicode_New(out_len, 127);
    if (str == NULL) return NULL;
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(str);
    for (Py_ssize_t i = start; i < end;) {
        unsigned char c = p[i];
        if (c != '\\') {
            *w++ = c;
            i++;
            continue;
        }
        unsigned char e = p[i + 1];
        switch (e) {
        case 'u':
            *w++ = (Py_UCS1)(hexval(p[i + 2]) * 4096 + hexval(p[i + 3]) * 256 + hexval(p[i + 4]) * 16 +
                             hexval(p[i + 5]));
            i += 6;
            continue;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        default: *w++ = e; break; /* " \ / */
        }
        i += 2;
    }
    return str;
}

/* A plain JSON integer of up to 18 digits at s->at, followed by ',' or '}': 1 with its value,
 * 0 when it is not one (another number form, or anything else). */
static int jint(jscan *s, long long *out) {
    const unsigned char *p = s->p;
    Py_ssize_t i = s->at;
    int neg = 0;
    if (i < s->n && p[i] == '-') {
        neg = 1;
        i++;
    }
    Py_ssize_t first = i;
    long long v = 0;
    while (i < s->n && p[i] >= '0' && p[i] <= '9') {
        v = v * 10 + (p[i] - '0');
        i++;
    }
    Py_ssize_t digits = i - first;
    if (digits < 1 || digits > 18 || (digits > 1 && p[first] == '0')) return 0;
    if (i >= s->n || (p[i] != ',' && p[i] != '}')) return 0;
    s->at = i;
    *out = neg ? -v : v;
    return 1;
}

/* The extFields object at s->at into a new dict; NULL without an exception when it is not an
 * object of strings this takes. */
static PyObject *jext(jscan *s) {
    const unsigned char *p = s->p;
    if (s->at >= s->n || p[s->at] != '{') return NULL;
    s->at++;
    PyObject *ext = PyDict_New();
    if (ext == NULL) return NULL;
    if (s->at < s->n && p[s->at] == '}') {
        s->at++;
        return ext;
    }
    for (;;) {
        PyObject *key = jstring(s);
        if (key == NULL) goto fail;
        if (s->at >= s->n || p[s->at] != ':') {
            Py_DECREF(key);
            goto fail;
        }
        s->at++;
        PyObject *value = jstring(s);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        int bad = PyDict_SetItem(ext, key, value) < 0; /* a key twice: json keeps the last value */
        Py_DECREF(key);
        Py_DECREF(value);
        if (bad || s->at >= s->n) goto fail;
        if (p[s->at] == '}') {
            s->at++;
            return ext;
        }
        if (p[s->at] != ',') goto fail;
        s->at++;
    }
fail:
    Py_DECREF(ext);
    return NULL;
}

/* The JSON keys of RemotingCommand's fields, by field (NULL: not a key of the header). */
static const char *const json_keys[RC_COUNT] = {
    [RC_CODE] = "code", [RC_LANGUAGE] = "language", [RC_VERSION] = "version", [RC_OPAQUE] = "opaque",
    [RC_FLAG] = "flag", [RC_REMARK] = "remark", [RC_EXT_FIELDS] = "extFields",
    [RC_SERIALIZE_TYPE] = "serializeTypeCurrentRPC",
};

static PyObject *decode_json_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (jh.pure == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_json_header() was not called");
        return NULL;
    }
    if (nargs < 1 || nargs > 2 || !PyBytes_CheckExact(args[0]) || (nargs == 2 && !PyBytes_CheckExact(args[1])))
        return PyObject_Vectorcall(jh.pure, args, (size_t)nargs, NULL);
    PyObject *body = nargs == 2 ? args[1] : st.empty_bytes;
    jscan s = {(const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), 0};
    const unsigned char *p = s.p;
    long long nums[RC_COUNT] = {0};
    PyObject *language = NULL, *remark = NULL, *ext = NULL;
    unsigned seen = 0;
    if (s.n < 2 || p[0] != '{') goto pure;
    s.at = 1;
    if (p[1] == '}') {
        s.at = 2;
    } else {
        for (;;) {
            Py_ssize_t ks, ke, kl;
            int kesc;
            if (!jspan(&s, &ks, &ke, &kl, &kesc) || kesc || s.at >= s.n || p[s.at] != ':') goto pure;
            s.at++;
            int field = -1, ok = 1;
            for (int f = 0; f < RC_COUNT; f++) { /* a key written with escapes goes to the pure path */
                if (json_keys[f] != NULL && (Py_ssize_t)strlen(json_keys[f]) == kl &&
                    memcmp(p + ks, json_keys[f], (size_t)kl) == 0) {
                    field = f;
                    break;
                }
            }
            if (field < 0 || (seen & (1u << field))) goto pure; /* an unknown key, or a key twice */
            seen |= 1u << field;
            switch (field) {
            case RC_EXT_FIELDS:
                ext = jext(&s);
                ok = ext != NULL;
                break;
            case RC_LANGUAGE: {
                Py_ssize_t ls, le, ll;
                int lesc;
                jscan at = s;
                if (jspan(&s, &ls, &le, &ll, &lesc) && !lesc && ll == 4 && memcmp(p + ls, "JAVA", 4) == 0) {
                    language = Py_NewRef(jh.str_java); /* what Java clients send: no new str */
                } else {
                    s = at;
                    language = jstring(&s);
                }
                ok = language != NULL;
                break;
            }
            case RC_REMARK:
                remark = jstring(&s);
                ok = remark != NULL;
                break;
            case RC_SERIALIZE_TYPE: { /* read and ignored */
                Py_ssize_t is, ie, il;
                int iesc;
                ok = jspan(&s, &is, &ie, &il, &iesc);
                break;
            }
            default:
                ok = jint(&s, &nums[field]);
                break;
            }
            if (!ok || s.at >= s.n) goto pure;
            if (p[s.at] == '}') {
                s.at++;
                break;
            }
            if (p[s.at] != ',') goto pure;
            s.at++;
        }
    }
    if (s.at != s.n) goto pure;
    PyObject *lang;
    if (language == NULL) {
        lang = jh.language_default;
    } else {
        lang = PyDict_GetItemWithError(jh.language_by_name, language);
        if (lang == NULL) {
            if (PyErr_Occurred()) goto fail;
            lang = jh.language_other;
        }
    }
    if (ext == NULL && (ext = PyDict_New()) == NULL) goto fail;
    PyObject *cmd = blank_instance(jh.command_type);
    if (cmd == NULL) goto fail;
    const Py_ssize_t *off = jh.rc_off;
    static const int int_fields[] = {RC_CODE, RC_VERSION, RC_OPAQUE, RC_FLAG};
    for (size_t j = 0; j < sizeof int_fields / sizeof int_fields[0]; j++) {
        PyObject *v = PyLong_FromLongLong(nums[int_fields[j]]);
        if (v == NULL) {
            Py_DECREF(cmd);
            goto fail;
        }
        SLOT(cmd, off[int_fields[j]]) = v;
    }
    Py_INCREF(lang);
    SLOT(cmd, off[RC_LANGUAGE]) = lang;
    SLOT(cmd, off[RC_REMARK]) = remark != NULL ? remark : Py_NewRef(Py_None);
    SLOT(cmd, off[RC_EXT_FIELDS]) = ext;
    SLOT(cmd, off[RC_BODY]) = Py_NewRef(body);
    SLOT(cmd, off[RC_SERIALIZE_TYPE]) = Py_NewRef(jh.serialize_json);
    Py_XDECREF(language);
    return cmd;
pure:
    if (PyErr_Occurred()) goto fail; /* memory */
    Py_XDECREF(language);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    return PyObject_Vectorcall(jh.pure, args, (size_t)nargs, NULL);
fail:
    Py_XDECREF(language);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    return NULL;
}

#define I32_MIN (-2147483647LL - 1)
#define I32_MAX 2147483647LL

/* -- the remoting frame loop -------------------------------------------------------------------
 *
 *   parse_frames(src, pos, end, max_body, header_mask, out) -> (pos, need)
 *
 * FrameDecoder._parse's loop over the complete frames of src[pos:end] whose header is JSON: each
 * decoded (decode_json_header above) and appended to out. need is what the decoder waits for
 * (4, or a partial frame's whole length) once every complete frame is taken, or 0 when the loop
 * stopped at a frame it leaves to the pure loop, which takes it from pos and fails or decodes as
 * it always did: a length or header length out of bounds, a ROCKETMQ or unknown serialize type,
 * or a header whose decoding raised (the pure loop meets the same error). */

static PyObject *parse_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long pos, end, max_body, mask;
    if (nargs != 6 || long_in(args[1], 0, PY_SSIZE_T_MAX, &pos) < 0 || long_in(args[2], 0, PY_SSIZE_T_MAX, &end) < 0 ||
        long_in(args[3], 0, I32_MAX, &max_body) < 0 || long_in(args[4], 0, 0xFFFFFFFFLL, &mask) < 0 ||
        !PyList_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "parse_frames(src, pos, end, max_body, header_mask, out)");
        return NULL;
    }
    PyObject *out = args[5];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (end > view.len) end = view.len;
    const unsigned char *p = (const unsigned char *)view.buf;
    long long need = 4;
    while (end - pos >= 4) {
        long long length = be32(p + pos);
        if (length < 4 || length > max_body) {
            need = 0;
            break;
        }
        long long frame_end = pos + 4 + length;
        if (frame_end > end) {
            need = 4 + length;
            break;
        }
        uint32_t type_hlen = (uint32_t)be32(p + pos + 4);
        long long hlen = type_hlen & (uint32_t)mask;
        if (hlen > length - 4 || (type_hlen >> 24) != 0) {
            need = 0;
            break;
        }
        long long header_end = pos + 8 + hlen;
        PyObject *pair[2];
        pair[0] = PyBytes_FromStringAndSize((const char *)p + pos + 8, (Py_ssize_t)hlen);
        pair[1] = header_end < frame_end
                      ? PyBytes_FromStringAndSize((const char *)p + header_end, (Py_ssize_t)(frame_end - header_end))
                      : Py_NewRef(st.empty_bytes);
        PyObject *cmd = pair[0] == NULL || pair[1] == NULL ? NULL : decode_json_header(NULL, pair, 2);
        Py_XDECREF(pair[0]);
        Py_XDECREF(pair[1]);
        if (cmd == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto fail;
            PyErr_Clear(); /* the pure loop decodes this frame again and meets the same error */
            need = 0;
            break;
        }
        int bad = PyList_Append(out, cmd);
        Py_DECREF(cmd);
        if (bad < 0) goto fail;
        pos = frame_end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(LL)", pos, need);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

/* -- the remoting JSON header and frame, written ------------------------------------------------
 *
 *   encode_json_header(cmd)       rocketq.remoting.command.encode_json_header
 *   encode_frame(cmd)             rocketq.remoting.codec.encode
 *
 * Write what the pure functions write for a RemotingCommand whose fields have their usual types:
 * ints (their subclasses too: the request code enums) that fit 64 bits, a language the name
 * table knows or does not (then "OTHER"), a remark None or a str, extFields a dict of str to str
 * (insertion order), texts escaped as json.encoder.encode_basestring does (", \ and the control
 * characters; everything else, non-ASCII included, as its UTF-8). encode_frame also wants a JSON
 * serialize type and a bytes body. Anything else (a str subclass, a lone surrogate, a value of
 * another type, a header over 24 bits or a frame over the int32 length) goes to the pure
 * function, so the bytes and the errors are the pure ones. Two passes over the fields: the
 * length first, then the bytes into the result, which is allocated once. */

static struct {
    PyTypeObject *command_type;     /* RemotingCommand */
    Py_ssize_t off[RC_COUNT];
    PyObject *pure_header;          /* pure encode_json_header */
    PyObject *pure_frame;           /* pure encode (codec) */
    PyObject *language_name;        /* int -> language name */
    PyObject *serialize_json;       /* SerializeType.JSON */
} je;

static PyObject *setup_json_encode(PyObject *self, PyObject *args) {
    PyObject *cls, *pure, *names, *json;
    if (!PyArg_ParseTuple(args, "OOO!O:setup_json_encode", &cls, &pure, &PyDict_Type, &names, &json)) return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_json_encode: RemotingCommand must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, rc_names, je.off, RC_COUNT) < 0) return NULL;
    Py_INCREF(cls); Py_INCREF(pure); Py_INCREF(names); Py_INCREF(json);
    Py_XSETREF(je.command_type, (PyTypeObject *)cls);
    Py_XSETREF(je.pure_header, pure);
    Py_XSETREF(je.language_name, names);
    Py_XSETREF(je.serialize_json, json);
    Py_RETURN_NONE;
}

static PyObject *setup_encode_frame(PyObject *self, PyObject *pure) {
    Py_INCREF(pure);
    Py_XSETREF(je.pure_frame, pure);
    Py_RETURN_NONE;
}

/* The UTF-8 bytes of the exact str s (*p, *n) and the length of its JSON string literal; -1
 * (no exception) when s is not an exact str or has no UTF-8 form. */
static Py_ssize_t jlit_len(PyObject *s, const char **p, Py_ssize_t *n) {
    if (!PyUnicode_CheckExact(s)) return -1;
    if (PyUnicode_IS_ASCII(s)) {
        *p = (const char *)PyUnicode_1BYTE_DATA(s);
        *n = PyUnicode_GET_LENGTH(s);
    } else if ((*p = PyUnicode_AsUTF8AndSize(s, n)) == NULL) {
        PyErr_Clear(); /* a lone surrogate: the pure function says so */
        return -1;
    }
    const unsigned char *u = (const unsigned char *)*p;
    Py_ssize_t len = *n + 2;
    for (Py_ssize_t i = 0; i < *n; i++) {
        unsigned char c = u[i];
        if (c < 0x20) len += (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') ? 1 : 5;
        else if (c == '"' || c == '\\') len += 1;
    }
    return len;
}

/* The JSON string literal of the n UTF-8 bytes at p, as encode_basestring writes it, at w. */
static char *put_jlit(char *w, const char *p, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        default:
            memcpy(w, "u00", 3);
            w[3] = hex[c >> 4];
            w[4] = hex[c & 0xF];
            w += 5;
        }
    }
    *w++ = '"';
    return w;
}

typedef struct {
    char num[4][24];                /* code, flag, opaque, version in decimal */
    Py_ssize_t num_len[4];
    const char *lang;
    Py_ssize_t lang_len;
    const char *remark;             /* NULL: none */
    Py_ssize_t remark_n;
    PyObject *ext;                  /* NULL: empty */
    Py_ssize_t len;                 /* the header's length */
} jhead;

/* The header of cmd measured into h: 1, or 0 when the pure function takes cmd, or -1 with an
 * exception (memory). */
static int jhead_measure(PyObject *cmd, jhead *h) {
    if (Py_TYPE(cmd) != je.command_type) return 0;
    const Py_ssize_t *off = je.off;
    static const int int_fields[4] = {RC_CODE, RC_FLAG, RC_OPAQUE, RC_VERSION};
    Py_ssize_t len = sizeof("{\"code\":,\"flag\":,\"language\":\"\",\"opaque\":,"
                            "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":}") - 1;
    for (int j = 0; j < 4; j++) {
        PyObject *v = SLOT(cmd, off[int_fields[j]]);
        if (v == NULL || !PyLong_Check(v)) return 0;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return 0;
        if (x == -1 && PyErr_Occurred()) return -1;
        h->num_len[j] = put_decimal(h->num[j], x) - h->num[j];
        len += h->num_len[j];
    }
    PyObject *language = SLOT(cmd, off[RC_LANGUAGE]);
    if (language == NULL) return 0;
    PyObject *name = PyDict_GetItemWithError(je.language_name, language);
    if (name == NULL) {
        if (PyErr_Occurred()) { /* unhashable: the pure lookup raises */
            PyErr_Clear();
            return 0;
        }
        h->lang = "OTHER";
        h->lang_len = 5;
    } else {
        if (!PyUnicode_CheckExact(name) || !PyUnicode_IS_ASCII(name)) return 0;
        h->lang = (const char *)PyUnicode_1BYTE_DATA(name);
        h->lang_len = PyUnicode_GET_LENGTH(name);
    }
    len += h->lang_len;
    PyObject *remark = SLOT(cmd, off[RC_REMARK]);
    if (remark == NULL) return 0;
    h->remark = NULL;
    if (remark != Py_None) {
        Py_ssize_t n = jlit_len(remark, &h->remark, &h->remark_n);
        if (n < 0) return 0;
        len += sizeof(",\"remark\":") - 1 + n;
    }
    PyObject *ext = SLOT(cmd, off[RC_EXT_FIELDS]);
    if (ext == NULL || !PyDict_CheckExact(ext)) return 0;
    h->ext = NULL;
    if (PyDict_GET_SIZE(ext) > 0) {
        h->ext = ext;
        len += sizeof(",\"extFields\":{}") - 1 + PyDict_GET_SIZE(ext) * 2 - 1; /* the colons and commas */
        Py_ssize_t i = 0;
        PyObject *k, *v;
        const char *p;
        Py_ssize_t n;
        while (PyDict_Next(ext, &i, &k, &v)) {
            Py_ssize_t kl = jlit_len(k, &p, &n), vl = jlit_len(v, &p, &n);
            if (kl < 0 || vl < 0) return 0;
            len += kl + vl;
        }
    }
    h->len = len;
    return 1;
}

/* The header measured into h, written at w; the position after it. */
static char *jhead_write(char *w, const jhead *h) {
#define PUT_TEXT(t) (memcpy(w, (t), sizeof(t) - 1), w += sizeof(t) - 1)
#define PUT_NUM(j) (memcpy(w, h->num[j], (size_t)h->num_len[j]), w += h->num_len[j])
    PUT_TEXT("{\"code\":");
    PUT_NUM(0);
    if (h->ext != NULL) {
        PUT_TEXT(",\"extFields\":{");
        Py_ssize_t i = 0;
        PyObject *k, *v;
        const char *p;
        Py_ssize_t n;
        int first = 1;
        while (PyDict_Next(h->ext, &i, &k, &v)) {
            if (!first) *w++ = ',';
            first = 0;
            jlit_len(k, &p, &n); /* measured already: the same text, no failure */
            w = put_jlit(w, p, n);
            *w++ = ':';
            jlit_len(v, &p, &n);
            w = put_jlit(w, p, n);
        }
        *w++ = '}';
    }
    PUT_TEXT(",\"flag\":");
    PUT_NUM(1);
    PUT_TEXT(",\"language\":\"");
    memcpy(w, h->lang, (size_t)h->lang_len);
    w += h->lang_len;
    PUT_TEXT("\",\"opaque\":");
    PUT_NUM(2);
    if (h->remark != NULL) {
        PUT_TEXT(",\"remark\":");
        w = put_jlit(w, h->remark, h->remark_n);
    }
    PUT_TEXT(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    PUT_NUM(3);
    *w++ = '}';
#undef PUT_NUM
#undef PUT_TEXT
    return w;
}

static PyObject *encode_json_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (je.pure_header == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_json_encode() was not called");
        return NULL;
    }
    jhead h;
    int ok = nargs == 1 ? jhead_measure(args[0], &h) : 0;
    if (ok < 0) return NULL;
    if (ok == 0) return PyObject_Vectorcall(je.pure_header, args, (size_t)nargs, NULL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, h.len);
    if (out == NULL) return NULL;
    jhead_write(PyBytes_AS_STRING(out), &h);
    return out;
}

static PyObject *encode_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (je.pure_header == NULL || je.pure_frame == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "rocketq._speedups.setup_json_encode() and setup_encode_frame() were not called");
        return NULL;
    }
    jhead h;
    int ok = nargs == 1 ? jhead_measure(args[0], &h) : 0;
    if (ok < 0) return NULL;
    PyObject *body = ok ? SLOT(args[0], je.off[RC_BODY]) : NULL;
    if (ok == 0 || SLOT(args[0], je.off[RC_SERIALIZE_TYPE]) != je.serialize_json || body == NULL ||
        !PyBytes_CheckExact(body) || h.len > 0xFFFFFF || 4 + h.len + PyBytes_GET_SIZE(body) > I32_MAX)
        return PyObject_Vectorcall(je.pure_frame, args, (size_t)nargs, NULL);
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    PyObject *out = PyBytes_FromStringAndSize(NULL, 8 + h.len + body_len);
    if (out == NULL) return NULL;
    char *w = PyBytes_AS_STRING(out);
    put_be32((unsigned char *)w, (int32_t)(4 + h.len + body_len));
    put_be32((unsigned char *)w + 4, (int32_t)h.len);
    w = jhead_write(w + 8, &h);
    memcpy(w, PyBytes_AS_STRING(body), (size_t)body_len);
    return out;
}

/* -- the CommitLog record of a single put ------------------------------------------------------
 *
 *   put_record(target, pos, length, msg, crc, queue_offset, physical, store_v6, now, store_host, topic)
 *
 * CommitLog.put_message's write of one V1 record with an IPv4 born host (the layout
 * rocketq.protocol.record.record_layout compiles for it) into the segment's buffer at pos: every
 * field from the BrokerMessage's slots and the put's values, TOTALSIZE last (the commit point).
 * True when written; False, with nothing written, when any value is not one this takes (not an
 * exact int in its field's range, not bytes, a record of another length, a buffer too short):
 * the caller then packs it with the struct layout, whose bytes or errors are the reference. */

enum {
    BM_TOPIC, BM_BODY, BM_PROPERTIES, BM_QUEUE_ID, BM_FLAG, BM_SYS_FLAG, BM_BORN_TIMESTAMP, BM_BORN_HOST,
    BM_RECONSUME_TIMES, BM_PREPARED_OFFSET, BM_COUNT
};
static const char *const bm_names[BM_COUNT] = {
    "topic", "body", "properties", "queue_id", "flag", "sys_flag", "born_timestamp", "born_host",
    "reconsume_times", "prepared_transaction_offset",
};
static PyTypeObject *broker_message;
static Py_ssize_t bm_off[BM_COUNT];

static PyObject *setup_put_record(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_put_record: BrokerMessage must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, bm_names, bm_off, BM_COUNT) < 0) return NULL;
    Py_INCREF(cls);
    Py_XSETREF(broker_message, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* Every field of one V1 record with an IPv4 born host at w but its TOTALSIZE (w[0..3]), which
 * the caller writes last: the commit point. With props NULL the properties' pl bytes are left
 * for the caller to write too (before the TOTALSIZE). */
static void fill_v1_record(unsigned char *w, int32_t crc, int32_t queue_id, int32_t flag, long long qoff,
                           long long physical, int32_t flags, long long born_ts, const char *born_host,
                           long long now, const char *store_host, Py_ssize_t sh, int32_t reconsume,
                           long long prepared, const char *body, Py_ssize_t bl, const char *topic, Py_ssize_t tl,
                           const char *props, Py_ssize_t pl) {
    put_be32(w + 4, MESSAGE_MAGIC_CODE);
    put_be32(w + 8, crc);
    put_be32(w + 12, queue_id);
    put_be32(w + 16, flag);
    put_be64(w + 20, qoff);
    put_be64(w + 28, physical);
    put_be32(w + 36, flags);
    put_be64(w + 40, born_ts);
    memcpy(w + 48, born_host, 8);
    put_be64(w + 56, now);
    unsigned char *q = w + 64;
    memcpy(q, store_host, (size_t)sh);
    q += sh;
    put_be32(q, reconsume);
    put_be64(q + 4, prepared);
    put_be32(q + 12, (int32_t)bl);
    q += 16;
    memcpy(q, body, (size_t)bl);
    q += bl;
    *q++ = (unsigned char)tl;
    memcpy(q, topic, (size_t)tl);
    q += tl;
    q[0] = (unsigned char)(pl >> 8);
    q[1] = (unsigned char)pl;
    if (props != NULL) memcpy(q + 2, props, (size_t)pl);
}

static PyObject *put_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "put_record(target, pos, length, msg, crc, queue_offset, physical, "
                                         "store_v6, now, store_host, topic)");
        return NULL;
    }
    PyObject *m = args[3], *store_host = args[9], *topic = args[10];
    if (broker_message == NULL || Py_TYPE(m) != broker_message || !PyBytes_CheckExact(store_host) ||
        !PyBytes_CheckExact(topic))
        Py_RETURN_FALSE;
    PyObject *body = SLOT(m, bm_off[BM_BODY]), *props = SLOT(m, bm_off[BM_PROPERTIES]);
    PyObject *born_host = SLOT(m, bm_off[BM_BORN_HOST]);
    if (body == NULL || props == NULL || born_host == NULL || !PyBytes_CheckExact(body) ||
        !PyBytes_CheckExact(props) || !PyBytes_CheckExact(born_host) || PyBytes_GET_SIZE(born_host) != 8)
        Py_RETURN_FALSE;
    long long pos, length, crc, qoff, physical, store_v6, now, queue_id, flag, sys_flag, born_ts, reconsume, prepared;
    PyObject *qid_o = SLOT(m, bm_off[BM_QUEUE_ID]), *flag_o = SLOT(m, bm_off[BM_FLAG]);
    PyObject *sys_o = SLOT(m, bm_off[BM_SYS_FLAG]), *born_o = SLOT(m, bm_off[BM_BORN_TIMESTAMP]);
    PyObject *rec_o = SLOT(m, bm_off[BM_RECONSUME_TIMES]), *prep_o = SLOT(m, bm_off[BM_PREPARED_OFFSET]);
    if (qid_o == NULL || flag_o == NULL || sys_o == NULL || born_o == NULL || rec_o == NULL || prep_o == NULL)
        Py_RETURN_FALSE;
    if (long_in(args[1], 0, PY_SSIZE_T_MAX, &pos) < 0 || long_in(args[2], 0, I32_MAX, &length) < 0 ||
        long_in(args[4], I32_MIN, I32_MAX, &crc) < 0 || long_in(args[5], LLONG_MIN, LLONG_MAX, &qoff) < 0 ||
        long_in(args[6], LLONG_MIN, LLONG_MAX, &physical) < 0 || long_in(args[7], 0, I32_MAX, &store_v6) < 0 ||
        long_in(args[8], LLONG_MIN, LLONG_MAX, &now) < 0 || long_in(qid_o, I32_MIN, I32_MAX, &queue_id) < 0 ||
        long_in(flag_o, I32_MIN, I32_MAX, &flag) < 0 || long_in(sys_o, I32_MIN, I32_MAX, &sys_flag) < 0 ||
        long_in(born_o, LLONG_MIN, LLONG_MAX, &born_ts) < 0 || long_in(rec_o, I32_MIN, I32_MAX, &reconsume) < 0 ||
        long_in(prep_o, LLONG_MIN, LLONG_MAX, &prepared) < 0)
        Py_RETURN_FALSE;
    long long flags = sys_flag | store_v6;
    Py_ssize_t sh = PyBytes_GET_SIZE(store_host), bl = PyBytes_GET_SIZE(body), tl = PyBytes_GET_SIZE(topic);
    Py_ssize_t pl = PyBytes_GET_SIZE(props);
    if (flags < I32_MIN || flags > I32_MAX || tl > 127 || pl > 32767 || bl > I32_MAX ||
        (Py_ssize_t)length != 64 + sh + 16 + bl + 1 + tl + 2 + pl)
        Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (pos > view.len - length) {
        PyBuffer_Release(&view);
        Py_RETURN_FALSE;
    }
    unsigned char *w = (unsigned char *)view.buf + pos;
    fill_v1_record(w, (int32_t)crc, (int32_t)queue_id, (int32_t)flag, qoff, physical, (int32_t)flags, born_ts,
                   PyBytes_AS_STRING(born_host), now, PyBytes_AS_STRING(store_host), sh, (int32_t)reconsume, prepared,
                   PyBytes_AS_STRING(body), bl, PyBytes_AS_STRING(topic), tl, PyBytes_AS_STRING(props), pl);
    put_be32(w, (int32_t)length); /* commit point: TOTALSIZE last */
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
}

/* -- metrics counting ---------------------------------------------------------------------
 *
 * The compiled counterparts of the counting on a broker's send path (docs/metrics.md, "What it
 * costs"); rocketq.remoting.rpc_metrics and rocketq.broker.metrics choose them when this module
 * is in use, and their pure-Python code stays the reference (tests compare the two).
 *
 *   RpcTimer(bounds_ns, record, failed[, untimed]).call(handler, conn, request)
 *       handler(conn, request) timed by the monotonic clock time.perf_counter_ns reads: a bytes
 *       answer (a send's pre-encoded SUCCESS) is added to its request code's histogram counts
 *       here; None and the object untimed (an answer given later, which times itself) are
 *       not counted; any other answer goes to record(code, response.code, ns), an exception to
 *       failed(code, exc, ns) before it propagates. drain() hands over the added counts.
 *   SendCounter(labels, sharding_key, delay_keys, size_bounds)
 *       sent(topic, kind, result) / stored(topic, kind, size, count=1): a send's messages, bytes
 *       and message_size buckets added up per (topic, message type); kind is a label or the
 *       send's properties, typed as rocketq.broker.metrics.message_type types them. drain()
 *       hands over what was added, in the order (topic, type) pairs were first seen.
 *   PutSampler(every, histograms=None)
 *       the store's put sample (rocketq.store.put_latency.put_samples): an iterator of 0,
 *       every - 1 times, then the clock, over and over; observe(began) adds the put it timed to
 *       the calling thread's histogram of a ThreadHistograms (MessageStore._put_timed).
 */

#include <time.h>

#define MAX_BOUNDS 16

static PyObject *str_code;

static inline int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

/* Histogram bounds: a tuple of 1..MAX_BOUNDS ascending ints. */
static int read_bounds(PyObject *bounds, int64_t *out, int *n) {
    if (!PyTuple_Check(bounds) || PyTuple_GET_SIZE(bounds) < 1 || PyTuple_GET_SIZE(bounds) > MAX_BOUNDS) {
        PyErr_Format(PyExc_ValueError, "bounds must be a tuple of 1 to %d ints", MAX_BOUNDS);
        return -1;
    }
    *n = (int)PyTuple_GET_SIZE(bounds);
    for (int i = 0; i < *n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(bounds, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (i > 0 && v <= out[i - 1]) {
            PyErr_SetString(PyExc_ValueError, "bounds must ascend without repeats");
            return -1;
        }
        out[i] = (int64_t)v;
    }
    return 0;
}

/* bisect_left(bounds, v): the bucket of v (at most bounds[i] and above the bound before). */
static inline int bucket_of(const int64_t *bounds, int n, int64_t v) {
    int i = 0;
    while (i < n && bounds[i] < v) i++;
    return i;
}

/* -- RpcTimer -- */

typedef struct {
    long code;
    int64_t n;
    int64_t sum;
    int64_t counts[MAX_BOUNDS + 1];
} OkSlot;

typedef struct {
    PyObject_HEAD
    PyObject *record;
    PyObject *failed;
    PyObject *untimed; /* an answer not to count (a reference is held), or NULL */
    int nbounds;
    int64_t bounds[MAX_BOUNDS];
    OkSlot *slots;
    Py_ssize_t nslots, cap, last;
} RpcTimer;

static PyObject *RpcTimer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *bounds, *record, *failed, *untimed = NULL;
    if (!PyArg_ParseTuple(args, "OOO|O:RpcTimer", &bounds, &record, &failed, &untimed)) return NULL;
    if (!PyCallable_Check(record) || !PyCallable_Check(failed)) {
        PyErr_SetString(PyExc_TypeError, "RpcTimer: record and failed must be callable");
        return NULL;
    }
    RpcTimer *self = (RpcTimer *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (read_bounds(bounds, self->bounds, &self->nbounds) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(record);
    self->record = record;
    Py_INCREF(failed);
    self->failed = failed;
    Py_XINCREF(untimed);
    self->untimed = untimed;
    return (PyObject *)self;
}

static int RpcTimer_traverse(RpcTimer *self, visitproc visit, void *arg) {
    Py_VISIT(self->record);
    Py_VISIT(self->failed);
    Py_VISIT(self->untimed);
    return 0;
}

static int RpcTimer_clear(RpcTimer *self) {
    Py_CLEAR(self->record);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->untimed);
    return 0;
}

static void RpcTimer_dealloc(RpcTimer *self) {
    PyObject_GC_UnTrack(self);
    RpcTimer_clear(self);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static OkSlot *ok_slot(RpcTimer *self, long code) {
    if (self->last < self->nslots && self->slots[self->last].code == code) return &self->slots[self->last];
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        if (self->slots[i].code == code) {
            self->last = i;
            return &self->slots[i];
        }
    }
    if (self->nslots == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 4;
        OkSlot *grown = PyMem_Realloc(self->slots, (size_t)cap * sizeof(OkSlot));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->slots = grown;
        self->cap = cap;
    }
    OkSlot *slot = &self->slots[self->nslots];
    memset(slot, 0, sizeof(OkSlot));
    slot->code = code;
    self->last = self->nslots++;
    return slot;
}

static PyObject *RpcTimer_call(RpcTimer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "call(handler, conn, request) takes 3 arguments");
        return NULL;
    }
    if (self->record == NULL || self->failed == NULL) { /* cleared by the garbage collector */
        PyErr_SetString(PyExc_RuntimeError, "RpcTimer.call: the timer was cleared");
        return NULL;
    }
    PyObject *pass[3] = {NULL, args[1], args[2]};
    int64_t began = monotonic_ns();
    PyObject *response = PyObject_Vectorcall(args[0], pass + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    int64_t elapsed = monotonic_ns() - began;
    if (response == NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        if (tb != NULL && ev != NULL) PyException_SetTraceback(ev, tb);
        PyObject *code = PyObject_GetAttr(args[2], str_code);
        PyObject *done = NULL;
        if (code != NULL) {
            done = PyObject_CallFunction(self->failed, "OOL", code, ev != NULL ? ev : Py_None,
                                         (long long)elapsed);
            Py_DECREF(code);
        }
        if (done == NULL) { /* failed() itself raised: that error goes on */
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            return NULL;
        }
        Py_DECREF(done);
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    if (Py_IS_TYPE(response, &PyBytes_Type)) {
        PyObject *code = PyObject_GetAttr(args[2], str_code);
        if (code == NULL) goto fail;
        long c = PyLong_AsLong(code);
        Py_DECREF(code);
        if (c == -1 && PyErr_Occurred()) goto fail;
        OkSlot *slot = ok_slot(self, c);
        if (slot == NULL) goto fail;
        slot->n++;
        slot->sum += elapsed;
        slot->counts[bucket_of(self->bounds, self->nbounds, elapsed)]++;
        return response;
    }
    if (response != Py_None && response != self->untimed) {
        PyObject *code = PyObject_GetAttr(args[2], str_code);
        if (code == NULL) goto fail;
        PyObject *answer = PyObject_GetAttr(response, str_code);
        if (answer == NULL) {
            Py_DECREF(code);
            goto fail;
        }
        PyObject *done = PyObject_CallFunction(self->record, "OOL", code, answer, (long long)elapsed);
        Py_DECREF(code);
        Py_DECREF(answer);
        if (done == NULL) goto fail;
        Py_DECREF(done);
    }
    return response;
fail:
    Py_DECREF(response);
    return NULL;
}

static PyObject *RpcTimer_drain(RpcTimer *self, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->nslots; i++) {
        OkSlot *slot = &self->slots[i];
        if (slot->n == 0) continue;
        PyObject *counts = PyList_New(self->nbounds + 1);
        if (counts == NULL) goto fail;
        for (int b = 0; b <= self->nbounds; b++) {
            PyObject *v = PyLong_FromLongLong(slot->counts[b]);
            if (v == NULL) {
                Py_DECREF(counts);
                goto fail;
            }
            PyList_SET_ITEM(counts, b, v);
        }
        PyObject *item = Py_BuildValue("(lNL)", slot->code, counts, (long long)slot->sum);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
        memset(slot->counts, 0, sizeof(slot->counts));
        slot->n = slot->sum = 0;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef RpcTimer_methods[] = {
    {"call", (PyCFunction)(void (*)(void))RpcTimer_call, METH_FASTCALL,
     "call(handler, conn, request): handler(conn, request), timed and counted"},
    {"drain", (PyCFunction)RpcTimer_drain, METH_NOARGS,
     "[(request code, per-bucket counts, sum of ns)] of the bytes answers since the last drain"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RpcTimerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rocketq._speedups.RpcTimer",
    .tp_basicsize = sizeof(RpcTimer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RpcTimer(bounds_ns, record, failed): the broker dispatch's request timing",
    .tp_new = RpcTimer_new,
    .tp_dealloc = (destructor)RpcTimer_dealloc,
    .tp_traverse = (traverseproc)RpcTimer_traverse,
    .tp_clear = (inquiry)RpcTimer_clear,
    .tp_methods = RpcTimer_methods,
};

/* -- SendCounter -- */

enum { KIND_NORMAL, KIND_FIFO, KIND_DELAY, KIND_TRANSACTION, KINDS };

typedef struct {
    PyObject *topic;
    int kind;
    int64_t v[2 + MAX_BOUNDS + 1]; /* messages, bytes, per-bucket message counts */
} SendEntry;

typedef struct {
    PyObject_HEAD
    PyObject *labels[KINDS];
    PyObject *sharding_key;
    PyObject *delay_keys; /* tuple of str */
    uint64_t key_lengths; /* bit n: a typed key (sharding or delay) is n characters long */
    int nbounds;
    int64_t bounds[MAX_BOUNDS];
    PyObject *topics; /* topic -> int t: the entries of topic t are index[t * KINDS + kind] */
    PyObject *last_topic; /* the topic of the last send and its t: a producer's sends repeat it */
    Py_ssize_t last_t;
    Py_ssize_t *index;
    Py_ssize_t ntopics, index_cap;
    SendEntry *entries;
    Py_ssize_t nentries, cap;
} SendCounter;

static PyObject *SendCounter_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *labels, *sharding_key, *delay_keys, *bounds;
    if (!PyArg_ParseTuple(args, "O!UO!O:SendCounter", &PyTuple_Type, &labels, &sharding_key, &PyTuple_Type,
                          &delay_keys, &bounds))
        return NULL;
    if (PyTuple_GET_SIZE(labels) != KINDS) {
        PyErr_SetString(PyExc_ValueError, "SendCounter: labels are (normal, fifo, delay, transaction)");
        return NULL;
    }
    SendCounter *self = (SendCounter *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if (read_bounds(bounds, self->bounds, &self->nbounds) < 0) goto fail;
    for (int k = 0; k < KINDS; k++) {
        PyObject *label = PyTuple_GET_ITEM(labels, k);
        if (!PyUnicode_Check(label)) {
            PyErr_SetString(PyExc_TypeError, "SendCounter: labels must be str");
            goto fail;
        }
        Py_INCREF(label);
        self->labels[k] = label;
    }
    Py_INCREF(sharding_key);
    self->sharding_key = sharding_key;
    Py_INCREF(delay_keys);
    self->delay_keys = delay_keys;
    for (Py_ssize_t i = -1; i < PyTuple_GET_SIZE(delay_keys); i++) {
        PyObject *key = i < 0 ? sharding_key : PyTuple_GET_ITEM(delay_keys, i);
        if (!PyUnicode_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "SendCounter: the typed keys must be str");
            goto fail;
        }
        Py_ssize_t n = PyUnicode_GET_LENGTH(key);
        self->key_lengths |= n < 64 ? (uint64_t)1 << n : ~(uint64_t)0;
    }
    self->topics = PyDict_New();
    if (self->topics == NULL) goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static int SendCounter_traverse(SendCounter *self, visitproc visit, void *arg) {
    Py_VISIT(self->last_topic);
    Py_VISIT(self->topics);
    return 0;
}

static void SendCounter_dealloc(SendCounter *self) {
    PyObject_GC_UnTrack(self);
    for (int k = 0; k < KINDS; k++) Py_XDECREF(self->labels[k]);
    Py_XDECREF(self->sharding_key);
    Py_XDECREF(self->delay_keys);
    Py_XDECREF(self->topics);
    Py_XDECREF(self->last_topic);
    for (Py_ssize_t i = 0; i < self->nentries; i++) Py_DECREF(self->entries[i].topic);
    PyMem_Free(self->entries);
    PyMem_Free(self->index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int has_key(PyObject *props, PyObject *key) {
    return PyDict_CheckExact(props) ? PyDict_Contains(props, key) : PySequence_Contains(props, key);
}

/* The message type of kind: one of the labels, or properties typed as message_type(props, False). */
static int kind_of(SendCounter *self, PyObject *kind) {
    if (PyUnicode_Check(kind)) {
        for (int k = 0; k < KINDS; k++)
            if (kind == self->labels[k]) return k;
        for (int k = 0; k < KINDS; k++) {
            int eq = PyUnicode_Compare(kind, self->labels[k]);
            if (eq == -1 && PyErr_Occurred()) return -1;
            if (eq == 0) return k;
        }
        PyErr_Format(PyExc_ValueError, "unknown message type %R", kind);
        return -1;
    }
    if (PyDict_CheckExact(kind)) { /* no key of a typed key's length (the common case): normal */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int maybe = 0;
        while (!maybe && PyDict_Next(kind, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                maybe = 1;
            } else {
                Py_ssize_t n = PyUnicode_GET_LENGTH(key);
                maybe = n >= 64 || (self->key_lengths >> n) & 1;
            }
        }
        if (!maybe) return KIND_NORMAL;
    }
    int found = has_key(kind, self->sharding_key);
    if (found != 0) return found < 0 ? -1 : KIND_FIFO;
    Py_ssize_t n = PyTuple_GET_SIZE(self->delay_keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        found = has_key(kind, PyTuple_GET_ITEM(self->delay_keys, i));
        if (found != 0) return found < 0 ? -1 : KIND_DELAY;
    }
    return KIND_NORMAL;
}

/* topic equals the last send's topic: the same length and bytes (no hash of a new string). */
static int same_topic(SendCounter *self, PyObject *topic) {
    PyObject *last = self->last_topic;
    if (last == NULL) return 0;
    if (last == topic) return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(topic);
    if (PyUnicode_GET_LENGTH(last) != n || PyUnicode_KIND(last) != PyUnicode_KIND(topic)) return 0;
    return memcmp(PyUnicode_DATA(last), PyUnicode_DATA(topic), (size_t)n * PyUnicode_KIND(topic)) == 0;
}

static SendEntry *send_entry(SendCounter *self, PyObject *topic, int kind) {
    Py_ssize_t t;
    PyObject *at = NULL;
    if (same_topic(self, topic)) {
        t = self->last_t;
        goto found;
    }
    at = PyDict_GetItemWithError(self->topics, topic);
    if (at != NULL) {
        t = PyLong_AsSsize_t(at);
    } else {
        if (PyErr_Occurred()) return NULL;
        if (self->ntopics == self->index_cap) {
            Py_ssize_t cap = self->index_cap ? self->index_cap * 2 : 8;
            Py_ssize_t *grown = PyMem_Realloc(self->index, (size_t)(cap * KINDS) * sizeof(Py_ssize_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                return NULL;
            }
            self->index = grown;
            self->index_cap = cap;
        }
        t = self->ntopics;
        PyObject *number = PyLong_FromSsize_t(t);
        if (number == NULL) return NULL;
        int failed = PyDict_SetItem(self->topics, topic, number);
        Py_DECREF(number);
        if (failed < 0) return NULL;
        for (int k = 0; k < KINDS; k++) self->index[t * KINDS + k] = -1;
        self->ntopics++;
    }
    Py_INCREF(topic);
    Py_XSETREF(self->last_topic, topic);
    self->last_t = t;
found:;
    Py_ssize_t e = self->index[t * KINDS + kind];
    if (e >= 0) return &self->entries[e];
    if (self->nentries == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 8;
        SendEntry *grown = PyMem_Realloc(self->entries, (size_t)cap * sizeof(SendEntry));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->entries = grown;
        self->cap = cap;
    }
    e = self->nentries++;
    SendEntry *entry = &self->entries[e];
    memset(entry, 0, sizeof(SendEntry));
    Py_INCREF(topic);
    entry->topic = topic;
    entry->kind = kind;
    self->index[t * KINDS + kind] = e;
    return entry;
}

static PyObject *count_send(SendCounter *self, PyObject *topic, PyObject *kind, PyObject *size_obj,
                            PyObject *count_obj) {
    if (!PyUnicode_Check(topic)) {
        PyErr_SetString(PyExc_TypeError, "topic must be a str");
        return NULL;
    }
    long long size = PyLong_AsLongLong(size_obj);
    if (size == -1 && PyErr_Occurred()) return NULL;
    long long count = PyLong_AsLongLong(count_obj);
    if (count == -1 && PyErr_Occurred()) return NULL;
    if (count < 1 || size < 0) {
        PyErr_Format(PyExc_ValueError, "a send stores at least one message of 0 or more bytes, not %lld of %lld",
                     count, size);
        return NULL;
    }
    int k = kind_of(self, kind);
    if (k < 0) return NULL;
    SendEntry *entry = send_entry(self, topic, k);
    if (entry == NULL) return NULL;
    entry->v[0] += count;
    entry->v[1] += size;
    entry->v[2 + bucket_of(self->bounds, self->nbounds, size / count)] += count;
    Py_RETURN_NONE;
}

static PyObject *SendCounter_sent(SendCounter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "sent(topic, kind, result) takes 3 arguments");
        return NULL;
    }
    PyObject *result = args[2];
    if (PyTuple_Check(result) && PyTuple_GET_SIZE(result) > 6)
        return count_send(self, args[0], args[1], PyTuple_GET_ITEM(result, 2), PyTuple_GET_ITEM(result, 6));
    PyErr_SetString(PyExc_TypeError, "sent: result must be a PutMessageResult");
    return NULL;
}

static PyObject *SendCounter_stored(SendCounter *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "stored(topic, kind, size, count=1) takes 3 or 4 arguments");
        return NULL;
    }
    static PyObject *one = NULL;
    if (one == NULL && (one = PyLong_FromLong(1)) == NULL) return NULL;
    return count_send(self, args[0], args[1], args[2], nargs == 4 ? args[3] : one);
}

static PyObject *SendCounter_drain(SendCounter *self, PyObject *unused) {
    int width = 2 + self->nbounds + 1;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->nentries; i++) {
        SendEntry *entry = &self->entries[i];
        if (entry->v[0] == 0) continue;
        PyObject *counts = PyList_New(width);
        if (counts == NULL) goto fail;
        for (int b = 0; b < width; b++) {
            PyObject *v = PyLong_FromLongLong(entry->v[b]);
            if (v == NULL) {
                Py_DECREF(counts);
                goto fail;
            }
            PyList_SET_ITEM(counts, b, v);
        }
        PyObject *item = Py_BuildValue("(OON)", entry->topic, self->labels[entry->kind], counts);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
        memset(entry->v, 0, sizeof(entry->v));
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef SendCounter_methods[] = {
    {"sent", (PyCFunction)(void (*)(void))SendCounter_sent, METH_FASTCALL,
     "sent(topic, kind, result): a single send's PutMessageResult counted"},
    {"stored", (PyCFunction)(void (*)(void))SendCounter_stored, METH_FASTCALL,
     "stored(topic, kind, size, count=1): count messages of size bytes in all counted"},
    {"drain", (PyCFunction)SendCounter_drain, METH_NOARGS,
     "[(topic, message type, [messages, bytes, per-bucket counts...])] since the last drain"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SendCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rocketq._speedups.SendCounter",
    .tp_basicsize = sizeof(SendCounter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "SendCounter(labels, sharding_key, delay_keys, size_bounds): sends per (topic, message type)",
    .tp_new = SendCounter_new,
    .tp_dealloc = (destructor)SendCounter_dealloc,
    .tp_traverse = (traverseproc)SendCounter_traverse,
    .tp_methods = SendCounter_methods,
};

/* -- PutSampler -- */

typedef struct {
    PyObject_HEAD
    long every;
    long seen;
    PyObject *histograms;    /* a ThreadHistograms, or NULL */
    unsigned long last_ident; /* the thread of last_hist, the last observer's histogram */
    PyObject *last_hist;
} PutSampler;

static PyObject *str_local, *str_bounds, *str_counts, *str_sum, *int_one;

static PyObject *PutSampler_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    long every;
    PyObject *histograms = Py_None;
    if (!PyArg_ParseTuple(args, "l|O:PutSampler", &every, &histograms)) return NULL;
    if (every < 1) {
        PyErr_SetString(PyExc_ValueError, "PutSampler: every must be at least 1");
        return NULL;
    }
    PutSampler *self = (PutSampler *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->every = every;
    if (histograms != Py_None) {
        Py_INCREF(histograms);
        self->histograms = histograms;
    }
    return (PyObject *)self;
}

static void PutSampler_dealloc(PutSampler *self) {
    Py_XDECREF(self->histograms);
    Py_XDECREF(self->last_hist);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *PutSampler_next(PutSampler *self) {
    if (++self->seen < self->every) return PyLong_FromLong(0);
    self->seen = 0;
    return PyLong_FromLongLong((long long)monotonic_ns());
}

/* What MessageStore._put_timed does: the seconds since began into the calling thread's
 * histogram (ThreadHistograms.local(), asked again only when the thread changes). */
static PyObject *PutSampler_observe(PutSampler *self, PyObject *arg) {
    long long began = PyLong_AsLongLong(arg);
    if (began == -1 && PyErr_Occurred()) return NULL;
    double seconds = (double)(monotonic_ns() - began) / 1e9;
    if (self->histograms == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "PutSampler.observe: made without histograms");
        return NULL;
    }
    unsigned long ident = PyThread_get_thread_ident();
    if (self->last_hist == NULL || self->last_ident != ident) {
        PyObject *hist = PyObject_CallMethodNoArgs(self->histograms, str_local);
        if (hist == NULL) return NULL;
        Py_XSETREF(self->last_hist, hist);
        self->last_ident = ident;
    }
    PyObject *hist = self->last_hist;
    PyObject *bounds = PyObject_GetAttr(hist, str_bounds);
    if (bounds == NULL) return NULL;
    PyObject *counts = PyObject_GetAttr(hist, str_counts);
    if (counts == NULL || !PyTuple_Check(bounds) || !PyList_Check(counts) ||
        PyList_GET_SIZE(counts) != PyTuple_GET_SIZE(bounds) + 1) {
        if (counts != NULL) PyErr_SetString(PyExc_TypeError, "PutSampler.observe: not a Histogram");
        Py_DECREF(bounds);
        Py_XDECREF(counts);
        return NULL;
    }
    Py_ssize_t i = 0, n = PyTuple_GET_SIZE(bounds);
    for (; i < n; i++) { /* bisect_left */
        double bound = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds, i));
        if (bound == -1.0 && PyErr_Occurred()) goto fail;
        if (bound >= seconds) break;
    }
    PyObject *count = PyNumber_Add(PyList_GET_ITEM(counts, i), int_one);
    if (count == NULL) goto fail;
    PyList_SetItem(counts, i, count);
    PyObject *sum = PyObject_GetAttr(hist, str_sum);
    if (sum == NULL) goto fail;
    PyObject *add = PyFloat_FromDouble(seconds);
    PyObject *total = add != NULL ? PyNumber_Add(sum, add) : NULL;
    Py_DECREF(sum);
    Py_XDECREF(add);
    if (total == NULL) goto fail;
    int failed = PyObject_SetAttr(hist, str_sum, total);
    Py_DECREF(total);
    if (failed < 0) goto fail;
    Py_DECREF(bounds);
    Py_DECREF(counts);
    Py_RETURN_NONE;
fail:
    Py_DECREF(bounds);
    Py_DECREF(counts);
    return NULL;
}

static PyMethodDef PutSampler_methods[] = {
    {"observe", (PyCFunction)PutSampler_observe, METH_O,
     "observe(began): the seconds since began (a clock this iterator gave) into the calling "
     "thread's histogram"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PutSamplerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rocketq._speedups.PutSampler",
    .tp_basicsize = sizeof(PutSampler),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PutSampler(every, histograms=None): an iterator of 0, every - 1 times, then the clock "
              "(time.perf_counter_ns), over and over; observe() adds a timed put to histograms",
    .tp_new = PutSampler_new,
    .tp_dealloc = (destructor)PutSampler_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)PutSampler_next,
    .tp_methods = PutSampler_methods,
};

/* -- scan_window: the dispatch walk and its columns ------------------------------------------ */

/* rocketq.store.record_scan's walk over a window of CommitLog records, its V1/IPv4 structure
 * check and the columns it gathers (record_scan.parse_window's columnar path), in one pass:
 *
 *   scan_window(data, base=None, objects_below=0)
 *       -> (columns, count, starts, stop_at, stop, corrupt, topics, entries, slow, objects)
 *
 * columns: a bytearray of SC_COUNT rows of `starts` native int64 (row c holds column c for the
 * first `count` records; see the SC_ names); count: the leading good V1/IPv4 records; starts:
 * the records the walk found (MESSAGE magic, a size that fits); stop_at, stop: where the walk
 * stopped and why (0 none: the window ended; 1 BLANK; 2 END; 3 CORRUPT); corrupt: whether
 * record `count` (when count < starts) is a V1/IPv4 record whose layout does not add up;
 * topics: (start, length) of each distinct topic byte string, in order of first use (the
 * topic index column points into it); entries: a bytearray of native int64 pairs (record,
 * index key hash, abs()ed as IndexFile does) for topic#UNIQ_KEY and topic#key of every key of
 * KEYS, record by record; slow: the records whose tags or index keys are not all ASCII (their
 * tags code is 0 here and they have no entries: the caller hashes them the Java way);
 * objects: when every record found is good and there are fewer than objects_below of them,
 * (their DispatchRequest objects, the decoded topics; `base` is the window's CommitLog offset),
 * else None.
 * The whole answer is None when the window names more distinct topics than SCAN_MAX_TOPICS
 * (1024, told apart through a hash table of their bytes): the caller's pure path takes it.
 * Every read is bounds-checked against the window: nothing past `len(data)` is touched.
 *
 * With entry_index (not None) the window holds DLedger entries instead (dledger_entry_walk,
 * rocketq.store.dledger_window.parse_entry_run): the walk steps over their 48-byte headers
 * from entry entry_index at position base, a record start per NORMAL entry's body, NOOPs
 * stepped over; stop_at is where the entries it takes end and stop 3 says that it met one it
 * does not take. A record's start is then its entry's position + 48 - base, as in the data
 * files, so base + start stays its CommitLog offset. With checked_from (not None) the bodies of
 * entries at or past that position are not checked against their CRC (bytes this process wrote
 * and checked as it wrote them). */

static Py_ssize_t dledger_entry_walk(const unsigned char *d, Py_ssize_t n, long long base, long long index,
                                     long long checked_from, Py_ssize_t **starts, Py_ssize_t *nstarts,
                                     Py_ssize_t *cap, int *stop);

enum {
    SC_START, SC_SIZE, SC_QUEUE_ID, SC_QUEUE_OFFSET, SC_SYS_FLAG, SC_STORE_TS, SC_PREPARED,
    SC_TOPIC_START, SC_TOPIC_LEN, SC_PROPS_START, SC_PROPS_END, SC_TOPIC_INDEX, SC_TAGS_CODE,
    SC_KEYS_PRESENT, SC_KEYS_START, SC_KEYS_LEN, SC_UNIQ_PRESENT, SC_UNIQ_START, SC_UNIQ_LEN,
    SC_COUNT
};

#define BLANK_MAGIC_CODE ((int32_t)-875286124)
#define V1_MIN_SIZE 91
#define MAX_PROPS_BYTES 32767
#define SCAN_MAX_TOPICS 1024
#define TOPIC_TABLE_SIZE 2048 /* a power of two, twice SCAN_MAX_TOPICS: probes stay short */

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} i64vec;

static int i64vec_push2(i64vec *v, int64_t a, int64_t b) {
    if (v->len + 2 > v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 256;
        int64_t *grown = PyMem_Realloc(v->data, (size_t)cap * sizeof(int64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        v->data = grown;
        v->cap = cap;
    }
    v->data[v->len++] = a;
    v->data[v->len++] = b;
    return 0;
}

/* Java's String.hashCode step over ASCII bytes (one UTF-16 unit each); -1 when a byte is not
 * ASCII (the caller hashes the decoded string instead). */
static int hash_ascii(const unsigned char *p, Py_ssize_t len, uint32_t *h) {
    uint32_t v = *h;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (p[i] & 0x80) return -1;
        v = v * 31u + p[i];
    }
    *h = v;
    return 0;
}

/* IndexFile.indexKeyHashMethod of a Java hash: abs(), Integer.MIN_VALUE -> 0. */
static int64_t index_hash(uint32_t h) {
    int32_t s = (int32_t)h;
    if (s == INT32_MIN) return 0;
    return s < 0 ? -(int64_t)s : (int64_t)s;
}

/* DispatchRequest's slots (record_scan.DispatchRequest), set by setup_dispatch(). */
enum {
    DR_PROPERTIES, DR_COMMIT_LOG_OFFSET, DR_CQ_OFFSET, DR_KEYS, DR_MSG_SIZE, DR_PREPARED, DR_PROPERTIES_RAW,
    DR_QUEUE_ID, DR_STORE_TS, DR_SYS_FLAG, DR_TAGS_CODE, DR_TOPIC, DR_UNIQ_KEY, DR_COUNT
};
static const char *const dr_names[DR_COUNT] = {
    "_properties", "commit_log_offset", "consume_queue_offset", "keys", "msg_size",
    "prepared_transaction_offset", "properties_raw", "queue_id", "store_timestamp", "sys_flag", "tags_code",
    "topic", "uniq_key",
};
static PyTypeObject *dispatch_request;
static Py_ssize_t dr_off[DR_COUNT];

static PyObject *setup_dispatch(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_dispatch: DispatchRequest must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, dr_names, dr_off, DR_COUNT) < 0) return NULL;
    Py_INCREF(cls);
    Py_XSETREF(dispatch_request, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* The DispatchRequest of each of the k scanned records (columns `col` of stride `stride`),
 * as record_scan's record-by-record parser makes them, but for the tags code of records
 * whose tags are not ASCII and of SCHEDULE_TOPIC_XXXX records (the caller's); `names`: the
 * decoded topics (topic index order). */
static PyObject *requests_of(const unsigned char *d, const int64_t *col, Py_ssize_t stride, Py_ssize_t k,
                             long long base, PyObject *names) {
    PyObject *out = PyList_New(k);
    if (out == NULL) return NULL;
    /* records sent together mostly share their size, store time and tags code: the int of
     * the record before is taken again when the value is the same (ints are immutable) */
    PyObject *prev_size = NULL, *prev_ts = NULL, *prev_tags = NULL; /* borrowed from the requests */
    for (Py_ssize_t i = 0; i < k; i++) {
#define C(c) col[(Py_ssize_t)(c) * stride + i]
#define SAME_INT(prev, c) ((prev) != NULL && i > 0 && C(c) == col[(Py_ssize_t)(c) * stride + i - 1])
        PyObject *req = dispatch_request->tp_alloc(dispatch_request, 0);
        if (req == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, req);
        PyObject *v[DR_COUNT];
        PyObject *topic = PyList_GET_ITEM(names, (Py_ssize_t)C(SC_TOPIC_INDEX));
        Py_INCREF(topic);
        v[DR_TOPIC] = topic;
        Py_INCREF(Py_None);
        v[DR_PROPERTIES] = Py_None;
        v[DR_COMMIT_LOG_OFFSET] = PyLong_FromLongLong(base + C(SC_START));
        v[DR_CQ_OFFSET] = PyLong_FromLongLong(C(SC_QUEUE_OFFSET));
        v[DR_MSG_SIZE] = SAME_INT(prev_size, SC_SIZE) ? Py_NewRef(prev_size) : PyLong_FromLongLong(C(SC_SIZE));
        v[DR_PREPARED] = PyLong_FromLongLong(C(SC_PREPARED));
        int64_t ps = C(SC_PROPS_START), pe = C(SC_PROPS_END);
        v[DR_PROPERTIES_RAW] = PyBytes_FromStringAndSize((const char *)d + (ps < pe ? ps : pe), ps < pe ? pe - ps : 0);
        v[DR_QUEUE_ID] = PyLong_FromLongLong(C(SC_QUEUE_ID));
        v[DR_STORE_TS] = SAME_INT(prev_ts, SC_STORE_TS) ? Py_NewRef(prev_ts) : PyLong_FromLongLong(C(SC_STORE_TS));
        v[DR_SYS_FLAG] = PyLong_FromLongLong(C(SC_SYS_FLAG));
        v[DR_TAGS_CODE] =
            SAME_INT(prev_tags, SC_TAGS_CODE) ? Py_NewRef(prev_tags) : PyLong_FromLongLong(C(SC_TAGS_CODE));
        prev_size = v[DR_MSG_SIZE];
        prev_ts = v[DR_STORE_TS];
        prev_tags = v[DR_TAGS_CODE];
        if (C(SC_KEYS_PRESENT)) {
            v[DR_KEYS] = PyUnicode_DecodeUTF8((const char *)d + C(SC_KEYS_START), C(SC_KEYS_LEN), "replace");
        } else {
            Py_INCREF(st.empty_str);
            v[DR_KEYS] = st.empty_str;
        }
        if (C(SC_UNIQ_PRESENT) && C(SC_UNIQ_LEN) > 0) {
            v[DR_UNIQ_KEY] = PyUnicode_DecodeUTF8((const char *)d + C(SC_UNIQ_START), C(SC_UNIQ_LEN), "replace");
        } else {
            Py_INCREF(Py_None);
            v[DR_UNIQ_KEY] = Py_None;
        }
#undef SAME_INT
#undef C
        int failed = 0;
        for (int j = 0; j < DR_COUNT; j++) {
            if (v[j] == NULL) failed = 1;
            SLOT(req, dr_off[j]) = v[j];
        }
        if (failed) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *scan_window(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_window(data, base=None, objects_below=0, entry_index=None, checked_from=None)");
        return NULL;
    }
    long long base = 0, entry_index = -1, checked_from = LLONG_MAX;
    Py_ssize_t objects_below = 0;
    if (nargs == 5 && args[4] != Py_None) {
        checked_from = PyLong_AsLongLong(args[4]);
        if (checked_from == -1 && PyErr_Occurred()) return NULL;
    }
    if (nargs >= 4 && args[3] != Py_None) {
        if (args[1] == Py_None) {
            PyErr_SetString(PyExc_TypeError, "scan_window: entries need their base position");
            return NULL;
        }
        entry_index = PyLong_AsLongLong(args[3]);
        if (entry_index == -1 && PyErr_Occurred()) return NULL;
        if (entry_index < 0) {
            PyErr_SetString(PyExc_ValueError, "scan_window: entry_index must be >= 0");
            return NULL;
        }
    }
    if (nargs >= 2 && args[1] != Py_None) {
        base = PyLong_AsLongLong(args[1]);
        if (base == -1 && PyErr_Occurred()) return NULL;
        if (nargs >= 3) {
            objects_below = PyLong_AsSsize_t(args[2]);
            if (objects_below == -1 && PyErr_Occurred()) return NULL;
        }
        if (objects_below > 0 && dispatch_request == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_dispatch() was not called");
            return NULL;
        }
    }
    PyObject *arg = args[0];
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_ND) < 0) return NULL;
    if (view.itemsize != 1 || view.ndim != 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "scan_window: a one-dimensional buffer of bytes is needed");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)view.buf;
    const Py_ssize_t n = view.len;
    PyObject *columns = NULL, *topics = NULL, *entries = NULL, *slow = NULL, *result = NULL;
    PyObject *names = NULL, *objects = NULL;
    Py_ssize_t *starts = NULL;
    Py_ssize_t nstarts = 0, cap = 0;
    i64vec ent = {NULL, 0, 0};
    Py_ssize_t *topic_at = NULL, *topic_len = NULL;
    uint32_t *topic_hash = NULL; /* Java hash of "topic#", or 0 with topic_ascii 0 */
    char *topic_ascii = NULL;
    int16_t *topic_table = NULL; /* topic number by hash slot, -1 when free */
    Py_ssize_t ntopics = 0;

    /* 1. the walk (record_scan.walk) */
    Py_ssize_t p = 0;
    int stop = 0;
    if (entry_index >= 0) {
        p = dledger_entry_walk(d, n, base, entry_index, checked_from, &starts, &nstarts, &cap, &stop);
        if (p < 0) goto done;
    }
    while (entry_index < 0 && p <= n - 8) {
        int32_t size = be32(d + p);
        int32_t magic = be32(d + p + 4);
        int is_msg = magic == MESSAGE_MAGIC_CODE || magic == MESSAGE_MAGIC_CODE_V2;
        if (is_msg && size >= V1_MIN_SIZE && (Py_ssize_t)size <= n - p) {
            if (nstarts == cap) {
                Py_ssize_t grown_cap = cap ? cap * 2 : 64;
                Py_ssize_t *grown = PyMem_Realloc(starts, (size_t)grown_cap * sizeof(Py_ssize_t));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                starts = grown;
                cap = grown_cap;
            }
            starts[nstarts++] = p;
            p += size;
            continue;
        }
        if (is_msg) stop = size < V1_MIN_SIZE ? 3 : 0;
        else if (magic == BLANK_MAGIC_CODE) stop = 1;
        else if (size == 0 && magic == 0) stop = 2;
        else stop = 3;
        break;
    }

    /* 2. the good V1/IPv4 prefix (record_scan.check_v1) and its columns */
    columns = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)SC_COUNT * nstarts * (Py_ssize_t)sizeof(int64_t));
    slow = PyList_New(0);
    if (columns == NULL || slow == NULL) goto done;
    int64_t *col = (int64_t *)PyByteArray_AS_STRING(columns);
#define COL(c, i) col[(Py_ssize_t)(c) * nstarts + (i)]
    Py_ssize_t k = 0;
    int corrupt = 0;
    topic_at = PyMem_Malloc(SCAN_MAX_TOPICS * sizeof(Py_ssize_t));
    topic_len = PyMem_Malloc(SCAN_MAX_TOPICS * sizeof(Py_ssize_t));
    topic_hash = PyMem_Malloc(SCAN_MAX_TOPICS * sizeof(uint32_t));
    topic_ascii = PyMem_Malloc(SCAN_MAX_TOPICS);
    topic_table = PyMem_Malloc(TOPIC_TABLE_SIZE * sizeof(int16_t));
    if (topic_at == NULL || topic_len == NULL || topic_hash == NULL || topic_ascii == NULL || topic_table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(topic_table, 0xff, TOPIC_TABLE_SIZE * sizeof(int16_t));
    Py_ssize_t last_topic = -1;
    int overflow = 0;
    for (; k < nstarts; k++) {
        const Py_ssize_t s = starts[k];
        const unsigned char *r = d + s;
        const int64_t size = be32(r); /* >= 91 and inside the window (the walk) */
        const int64_t end = s + size;
        const int32_t sys_flag = be32(r + 36);
        if (be32(r + 4) != MESSAGE_MAGIC_CODE || (sys_flag & 0x30) != 0) break; /* another layout */
        const int64_t body_len = be32(r + 84);
        const int64_t tpos = (int64_t)s + 88 + body_len;
        if (body_len < 0 || tpos + 3 > end) {
            corrupt = 1;
            break;
        }
        const int64_t tl = d[tpos];
        const int64_t ps = tpos + 3 + tl; /* after the topic and its 2-byte properties length */
        const int64_t pl = ps <= end ? (int64_t)((d[ps - 2] << 8) | d[ps - 1]) : -1;
        if (tl == 0 || tl > 127 || pl > MAX_PROPS_BYTES || ps + pl != end) {
            corrupt = 1;
            break;
        }
        const int64_t ts = tpos + 1;
        /* the topic: one of the distinct byte strings met so far */
        Py_ssize_t ti = -1;
        if (last_topic >= 0 && topic_len[last_topic] == tl && memcmp(d + topic_at[last_topic], d + ts, (size_t)tl) == 0)
            ti = last_topic;
        size_t slot = 0;
        if (ti < 0) { /* the table of topics met so far: FNV-1a of the bytes, linear probing */
            uint32_t fnv = 2166136261u;
            for (int64_t j = 0; j < tl; j++) fnv = (fnv ^ d[ts + j]) * 16777619u;
            slot = fnv & (TOPIC_TABLE_SIZE - 1);
            while (topic_table[slot] >= 0) {
                Py_ssize_t t = topic_table[slot];
                if (topic_len[t] == tl && memcmp(d + topic_at[t], d + ts, (size_t)tl) == 0) {
                    ti = t;
                    break;
                }
                slot = (slot + 1) & (TOPIC_TABLE_SIZE - 1);
            }
        }
        if (ti < 0) {
            if (ntopics == SCAN_MAX_TOPICS) { /* a window of that many topics: the caller's */
                overflow = 1;
                break;
            }
            ti = ntopics++;
            topic_table[slot] = (int16_t)ti;
            topic_at[ti] = (Py_ssize_t)ts;
            topic_len[ti] = (Py_ssize_t)tl;
            uint32_t h = 0;
            topic_ascii[ti] = hash_ascii(d + ts, (Py_ssize_t)tl, &h) == 0;
            topic_hash[ti] = h * 31u + '#';
        }
        last_topic = ti;
        /* the first TAGS, KEYS and UNIQ_KEY pairs: a pair starts at the properties start or
         * after a \x02, and its value runs to the next \x02 or the properties end */
        static const char *const names[3] = {"TAGS\x01", "KEYS\x01", "UNIQ_KEY\x01"};
        static const int64_t widths[3] = {5, 5, 9};
        int64_t vstart[3] = {0, 0, 0}, vlen[3] = {0, 0, 0};
        int found[3] = {0, 0, 0};
        int64_t c = ps;
        while (c <= end && !(found[0] && found[1] && found[2])) {
            const unsigned char *sep = c < end ? memchr(d + c, 2, (size_t)(end - c)) : NULL;
            const int64_t vend = sep ? (int64_t)(sep - d) : end;
            for (int j = 0; j < 3; j++) {
                if (!found[j] && c + widths[j] <= end && memcmp(d + c, names[j], (size_t)widths[j]) == 0) {
                    found[j] = 1;
                    vstart[j] = c + widths[j];
                    vlen[j] = vend - vstart[j];
                }
            }
            if (sep == NULL) break;
            c = vend + 1;
        }
        int is_slow = 0;
        int64_t tags_code = 0;
        if (found[0] && vlen[0] > 0) {
            uint32_t h = 0;
            if (hash_ascii(d + vstart[0], (Py_ssize_t)vlen[0], &h) == 0) tags_code = (int32_t)h;
            else is_slow = 1;
        }
        /* index entries: topic#UNIQ_KEY, then topic#key for each key of KEYS (space-separated) */
        Py_ssize_t mark = ent.len;
        if (!topic_ascii[ti] && ((found[1] && vlen[1] > 0) || (found[2] && vlen[2] > 0))) is_slow = 1;
        if (!is_slow && found[2] && vlen[2] > 0) {
            uint32_t h = topic_hash[ti];
            if (hash_ascii(d + vstart[2], (Py_ssize_t)vlen[2], &h) < 0) is_slow = 1;
            else if (i64vec_push2(&ent, k, index_hash(h)) < 0) goto done;
        }
        if (!is_slow && found[1] && vlen[1] > 0) {
            int64_t a = vstart[1];
            const int64_t stop_at = vstart[1] + vlen[1];
            while (!is_slow && a <= stop_at) {
                int64_t b = a;
                while (b < stop_at && d[b] != ' ') b++;
                if (b > a) {
                    uint32_t h = topic_hash[ti];
                    if (hash_ascii(d + a, (Py_ssize_t)(b - a), &h) < 0) is_slow = 1;
                    else if (i64vec_push2(&ent, k, index_hash(h)) < 0) goto done;
                }
                a = b + 1;
            }
        }
        if (is_slow) {
            ent.len = mark; /* the caller makes every entry of a slow record */
            tags_code = 0;
            PyObject *row = PyLong_FromSsize_t(k);
            if (row == NULL || PyList_Append(slow, row) < 0) {
                Py_XDECREF(row);
                goto done;
            }
            Py_DECREF(row);
        }
        COL(SC_START, k) = s;
        COL(SC_SIZE, k) = size;
        COL(SC_QUEUE_ID, k) = be32(r + 12);
        COL(SC_QUEUE_OFFSET, k) = be64(r + 20);
        COL(SC_SYS_FLAG, k) = sys_flag;
        COL(SC_STORE_TS, k) = be64(r + 56);
        COL(SC_PREPARED, k) = be64(r + 76);
        COL(SC_TOPIC_START, k) = ts;
        COL(SC_TOPIC_LEN, k) = tl;
        COL(SC_PROPS_START, k) = ps;
        COL(SC_PROPS_END, k) = end;
        COL(SC_TOPIC_INDEX, k) = ti;
        COL(SC_TAGS_CODE, k) = tags_code;
        COL(SC_KEYS_PRESENT, k) = found[1];
        COL(SC_KEYS_START, k) = vstart[1];
        COL(SC_KEYS_LEN, k) = vlen[1];
        COL(SC_UNIQ_PRESENT, k) = found[2];
        COL(SC_UNIQ_START, k) = vstart[2];
        COL(SC_UNIQ_LEN, k) = vlen[2];
    }
#undef COL
    if (overflow) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    topics = PyList_New(ntopics);
    if (topics == NULL) goto done;
    for (Py_ssize_t t = 0; t < ntopics; t++) {
        PyObject *pair = Py_BuildValue("(nn)", topic_at[t], topic_len[t]);
        if (pair == NULL) goto done;
        PyList_SET_ITEM(topics, t, pair);
    }
    entries = PyByteArray_FromStringAndSize((const char *)ent.data, ent.len * (Py_ssize_t)sizeof(int64_t));
    if (entries == NULL) goto done;
    if (k > 0 && k == nstarts && k < objects_below) {
        /* a small window of good records: its requests as objects (with their decoded topics) */
        names = PyList_New(ntopics);
        if (names == NULL) goto done;
        for (Py_ssize_t t = 0; t < ntopics; t++) {
            PyObject *name = PyUnicode_DecodeUTF8((const char *)d + topic_at[t], topic_len[t], "replace");
            if (name == NULL) goto done;
            PyList_SET_ITEM(names, t, name);
        }
        PyObject *reqs = requests_of(d, (const int64_t *)PyByteArray_AS_STRING(columns), nstarts, k, base, names);
        if (reqs == NULL) goto done;
        objects = Py_BuildValue("(NO)", reqs, names);
        if (objects == NULL) goto done;
    } else {
        objects = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(OnnnNOOOOO)", columns, k, nstarts, p, PyLong_FromLong(stop), corrupt ? Py_True : Py_False,
                           topics, entries, slow, objects);
done:
    Py_XDECREF(columns);
    Py_XDECREF(topics);
    Py_XDECREF(entries);
    Py_XDECREF(slow);
    Py_XDECREF(names);
    Py_XDECREF(objects);
    PyMem_Free(starts);
    PyMem_Free(ent.data);
    PyMem_Free(topic_at);
    PyMem_Free(topic_len);
    PyMem_Free(topic_hash);
    PyMem_Free(topic_ascii);
    PyMem_Free(topic_table);
    PyBuffer_Release(&view);
    return result;
}

/* -- index_put_keys: IndexFile.put_keys' entry loop ------------------------------------------- */

/* index_put_keys(mm, slots, entries_pos, count, n, begin_ts, slot_count, hashes, phys, stamps)
 *   -> (count, slot_count, begin_phy or None, begin_ts) | None
 *
 * The loop of rocketq.store.index_file.IndexFile.put_keys over its first n entries, writing
 * the same bytes into the writable buffer mm (the index file's map): per entry the hash slot's
 * value (0 when it names no entry below this one), the 20-byte entry (hash, physical offset,
 * seconds since begin_ts, previous entry) and the slot pointing at it. Every value is checked
 * before anything is written: a value out of its field's range, a sequence that is not a list,
 * or a position outside mm gives None with mm untouched (the pure loop then meets the same
 * input and raises what it raises). */
#define INDEX_HEADER_SIZE 40
#define INDEX_ENTRY_SIZE 20

static void put_be32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static void put_be64(unsigned char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)u;
        u >>= 8;
    }
}

/* v as a long long within [lo, hi]; -1 (no exception) when it is not an exact int there */
static int long_in(PyObject *v, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || x < lo || x > hi) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

/* items[i] as a long long within [lo, hi]; -1 (no exception) when it is not */
static int item_in(PyObject *list, Py_ssize_t i, long long lo, long long hi, long long *out) {
    return long_in(PyList_GET_ITEM(list, i), lo, hi, out);
}

static PyObject *index_put_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "index_put_keys(mm, slots, entries_pos, count, n, begin_ts, slot_count, hashes, phys, stamps)");
        return NULL;
    }
    long long num[6];
    for (int j = 0; j < 6; j++) {
        num[j] = PyLong_AsLongLong(args[1 + j]);
        if (num[j] == -1 && PyErr_Occurred()) return NULL;
    }
    const long long slots = num[0], entries_pos = num[1], count0 = num[2], n = num[3];
    long long begin = num[4], slot_count = num[5];
    PyObject *hashes = args[7], *phys = args[8], *stamps = args[9];
    if (!PyList_CheckExact(hashes) || !PyList_CheckExact(phys) || !PyList_CheckExact(stamps) || slots <= 0 ||
        n < 0 || count0 < 0 || entries_pos < 0 || n > PyList_GET_SIZE(hashes) || n > PyList_GET_SIZE(phys) ||
        n > PyList_GET_SIZE(stamps))
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    long long *h = NULL;
    if (view.itemsize != 1 || begin > INT64_MAX / 2 || /* (ts - begin cannot overflow) */
        n > (long long)((view.len - entries_pos) / INDEX_ENTRY_SIZE) - count0 ||
        INDEX_HEADER_SIZE + slots * 4 > view.len) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    h = PyMem_Malloc((size_t)(n ? n : 1) * 3 * sizeof(long long));
    if (h == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (item_in(hashes, i, INT32_MIN, INT32_MAX, &h[3 * i]) < 0 ||
            item_in(phys, i, INT64_MIN, INT64_MAX, &h[3 * i + 1]) < 0 ||
            item_in(stamps, i, INT64_MIN / 2, INT64_MAX / 2, &h[3 * i + 2]) < 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    unsigned char *mm = (unsigned char *)view.buf;
    long long count = count0;
    int begin_set = 0;
    long long begin_phy = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const long long key_hash = h[3 * i], phy = h[3 * i + 1], ts = h[3 * i + 2];
        long long slot = key_hash % slots;
        if (slot < 0) slot += slots; /* Python's modulo */
        unsigned char *slot_at = mm + INDEX_HEADER_SIZE + slot * 4;
        long long slot_value = be32(slot_at);
        if (slot_value <= 0 || slot_value >= count) {
            slot_value = 0;
            slot_count++;
        }
        long long time_diff = 0;
        if (begin > 0) {
            long long diff = ts - begin;
            time_diff = diff < 0 ? 0 : diff / 1000;
            if (time_diff > INT32_MAX) time_diff = INT32_MAX;
        }
        unsigned char *entry = mm + entries_pos + count * INDEX_ENTRY_SIZE;
        put_be32(entry, (int32_t)key_hash);
        put_be64(entry + 4, phy);
        put_be32(entry + 12, (int32_t)time_diff);
        put_be32(entry + 16, (int32_t)slot_value);
        put_be32(slot_at, (int32_t)count);
        if (count <= 1) { /* FIRST_INDEX */
            begin_set = 1;
            begin_phy = phy;
            begin = ts;
        }
        count++;
    }
    if (begin_set) result = Py_BuildValue("(LLLL)", count, slot_count, begin_phy, begin);
    else result = Py_BuildValue("(LLOL)", count, slot_count, Py_None, begin);
done:
    PyMem_Free(h);
    PyBuffer_Release(&view);
    return result;
}

/* -- cq_pack_run: ConsumeQueue.put_units' run of units ---------------------------------------- */

/* cq_pack_run(units, start, room, current, max_physic) -> (packed, count, max_physic) | None
 *
 * The inner loop of rocketq.store.consume_queue.ConsumeQueue.put_units: from units[start], the
 * longest run (at most room units) of (offset, size, tags, cq_offset) tuples that land exactly
 * at the write position `current` (cq_offset * 20 == current + 20 * k), each past the previous
 * max_physic (offset + size), with offset >= 0, size > 0 and cq_offset != 0; packed as the
 * 20-byte units (>qiq) one after another. None when a unit is not a 4-tuple of ints or a value
 * lies outside the range this loop handles exactly (the pure loop then takes the run and
 * raises what it raises). */
static int tuple_ll(PyObject *t, Py_ssize_t j, long long lo, long long hi, long long *out) {
    return long_in(PyTuple_GET_ITEM(t, j), lo, hi, out);
}

static PyObject *cq_pack_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "cq_pack_run(units, start, room, current, max_physic)");
        return NULL;
    }
    if (!PyList_CheckExact(args[0])) Py_RETURN_NONE;
    long long num[4];
    for (int j = 0; j < 4; j++) {
        int overflow = 0;
        num[j] = PyLong_AsLongLongAndOverflow(args[1 + j], &overflow);
        if (num[j] == -1 && PyErr_Occurred()) return NULL;
        if (overflow || num[j] < -(1LL << 61) || num[j] > (1LL << 61)) Py_RETURN_NONE;
    }
    PyObject *units = args[0];
    const long long start = num[0], room = num[1], current = num[2];
    long long max_physic = num[3];
    const Py_ssize_t n = PyList_GET_SIZE(units);
    if (start < 0 || room < 0) Py_RETURN_NONE;
    long long avail = n - start < room ? n - start : room;
    if (avail < 0) avail = 0;
    PyObject *packed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)avail * 20);
    if (packed == NULL) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    long long count = 0;
    const long long big = 1LL << 58; /* |values| below this: no sum or product here overflows */
    for (; count < avail; count++) {
        PyObject *u = PyList_GET_ITEM(units, (Py_ssize_t)(start + count));
        long long offset, size, tags, cq_offset;
        if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 4 || tuple_ll(u, 0, -big, big, &offset) < 0 ||
            tuple_ll(u, 1, INT32_MIN, INT32_MAX, &size) < 0 || tuple_ll(u, 2, INT64_MIN, INT64_MAX, &tags) < 0 ||
            tuple_ll(u, 3, -big, big, &cq_offset) < 0) {
            Py_DECREF(packed);
            Py_RETURN_NONE;
        }
        if (cq_offset * 20 != current + count * 20 || offset + size <= max_physic) break;
        if (offset < 0 || size <= 0 || cq_offset == 0) break;
        unsigned char *p = out + count * 20;
        put_be64(p, offset);
        put_be32(p + 8, (int32_t)size);
        put_be64(p + 12, tags);
        max_physic = offset + size;
    }
    if (count < avail && _PyBytes_Resize(&packed, (Py_ssize_t)count * 20) < 0) return NULL;
    return Py_BuildValue("(NLL)", packed, count, max_physic);
}

/* -- the broker's batch send: SEND_BATCH_MESSAGE body -> CommitLog records -----------------
 *
 *   batch_plan(data, suffix, shared)
 *       -> (plan, count, body_bytes, props_bytes, max_body, max_props, max_body_plus_props) | None
 *   batch_write(target, pos, base, now, store_host, sys_flag, born_ts, born_host, topic,
 *               queue_id, queue_offset, data, plan, suffix) -> [physical offset of each record]
 *
 * batch_plan splits the batch body (rocketq.protocol.batch: TOTALSIZE, MAGICCODE, BODYCRC, FLAG,
 * BODYLEN, body, PROPLEN, properties per message) and checks that every message is the usual one
 * of a RocketMQ client that rocketq.broker.send_properties.properties_as_sent takes: ASCII
 * properties, each piece one name\x01value\x02 with a non-empty name and value, no name twice,
 * UNIQ_KEY there, CLUSTER and POP_CK not, every name of `shared` there; and none that a store
 * would park (no "TIMER_", "__STARTDELIVERTIME\x01" or "DELAY\x01" anywhere in them). Its
 * record's properties are then the text as it came plus `suffix` (the CLUSTER pair). The plan
 * is five int64 per message: body start, body length, properties start, properties length,
 * flag. None, with nothing raised, for anything else (a malformed body, other properties): the
 * pure path then builds the messages and raises what it raises.
 *
 * batch_write packs the planned messages as V1 records (IPv4 born host) one after another at
 * `pos` of `target` (the segment's mapped memory), exactly as CommitLog._put_batch_fast does:
 * every record whole but the first, whose TOTALSIZE is written last (the batch's commit
 * point). The caller holds the put lock, has checked every limit and that the records fit.
 * BODYCRC is the CRC-32 of zlib (table-driven here) masked to 31 bits. */

static uint32_t crc_table[8][256]; /* filled by crc_init() at import */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

/* zlib.crc32(data, crc): the CRC of `crc`'s data followed by these n bytes */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, Py_ssize_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* zlib.crc32(data) */
static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) { return crc32_update(0, p, n); }

static PyObject *crc32_py(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32_of((const unsigned char *)b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static int has_sub(const unsigned char *p, Py_ssize_t n, const char *s, Py_ssize_t m) {
    for (Py_ssize_t i = 0; i + m <= n; i++)
        if (p[i] == (unsigned char)s[0] && memcmp(p + i, s, (size_t)m) == 0) return 1;
    return 0;
}

#define BATCH_MAX_PIECES 32

/* 1 when the properties [p, p+n) are the usual ones (see above), else 0 */
static int props_as_sent(const unsigned char *p, Py_ssize_t n, PyObject *shared) {
    if (n <= 0 || p[n - 1] != 0x02) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] >= 0x80) return 0;
    if (has_sub(p, n, "TIMER_", 6) || has_sub(p, n, "__STARTDELIVERTIME\x01", 19) || has_sub(p, n, "DELAY\x01", 6))
        return 0;
    Py_ssize_t key_at[BATCH_MAX_PIECES], key_len[BATCH_MAX_PIECES];
    int pieces = 0, uniq = 0;
    Py_ssize_t a = 0;
    while (a < n) {
        Py_ssize_t b = a, sep = -1;
        while (p[b] != 0x02) {
            if (p[b] == 0x01) {
                if (sep >= 0) return 0; /* two separators in one piece */
                sep = b;
            }
            b++;
        }
        if (sep <= a || sep + 1 >= b || pieces >= BATCH_MAX_PIECES) return 0;
        Py_ssize_t kl = sep - a;
        for (int j = 0; j < pieces; j++)
            if (key_len[j] == kl && memcmp(p + key_at[j], p + a, (size_t)kl) == 0) return 0;
        if ((kl == 7 && memcmp(p + a, "CLUSTER", 7) == 0) || (kl == 6 && memcmp(p + a, "POP_CK", 6) == 0)) return 0;
        if (kl == 8 && memcmp(p + a, "UNIQ_KEY", 8) == 0) uniq = 1;
        key_at[pieces] = a;
        key_len[pieces] = kl;
        pieces++;
        a = b + 1;
    }
    if (!uniq) return 0;
    Py_ssize_t ns = PyTuple_GET_SIZE(shared);
    for (Py_ssize_t s = 0; s < ns; s++) {
        PyObject *k = PyTuple_GET_ITEM(shared, s);
        if (!PyBytes_CheckExact(k)) return 0;
        Py_ssize_t kl = PyBytes_GET_SIZE(k);
        int found = 0;
        for (int j = 0; j < pieces && !found; j++)
            found = key_len[j] == kl && memcmp(p + key_at[j], PyBytes_AS_STRING(k), (size_t)kl) == 0;
        if (!found) return 0;
    }
    return 1;
}

static PyObject *batch_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "batch_plan(data: bytes, suffix: bytes, shared: tuple[bytes, ...])");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    PyObject *shared = args[2];
    Py_ssize_t cap = end / 22 + 1;
    PyObject *plan = PyBytes_FromStringAndSize(NULL, cap * 40);
    if (plan == NULL) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(plan);
    Py_ssize_t pos = 0, count = 0;
    long long body_bytes = 0, props_bytes = 0, max_body = 0, max_props = 0, max_payload = 0;
    while (pos < end) {
        if (end - pos < 22) goto decline;
        int32_t total = be32(d + pos), flag = be32(d + pos + 12), body_len = be32(d + pos + 16);
        Py_ssize_t body_start = pos + 20;
        if (body_len < 0 || body_start + body_len + 2 > end) goto decline;
        Py_ssize_t body_end = body_start + body_len;
        int32_t prop_len = (int16_t)((d[body_end] << 8) | d[body_end + 1]);
        Py_ssize_t prop_start = body_end + 2;
        if (prop_len < 0 || prop_start + prop_len > end) goto decline;
        if ((long long)total != 22LL + body_len + prop_len) goto decline;
        if (!props_as_sent(d + prop_start, prop_len, shared)) goto decline;
        unsigned char *e = out + count * 40;
        put_be64(e, body_start);
        put_be64(e + 8, body_len);
        put_be64(e + 16, prop_start);
        put_be64(e + 24, prop_len);
        put_be64(e + 32, flag);
        count++;
        body_bytes += body_len;
        props_bytes += prop_len;
        if (body_len > max_body) max_body = body_len;
        if (prop_len > max_props) max_props = prop_len;
        if ((long long)body_len + prop_len > max_payload) max_payload = (long long)body_len + prop_len;
        pos = prop_start + prop_len;
    }
    if (count == 0) goto decline;
    if (_PyBytes_Resize(&plan, count * 40) < 0) return NULL;
    return Py_BuildValue("(NnLLLLL)", plan, count, body_bytes, props_bytes, max_body, max_props, max_payload);
decline:
    Py_DECREF(plan);
    Py_RETURN_NONE;
}

static PyObject *batch_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError,
                        "batch_write(target, pos, base, now, store_host, sys_flag, born_ts, born_host, topic, "
                        "queue_id, queue_offset, data, plan, suffix)");
        return NULL;
    }
    long long v[7];
    const int ints[7] = {1, 2, 3, 5, 6, 9, 10};
    for (int j = 0; j < 7; j++) {
        v[j] = PyLong_AsLongLong(args[ints[j]]);
        if (v[j] == -1 && PyErr_Occurred()) return NULL;
    }
    const long long pos0 = v[0], base = v[1], now = v[2], sys_flag = v[3], born_ts = v[4], qid = v[5], qoff = v[6];
    PyObject *store_host = args[4], *born_host = args[7], *topic = args[8], *data = args[11], *plan = args[12],
             *suffix = args[13];
    if (!PyBytes_CheckExact(store_host) || !PyBytes_CheckExact(born_host) || PyBytes_GET_SIZE(born_host) != 8 ||
        !PyBytes_CheckExact(topic) || PyBytes_GET_SIZE(topic) > 127 || !PyBytes_CheckExact(data) ||
        !PyBytes_CheckExact(plan) || PyBytes_GET_SIZE(plan) % 40 || !PyBytes_CheckExact(suffix)) {
        PyErr_SetString(PyExc_TypeError, "batch_write: bad argument types");
        return NULL;
    }
    const Py_ssize_t sh = PyBytes_GET_SIZE(store_host), tl = PyBytes_GET_SIZE(topic), sl = PyBytes_GET_SIZE(suffix);
    const Py_ssize_t n = PyBytes_GET_SIZE(plan) / 40;
    const unsigned char *pl = (const unsigned char *)PyBytes_AS_STRING(plan);
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    const Py_ssize_t dlen = PyBytes_GET_SIZE(data);
    const Py_ssize_t fixed = 72 + 8 + sh + 1 + 2 + tl + sl;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t bs = be64(pl + i * 40), bl = be64(pl + i * 40 + 8), ps = be64(pl + i * 40 + 16),
                pn = be64(pl + i * 40 + 24);
        if (bs < 0 || bl < 0 || ps < 0 || pn < 0 || bs + bl > dlen || ps + pn > dlen || pn + sl > 32767) {
            PyErr_SetString(PyExc_ValueError, "batch_write: the plan does not fit the batch body");
            return NULL;
        }
        total += fixed + bl + pn;
    }
    PyObject *offsets = PyList_New(n);
    if (offsets == NULL) return NULL;
    Py_buffer t;
    if (PyObject_GetBuffer(args[0], &t, PyBUF_WRITABLE) < 0) {
        Py_DECREF(offsets);
        return NULL;
    }
    if (pos0 < 0 || pos0 + total > t.len) {
        PyBuffer_Release(&t);
        Py_DECREF(offsets);
        PyErr_SetString(PyExc_ValueError, "batch_write: the records do not fit the target");
        return NULL;
    }
    unsigned char *out = (unsigned char *)t.buf;
    Py_ssize_t p = pos0;
    int32_t first_len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *e = pl + i * 40;
        int64_t bs = be64(e), bl = be64(e + 8), ps = be64(e + 16), pn = be64(e + 24), flag = be64(e + 32);
        int32_t len = (int32_t)(fixed + bl + pn);
        PyObject *off = PyLong_FromLongLong(base + p);
        if (off == NULL) {
            PyBuffer_Release(&t);
            Py_DECREF(offsets);
            return NULL;
        }
        PyList_SET_ITEM(offsets, i, off);
        unsigned char *r = out + p;
        if (i == 0) first_len = len;
        put_be32(r, i == 0 ? 0 : len);
        put_be32(r + 4, (int32_t)0xDAA320A7u);
        put_be32(r + 8, (int32_t)(crc32_of(d + bs, bl) & 0x7FFFFFFFu));
        put_be32(r + 12, (int32_t)qid);
        put_be32(r + 16, (int32_t)flag);
        put_be64(r + 20, qoff + i);
        put_be64(r + 28, base + p);
        put_be32(r + 36, (int32_t)sys_flag);
        put_be64(r + 40, born_ts);
        memcpy(r + 48, PyBytes_AS_STRING(born_host), 8);
        put_be64(r + 56, now);
        memcpy(r + 64, PyBytes_AS_STRING(store_host), (size_t)sh);
        unsigned char *q = r + 64 + sh;
        put_be32(q, 0);      /* RECONSUMETIMES */
        put_be64(q + 4, 0);  /* PreparedTransactionOffset */
        put_be32(q + 12, (int32_t)bl);
        memcpy(q + 16, d + bs, (size_t)bl);
        q += 16 + bl;
        *q++ = (unsigned char)tl;
        memcpy(q, PyBytes_AS_STRING(topic), (size_t)tl);
        q += tl;
        *q++ = (unsigned char)((pn + sl) >> 8);
        *q++ = (unsigned char)(pn + sl);
        memcpy(q, d + ps, (size_t)pn);
        memcpy(q + pn, PyBytes_AS_STRING(suffix), (size_t)sl);
        p += len;
    }
    put_be32(out + pos0, first_len); /* commit point of the batch */
    PyBuffer_Release(&t);
    return offsets;
}

/* -- DLedger entries: rocketq.ha.entry_format.encode_entries, compiled ------------------------ */

/* the entries' CRCs: crc32_update, the table-driven CRC-32 of the batch block above */

static void dl_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void dl_put64(unsigned char *p, uint64_t v) {
    dl_put32(p, (uint32_t)(v >> 32));
    dl_put32(p + 4, (uint32_t)v);
}

/* encode_entries(magic, first_index, term, positions, bodies, prev_chain): the entries' bytes, their
   index records and the last chain value; None when a position does not follow the entry before it. */
static PyObject *dledger_encode_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_entries(magic, first_index, term, positions, bodies, prev_chain) takes 6 arguments");
        return NULL;
    }
    long long magic = PyLong_AsLongLong(args[0]);
    long long first = PyLong_AsLongLong(args[1]);
    long long term = PyLong_AsLongLong(args[2]);
    long long prev = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    if (magic < INT32_MIN || magic > INT32_MAX || prev < INT32_MIN || prev > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "encode_entries: magic and prev_chain must be 32-bit values");
        return NULL;
    }
    PyObject *positions = PySequence_Fast(args[3], "encode_entries: positions must be a sequence");
    if (positions == NULL) return NULL;
    PyObject *bodies = PySequence_Fast(args[4], "encode_entries: bodies must be a sequence");
    if (bodies == NULL) {
        Py_DECREF(positions);
        return NULL;
    }
    PyObject *data = NULL, *records = NULL, *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bodies);
    if (PySequence_Fast_GET_SIZE(positions) != n) {
        PyErr_SetString(PyExc_ValueError, "encode_entries: as many positions as bodies are needed");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PySequence_Fast_GET_ITEM(bodies, i);
        if (!PyBytes_Check(body)) {
            PyErr_SetString(PyExc_TypeError, "encode_entries: every body must be bytes");
            goto done;
        }
        if (PyBytes_GET_SIZE(body) > INT32_MAX - 48) {
            PyErr_SetString(PyExc_ValueError, "encode_entries: a body is too large for an entry");
            goto done;
        }
        total += 48 + PyBytes_GET_SIZE(body);
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    records = PyBytes_FromStringAndSize(NULL, 32 * n);
    if (data == NULL || records == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *rec = (unsigned char *)PyBytes_AS_STRING(records);
    uint32_t chain = (uint32_t)(prev & 0xFFFFFFFFLL);
    long long pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long at = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(positions, i));
        if (at == -1 && PyErr_Occurred()) goto done;
        if (i > 0 && at != pos) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        pos = at;
        PyObject *body = PySequence_Fast_GET_ITEM(bodies, i);
        Py_ssize_t len = PyBytes_GET_SIZE(body);
        uint32_t size = (uint32_t)(48 + len);
        const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(body);
        dl_put32(out, (uint32_t)magic);
        dl_put32(out + 4, size);
        dl_put64(out + 8, (uint64_t)(first + i));
        dl_put64(out + 16, (uint64_t)term);
        dl_put64(out + 24, (uint64_t)pos);
        dl_put32(out + 32, 0);
        uint32_t body_crc = crc32_update(0, b, len);
        unsigned char word[4];
        dl_put32(word, chain);
        uint32_t c = crc32_update(0, word, 4);
        c = crc32_update(c, out, 36);
        dl_put32(word, body_crc);
        chain = crc32_update(c, word, 4);
        dl_put32(out + 36, chain);
        dl_put32(out + 40, body_crc);
        dl_put32(out + 44, (uint32_t)len);
        memcpy(out + 48, b, (size_t)len);
        dl_put32(rec, (uint32_t)magic);
        dl_put64(rec + 4, (uint64_t)pos);
        dl_put32(rec + 12, size);
        dl_put64(rec + 16, (uint64_t)(first + i));
        dl_put64(rec + 24, (uint64_t)term);
        out += size;
        rec += 32;
        pos += size;
    }
    result = Py_BuildValue("(OOi)", data, records, (int)(int32_t)chain);
done:
    Py_XDECREF(data);
    Py_XDECREF(records);
    Py_DECREF(positions);
    Py_DECREF(bodies);
    return result;
}

/* -- the embedded store's put of Message objects -------------------------------------------
 *
 *   setup_message_put(Message, parking_names)
 *   message_inner(msg, queue_id, born_ts, born_host) -> BrokerMessage | None
 *   plan_messages(msgs) -> (data, (plan, count, body_bytes, props_bytes, max_body, max_props,
 *                                  max_body_plus_props)) | None
 *
 * A Message that nothing parks (exactly a Message, delay_level the int 0, none of the
 * parking_names among its property names) becomes the BrokerMessage MessageStore.put_message
 * makes of it: the properties text built here from its properties dict, tags and keys as
 * encode_properties(msg.all_properties()) writes it (the dict's order; TAGS and KEYS at their
 * place in the dict when it names them, else appended in that order; None values left out),
 * UTF-8 encoded. None, with nothing raised, for anything else: another class, a key or value
 * that is not exactly a str, a separator (\x01, \x02) or a lone surrogate anywhere in the text,
 * keys not a list or tuple; the pure path then builds the message and raises what it raises.
 *
 * plan_messages takes a list of such Messages of one topic whose bodies are bytes and flags
 * int32 and lays them out for batch_write: data holds each body followed by its properties
 * text, the plan is batch_plan's (five int64 per message). */

enum { MS_TOPIC, MS_BODY, MS_TAGS, MS_KEYS, MS_PROPERTIES, MS_DELAY_LEVEL, MS_FLAG, MS_COUNT };
static const char *const ms_names[MS_COUNT] = {"topic", "body", "tags", "keys", "properties", "delay_level", "flag"};
static PyTypeObject *message_class;
static Py_ssize_t ms_off[MS_COUNT];
static PyObject *parking_names; /* tuple of str */

static PyObject *setup_message_put(PyObject *self, PyObject *args) {
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!:setup_message_put", &PyType_Type, &cls, &PyTuple_Type, &names)) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i)) || !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "setup_message_put: the parking names must be ASCII str");
            return NULL;
        }
    if (read_offsets((PyTypeObject *)cls, ms_names, ms_off, MS_COUNT) < 0) return NULL;
    Py_INCREF(cls);
    Py_XSETREF(message_class, (PyTypeObject *)cls);
    Py_INCREF(names);
    Py_XSETREF(parking_names, names);
    Py_RETURN_NONE;
}

/* s's UTF-8 text when s is exactly a str without a separator and UTF-8 encodes it; else NULL.
 * With check 0 (a text msg_text has already measured, so checked) only its text. */
static const char *plain_text(PyObject *s, Py_ssize_t *n, int check) {
    if (!PyUnicode_CheckExact(s)) return NULL;
    const char *p;
    if (PyUnicode_IS_COMPACT_ASCII(s)) {
        p = (const char *)PyUnicode_DATA(s);
        *n = PyUnicode_GET_LENGTH(s);
    } else if ((p = PyUnicode_AsUTF8AndSize(s, n)) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (check)
        for (Py_ssize_t i = 0; i < *n; i++)
            if ((unsigned char)(p[i] - 1) < 2) return NULL; /* \x01 or \x02 */
    return p;
}

/* append one name\x01value\x02 piece at *w (when w is not NULL); returns its length */
static Py_ssize_t put_piece(char **w, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    if (*w != NULL) {
        char *q = *w;
        memcpy(q, k, (size_t)kn);
        q[kn] = 1;
        memcpy(q + kn + 1, v, (size_t)vn);
        q[kn + 1 + vn] = 2;
        *w = q + kn + vn + 2;
    }
    return kn + vn + 2;
}

/* the KEYS value (the non-empty keys joined by one space) at *w when w is not NULL; its length */
static Py_ssize_t put_keys(char **w, PyObject *keys) {
    Py_ssize_t len = 0, nk = PySequence_Fast_GET_SIZE(keys), written = 0;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < nk; i++) {
        Py_ssize_t n = 0;
        const char *p = plain_text(items[i], &n, 0); /* checked by msg_text's first look */
        if (n == 0) continue;
        if (written++) {
            if (*w != NULL) *(*w)++ = ' ';
            len++;
        }
        if (*w != NULL) {
            memcpy(*w, p, (size_t)n);
            *w += n;
        }
        len += n;
    }
    return len;
}

/* The properties text of a Message nothing parks, written at w when w is not NULL (else only
 * measured): its length, or -1 (nothing raised) when the pure path must take the message. */
static Py_ssize_t msg_text(PyObject *m, char *w) {
    PyObject *tags = SLOT(m, ms_off[MS_TAGS]), *keys = SLOT(m, ms_off[MS_KEYS]);
    PyObject *props = SLOT(m, ms_off[MS_PROPERTIES]), *dl = SLOT(m, ms_off[MS_DELAY_LEVEL]);
    long long level;
    if (tags == NULL || keys == NULL || props == NULL || dl == NULL || !PyDict_CheckExact(props) ||
        long_in(dl, 0, 0, &level) < 0 || !(PyList_CheckExact(keys) || PyTuple_CheckExact(keys)))
        return -1;
    const int check = w == NULL; /* the writing pass follows a measuring one */
    const char *tp = NULL;
    Py_ssize_t tn = 0;
    if (tags != Py_None) {
        if (!PyUnicode_CheckExact(tags)) return -1;
        if (PyUnicode_GET_LENGTH(tags) > 0 && (tp = plain_text(tags, &tn, check)) == NULL) return -1;
    }
    int with_keys = 0;
    Py_ssize_t nk = PySequence_Fast_GET_SIZE(keys);
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < nk; i++) {
        Py_ssize_t n;
        if (!PyUnicode_CheckExact(items[i])) return -1;
        if (PyUnicode_GET_LENGTH(items[i]) == 0) continue;
        if (plain_text(items[i], &n, check) == NULL) return -1;
        with_keys = 1;
    }
    Py_ssize_t len = 0, pos = 0;
    PyObject *k, *v;
    int saw_tags = 0, saw_keys = 0;
    const Py_ssize_t np = PyTuple_GET_SIZE(parking_names);
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) return -1;
        const Py_ssize_t kl = PyUnicode_GET_LENGTH(k);
        for (Py_ssize_t j = 0; check && j < np; j++) {
            PyObject *name = PyTuple_GET_ITEM(parking_names, j);
            if (kl == PyUnicode_GET_LENGTH(name) && PyUnicode_Compare(k, name) == 0) return -1;
        }
        if (tp != NULL && kl == 4 && PyUnicode_CompareWithASCIIString(k, "TAGS") == 0) {
            saw_tags = 1;
            len += put_piece(&w, "TAGS", 4, tp, tn);
            continue;
        }
        if (with_keys && kl == 4 && PyUnicode_CompareWithASCIIString(k, "KEYS") == 0) {
            saw_keys = 1;
            if (w != NULL) {
                memcpy(w, "KEYS\x01", 5);
                w += 5;
            }
            len += 6 + put_keys(&w, keys);
            if (w != NULL) *w++ = 2;
            continue;
        }
        if (v == Py_None) continue; /* left out, whatever its name holds */
        Py_ssize_t kn, vn;
        const char *kp = plain_text(k, &kn, check), *vp;
        if (kp == NULL || (vp = plain_text(v, &vn, check)) == NULL) return -1;
        len += put_piece(&w, kp, kn, vp, vn);
    }
    if (tp != NULL && !saw_tags) len += put_piece(&w, "TAGS", 4, tp, tn);
    if (with_keys && !saw_keys) {
        if (w != NULL) {
            memcpy(w, "KEYS\x01", 5);
            w += 5;
        }
        len += 6 + put_keys(&w, keys);
        if (w != NULL) *w++ = 2;
    }
    return len;
}

static PyObject *message_inner(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "message_inner(msg, queue_id, born_ts, born_host)");
        return NULL;
    }
    PyObject *m = args[0];
    if (message_class == NULL || broker_message == NULL || Py_TYPE(m) != message_class) Py_RETURN_NONE;
    PyObject *topic = SLOT(m, ms_off[MS_TOPIC]), *body = SLOT(m, ms_off[MS_BODY]), *flag = SLOT(m, ms_off[MS_FLAG]);
    if (topic == NULL || body == NULL || flag == NULL) Py_RETURN_NONE;
    Py_ssize_t len = msg_text(m, NULL);
    if (len < 0) Py_RETURN_NONE;
    PyObject *props = PyBytes_FromStringAndSize(NULL, len);
    if (props == NULL) return NULL;
    msg_text(m, PyBytes_AS_STRING(props));
    PyObject *out = broker_message->tp_alloc(broker_message, 0);
    if (out == NULL) {
        Py_DECREF(props);
        return NULL;
    }
    PyObject *zero = PyLong_FromLong(0);
    PyObject *values[BM_COUNT] = {topic, body, props, args[1], flag, zero, args[2], args[3], zero, zero};
    for (int i = 0; i < BM_COUNT; i++) {
        if (i != BM_PROPERTIES) Py_INCREF(values[i]);
        SLOT(out, bm_off[i]) = values[i];
    }
    Py_DECREF(zero);
    return out;
}

static PyObject *plan_messages(PyObject *self, PyObject *msgs) {
    if (message_class == NULL || !PyList_CheckExact(msgs) || PyList_GET_SIZE(msgs) == 0) Py_RETURN_NONE;
    const Py_ssize_t n = PyList_GET_SIZE(msgs);
    PyObject *topic = NULL;
    long long body_bytes = 0, props_bytes = 0, max_body = 0, max_props = 0, max_payload = 0, flag;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (Py_TYPE(m) != message_class) Py_RETURN_NONE;
        PyObject *t = SLOT(m, ms_off[MS_TOPIC]), *body = SLOT(m, ms_off[MS_BODY]), *f = SLOT(m, ms_off[MS_FLAG]);
        if (t == NULL || body == NULL || f == NULL || !PyUnicode_CheckExact(t) || !PyBytes_CheckExact(body) ||
            long_in(f, I32_MIN, I32_MAX, &flag) < 0)
            Py_RETURN_NONE;
        if (topic == NULL)
            topic = t;
        else if (t != topic && PyUnicode_Compare(t, topic) != 0)
            Py_RETURN_NONE;
        Py_ssize_t pl = msg_text(m, NULL), bl = PyBytes_GET_SIZE(body);
        if (pl < 0) Py_RETURN_NONE;
        body_bytes += bl;
        props_bytes += pl;
        if (bl > max_body) max_body = bl;
        if (pl > max_props) max_props = pl;
        if ((long long)bl + pl > max_payload) max_payload = (long long)bl + pl;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(body_bytes + props_bytes));
    if (data == NULL) return NULL;
    PyObject *plan = PyBytes_FromStringAndSize(NULL, n * 40);
    if (plan == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    char *d = PyBytes_AS_STRING(data);
    unsigned char *e = (unsigned char *)PyBytes_AS_STRING(plan);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++, e += 40) {
        PyObject *m = PyList_GET_ITEM(msgs, i), *body = SLOT(m, ms_off[MS_BODY]);
        Py_ssize_t bl = PyBytes_GET_SIZE(body);
        long_in(SLOT(m, ms_off[MS_FLAG]), I32_MIN, I32_MAX, &flag);
        memcpy(d + at, PyBytes_AS_STRING(body), (size_t)bl);
        Py_ssize_t pl = msg_text(m, d + at + bl);
        put_be64(e, at);
        put_be64(e + 8, bl);
        put_be64(e + 16, at + bl);
        put_be64(e + 24, pl);
        put_be64(e + 32, flag);
        at += bl + pl;
    }
    return Py_BuildValue("(N(NnLLLLL))", data, plan, n, body_bytes, props_bytes, max_body, max_props, max_payload);
}

/* -- the DLedger follower: rocketq.ha.entry_format.check_entries, compiled ------------------- */

static uint32_t dl_get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t dl_get64(const unsigned char *p) { return (uint64_t)dl_get32(p) << 32 | dl_get32(p + 4); }

/* the chain value of the entry whose first 36 header bytes are at h (entry_format.chain_crc) */
static uint32_t dl_chain(uint32_t prev, const unsigned char *h, uint32_t body_crc) {
    unsigned char word[4];
    dl_put32(word, prev);
    uint32_t c = crc32_update(0, word, 4);
    c = crc32_update(c, h, 36);
    dl_put32(word, body_crc);
    return crc32_update(c, word, 4);
}

#define DL_LIMIT ((long long)1 << 62)

/* check_entries(buf, pos, index, prev_chain, min_term) -> (count, bytes, problem, records, chain, term):
   entry_format.check_entries_pure, the same checks in the same order with the same problem texts. */
static PyObject *dledger_check_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "check_entries(buf, pos, index, prev_chain, min_term) takes 5 arguments");
        return NULL;
    }
    long long pos = PyLong_AsLongLong(args[1]);
    long long index = PyLong_AsLongLong(args[2]);
    long long min_term = PyLong_AsLongLong(args[4]);
    long long prev = args[3] == Py_None ? 0 : PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (pos < -DL_LIMIT || pos > DL_LIMIT || index < -DL_LIMIT || index > DL_LIMIT || min_term < -DL_LIMIT ||
        min_term > DL_LIMIT || prev < INT32_MIN || prev > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "check_entries: pos, index and min_term must lie within +-2**62, prev_chain in 32 bits");
        return NULL;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = (const unsigned char *)b.buf;
    Py_ssize_t end = b.len, off = 0, count = 0;
    int have_chain = args[3] != Py_None;
    uint32_t chain = (uint32_t)(prev & 0xFFFFFFFFLL);
    long long term = min_term;
    int32_t last_chain = 0;
    PyObject *problem = NULL, *records = NULL, *result = NULL;
    /* the records: at most one per 48 bytes */
    records = PyBytes_FromStringAndSize(NULL, (end / 48) * 32);
    if (records == NULL) goto done;
    unsigned char *rec = (unsigned char *)PyBytes_AS_STRING(records);
    while (off < end) {
        Py_ssize_t avail = end - off;
        if (avail < 48) {
            problem = PyUnicode_FromFormat("%zd B left, less than a 48 B header", avail);
            break;
        }
        const unsigned char *h = d + off;
        int32_t magic = (int32_t)dl_get32(h), size = (int32_t)dl_get32(h + 4);
        long long e_index = (long long)dl_get64(h + 8), e_term = (long long)dl_get64(h + 16);
        long long e_pos = (long long)dl_get64(h + 24);
        int32_t e_chain = (int32_t)dl_get32(h + 36), e_crc = (int32_t)dl_get32(h + 40);
        int32_t body_size = (int32_t)dl_get32(h + 44);
        if (magic < 1 || magic > 3) {
            problem = PyUnicode_FromFormat("magic %d is no entry type", (int)magic);
            break;
        }
        if ((long long)size != 48 + (long long)body_size || body_size < 0) {
            problem = PyUnicode_FromFormat("size %d != 48 + bodySize %d", (int)size, (int)body_size);
            break;
        }
        if ((Py_ssize_t)size > avail) {
            problem = PyUnicode_FromFormat("size %d runs past the %zd B left in the file", (int)size, avail);
            break;
        }
        if (e_pos != pos) {
            problem = PyUnicode_FromFormat("pos field %lld != position %lld", e_pos, pos);
            break;
        }
        if (e_index != index) {
            problem = PyUnicode_FromFormat("index %lld != expected %lld", e_index, index);
            break;
        }
        if (e_term < term) {
            problem = PyUnicode_FromFormat("term %lld < previous entry's term %lld", e_term, term);
            break;
        }
        if (!(e_chain == 0 && e_crc == 0)) { /* entry_format.unchecked: DLedger's entries pass as they are */
            int32_t crc = (int32_t)crc32_update(0, h + 48, body_size);
            if (crc != e_crc) {
                problem = PyUnicode_FromFormat("bodyCrc %d != CRC32 of the body %d", (int)e_crc, (int)crc);
                break;
            }
            if (!have_chain && e_index == 0) {
                have_chain = 1;
                chain = 0;
            }
            if (have_chain) {
                int32_t want = (int32_t)dl_chain(chain, h, (uint32_t)e_crc);
                if (want != e_chain) {
                    problem = PyUnicode_FromFormat("chainCrc %d != %d computed from the previous entry", (int)e_chain,
                                                   (int)want);
                    break;
                }
            }
        }
        dl_put32(rec, (uint32_t)magic);
        dl_put64(rec + 4, (uint64_t)pos);
        dl_put32(rec + 12, (uint32_t)size);
        dl_put64(rec + 16, (uint64_t)index);
        dl_put64(rec + 24, (uint64_t)e_term);
        rec += 32;
        have_chain = 1;
        chain = (uint32_t)e_chain;
        last_chain = e_chain;
        term = e_term;
        count++;
        off += size;
        pos += size;
        index++;
    }
    if (problem == NULL && PyErr_Occurred()) goto done;
    if (problem == NULL) problem = Py_NewRef(Py_None);
    if (_PyBytes_Resize(&records, count * 32) < 0) goto done;
    if (count == 0)
        result = Py_BuildValue("(nnOONO)", count, off, problem, records, args[3] == Py_None ? PyLong_FromLong(0)
                                                                                             : Py_NewRef(args[3]),
                               args[4]);
    else
        result = Py_BuildValue("(nnOOiL)", count, off, problem, records, (int)last_chain, term);
done:
    Py_XDECREF(problem);
    Py_XDECREF(records);
    PyBuffer_Release(&b);
    return result;
}

/* -- the DLedger follower: rocketq.ha.peer_codec.split_raw, compiled --------------------------
 *
 *   setup_raft_entry(Entry, EntryKind.NORMAL, EntryKind.NOOP)
 *   split_raw_entries(body, off, count) -> (entries, raws, end) | None
 *
 * The count entries of a form-1 append at body[off:], as peer_codec.split_raw_pure splits them:
 * a tuple of raft_types.Entry (index, term, the body, NOOP for magic 2 else NORMAL), a list of each
 * entry's bytes and the offset after the last. None, with nothing raised, for a header cut short or
 * a bad size (the pure function raises what it raises for them). */

enum { RE_INDEX, RE_TERM, RE_DATA, RE_KIND, RE_COUNT };
static const char *const re_names[RE_COUNT] = {"index", "term", "data", "kind"};
static PyTypeObject *re_entry;
static PyObject *re_normal, *re_noop;
static Py_ssize_t re_off[RE_COUNT];

static PyObject *setup_raft_entry(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cls, *normal, *noop;
    if (!PyArg_ParseTuple(args, "OOO:setup_raft_entry", &cls, &normal, &noop)) return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_raft_entry: Entry must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, re_names, re_off, RE_COUNT) < 0) return NULL;
    Py_INCREF(cls);
    Py_INCREF(normal);
    Py_INCREF(noop);
    Py_XSETREF(re_entry, (PyTypeObject *)cls);
    Py_XSETREF(re_normal, normal);
    Py_XSETREF(re_noop, noop);
    Py_RETURN_NONE;
}

static PyObject *split_raw_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (re_entry == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_raft_entry() was not called");
        return NULL;
    }
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "split_raw_entries(body, off, count) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t off = PyLong_AsSsize_t(args[1]);
    if (off == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = (const unsigned char *)b.buf;
    Py_ssize_t len = b.len;
    PyObject *entries = NULL, *raws = NULL, *result = NULL;
    if (count < 0) count = 0; /* as range(count): nothing to split */
    if (count > 0 && (off < 0 || off > len || count > (len - off) / 48)) goto unusual;
    entries = PyTuple_New(count);
    raws = PyList_New(count);
    if (entries == NULL || raws == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (len - off < 48) goto unusual;
        const unsigned char *p = d + off;
        int32_t size = (int32_t)dl_get32(p + 4), body_size = (int32_t)dl_get32(p + 44);
        if (size < 48 || (long long)size != 48 + (long long)body_size || size > len - off) goto unusual;
        PyObject *e = re_entry->tp_alloc(re_entry, 0);
        if (e == NULL) goto done;
        PyTuple_SET_ITEM(entries, i, e);
        PyObject *raw = PyBytes_FromStringAndSize((const char *)p, size);
        if (raw == NULL) goto done;
        PyList_SET_ITEM(raws, i, raw);
        PyObject *index = PyLong_FromLongLong((long long)dl_get64(p + 8));
        PyObject *term = PyLong_FromLongLong((long long)dl_get64(p + 16));
        PyObject *data = PyBytes_FromStringAndSize((const char *)p + 48, body_size);
        SLOT(e, re_off[RE_INDEX]) = index;
        SLOT(e, re_off[RE_TERM]) = term;
        SLOT(e, re_off[RE_DATA]) = data;
        SLOT(e, re_off[RE_KIND]) = Py_NewRef((int32_t)dl_get32(p) == 2 ? re_noop : re_normal);
        if (index == NULL || term == NULL || data == NULL) goto done;
        off += size;
    }
    result = Py_BuildValue("(OOn)", entries, raws, off);
    goto done;
unusual:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(entries);
    Py_XDECREF(raws);
    PyBuffer_Release(&b);
    return result;
}

/* -- DLedger dispatch: scan_window's walk over entries --------------------------------------
 *
 * The entries of a window of a DLedger data file, from entry `index` at position `base`: each a
 * 48-byte header (entry_format: magic, size, index, term, pos, channel, chainCrc, bodyCrc,
 * bodySize) and its body. A NOOP (magic 2, empty body) is stepped over; a NORMAL entry (magic 1)
 * adds the start of its body, which must be exactly one CommitLog record (its TOTALSIZE the body's
 * size, a message magic, at least V1_MIN_SIZE bytes: scan_window checks its layout). The entry's
 * index and pos fields must follow on (index, base + offset) and its body match bodyCrc unless
 * both checksum fields are 0 (entry_format.unchecked), as EntryStore.get checks a read, or the
 * entry lies at or past `checked_from` (EntryStore.written_from: bytes this process wrote, their
 * CRCs computed or checked as they were written; LLONG_MAX: every entry is checked). The walk
 * stops at the window's end (*stop 0) or at the first entry it does not take (*stop 3: another
 * magic, a size that does not add up or runs past the window, a body that is not one record, a
 * CRC that does not match); it returns where it stopped (the end of the last entry taken), or
 * -1 with MemoryError. */
static Py_ssize_t dledger_entry_walk(const unsigned char *d, Py_ssize_t n, long long base, long long index,
                                     long long checked_from, Py_ssize_t **starts, Py_ssize_t *nstarts,
                                     Py_ssize_t *cap, int *stop) {
    Py_ssize_t p = 0;
    *stop = 0;
    while (p < n) {
        const unsigned char *h = d + p;
        if (n - p < 48) {
            *stop = 3;
            break;
        }
        const int32_t magic = be32(h), size = be32(h + 4), body_size = be32(h + 44);
        if ((magic != 1 && magic != 2) || body_size < 0 || (int64_t)size != 48 + (int64_t)body_size ||
            (Py_ssize_t)size > n - p || be64(h + 8) != index || be64(h + 24) != base + p ||
            (magic == 2) != (body_size == 0)) {
            *stop = 3;
            break;
        }
        if (magic == 1) {
            const unsigned char *r = h + 48;
            const int32_t rmagic = body_size >= 8 ? be32(r + 4) : 0;
            if (body_size < V1_MIN_SIZE || be32(r) != body_size ||
                (rmagic != MESSAGE_MAGIC_CODE && rmagic != MESSAGE_MAGIC_CODE_V2)) {
                *stop = 3;
                break;
            }
            const int32_t chain = be32(h + 36), body_crc = be32(h + 40);
            if (base + p < checked_from && !(chain == 0 && body_crc == 0) &&
                (int32_t)crc32_update(0, r, body_size) != body_crc) {
                *stop = 3;
                break;
            }
            if (*nstarts == *cap) {
                Py_ssize_t grown_cap = *cap ? *cap * 2 : 64;
                Py_ssize_t *grown = PyMem_Realloc(*starts, (size_t)grown_cap * sizeof(Py_ssize_t));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    return -1;
                }
                *starts = grown;
                *cap = grown_cap;
            }
            (*starts)[(*nstarts)++] = p + 48;
        }
        p += size;
        index++;
    }
    return p;
}

/* -- a lone SEND_MESSAGE_V2 frame ---------------------------------------------------------------
 *
 *   lone_send(data, max_body) -> (command, header) or None
 *
 * rocketq.broker.send_frame.pure_lone_send, compiled: when data is exactly one whole frame (its
 * length field is len(data) - 4, at most max_body) with a JSON header that begins
 * {"code":310, and decodes (decode_json_header above) to a request of code 310 with flag 0
 * whose extFields decode_send_header takes as a SEND_MESSAGE_V2 header that is not a batch: the
 * command and that header. None for anything else, errors of the header decoding included (the
 * general path decodes the frame again and meets them). Any data other than bytes goes to the
 * pure function. */

static struct {
    PyObject *pure;                 /* pure_lone_send */
} ls;

#define LONE_PREFIX "{\"code\":310,"
#define LONE_CODE 310

static PyObject *setup_lone_send(PyObject *self, PyObject *pure) {
    Py_INCREF(pure);
    Py_XSETREF(ls.pure, pure);
    Py_RETURN_NONE;
}

/* NULL with an exception on a failure of this process; None after an Exception it swallowed. */
static PyObject *lone_swallow(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyObject *lone_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ls.pure == NULL || jh.command_type == NULL || ss.header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_lone_send() was not called");
        return NULL;
    }
    long long max_body;
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[1]))
        return PyObject_Vectorcall(ls.pure, args, (size_t)nargs, NULL);
    if (long_in(args[1], 0, I32_MAX, &max_body) < 0) {
        PyErr_Clear();
        return PyObject_Vectorcall(ls.pure, args, (size_t)nargs, NULL);
    }
    const Py_ssize_t plen = (Py_ssize_t)(sizeof LONE_PREFIX - 1);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (n < 8 + plen) Py_RETURN_NONE;
    long long length = be32(p);
    uint32_t type_hlen = (uint32_t)be32(p + 4);
    if (length != (long long)n - 4 || length > max_body || (type_hlen >> 24) != 0) Py_RETURN_NONE;
    Py_ssize_t hlen = (Py_ssize_t)type_hlen;
    if (hlen > n - 8 || hlen < plen || memcmp(p + 8, LONE_PREFIX, (size_t)plen) != 0) Py_RETURN_NONE;
    PyObject *pair[2];
    pair[0] = PyBytes_FromStringAndSize((const char *)p + 8, hlen);
    pair[1] = 8 + hlen < n ? PyBytes_FromStringAndSize((const char *)p + 8 + hlen, n - 8 - hlen)
                           : Py_NewRef(st.empty_bytes);
    PyObject *cmd = pair[0] == NULL || pair[1] == NULL ? NULL : decode_json_header(NULL, pair, 2);
    Py_XDECREF(pair[0]);
    Py_XDECREF(pair[1]);
    if (cmd == NULL) return PyErr_Occurred() ? lone_swallow() : NULL;
    PyObject *result = NULL, *h = NULL;
    const Py_ssize_t *off = jh.rc_off;
    int command = Py_TYPE(cmd) == jh.command_type;
    PyObject *code = command ? SLOT(cmd, off[RC_CODE]) : NULL, *flag = command ? SLOT(cmd, off[RC_FLAG]) : NULL,
             *ext = command ? SLOT(cmd, off[RC_EXT_FIELDS]) : NULL;
    if (code == NULL || flag == NULL || ext == NULL || !PyLong_CheckExact(code) ||
        !PyLong_CheckExact(flag) || !PyDict_CheckExact(ext) || PyLong_AsLongLong(code) != LONE_CODE ||
        PyLong_AsLongLong(flag) != 0) {
        if (PyErr_Occurred()) PyErr_Clear(); /* an int beyond 64 bits: not a lone send */
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *val[SH_COUNT];
    int err = 0;
    for (int i = 0; i < SH_COUNT; i++) { /* held: a lookup may compare keys with Python code */
        val[i] = ext_get(ext, ss.keys[1][i], &err);
        Py_XINCREF(val[i]);
    }
    h = err ? NULL : send_header_of(ext, Py_True, val);
    for (int i = 0; i < SH_COUNT; i++) Py_XDECREF(val[i]);
    if (h == NULL) {
        result = lone_swallow();
        goto done;
    }
    if (Py_TYPE(h) != ss.header_type || SLOT(h, ss.sh_off[SH_BATCH]) != Py_False) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyTuple_Pack(2, cmd, h);
done:
    Py_DECREF(cmd);
    Py_XDECREF(h);
    return result;
}

/* -- a BrokerMessage, built ----------------------------------------------------------------------
 *
 *   broker_message(topic, body, properties, queue_id, flag, sys_flag, born_timestamp, born_host,
 *                  reconsume_times) -> BrokerMessage
 *
 * BrokerMessage(...) called with those nine positional arguments (prepared_transaction_offset
 * 0): the instance its generated __init__ makes, the slots filled in place (it checks nothing).
 * Any other call is the class's own (setup_put_record binds the class). */

static PyObject *new_broker_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (broker_message == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_put_record() was not called");
        return NULL;
    }
    if (nargs != BM_PREPARED_OFFSET) return PyObject_Vectorcall((PyObject *)broker_message, args, (size_t)nargs, NULL);
    PyObject *out = broker_message->tp_alloc(broker_message, 0);
    if (out == NULL) return NULL;
    for (int i = 0; i < BM_PREPARED_OFFSET; i++) SLOT(out, bm_off[i]) = Py_NewRef(args[i]);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    SLOT(out, bm_off[BM_PREPARED_OFFSET]) = zero;
    return out;
}

/* -- dispatch of small windows: the per-record loops of the ConsumeQueue and index dispatchers -- */

/* A slot of a DispatchRequest (exactly that class, from setup_dispatch) as a long long, or -1
 * (no exception) when the object is another class, the slot is unset or not an exact int that
 * fits. */
static int dr_long(PyObject *req, int slot, long long *out) {
    PyObject *v = SLOT(req, dr_off[slot]);
    if (v == NULL || !PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

/* cq_group_requests(reqs) -> (groups, last_ts) | None
 *
 * The loop of rocketq.store.consume_queue.ConsumeQueueStore._put_batch over a window's
 * DispatchRequest objects: the records whose transaction type goes to a ConsumeQueue (sys_flag
 * & 0xC is NOT_TYPE or COMMIT) grouped by (topic, queue_id) in order of first appearance, each
 * group the list of (commit_log_offset, msg_size, tags_code, consume_queue_offset) tuples of
 * its records in window order (the very objects of the requests), and the store_timestamp of
 * the last such record (0 when none). None, with nothing raised, when reqs is not a list of
 * exactly DispatchRequest objects with every slot set and an exact int sys_flag (the pure loop
 * then takes the window). */
static PyObject *cq_group_requests(PyObject *self, PyObject *reqs) {
    if (dispatch_request == NULL || !PyList_Check(reqs)) Py_RETURN_NONE;
    const Py_ssize_t n = PyList_GET_SIZE(reqs);
    for (Py_ssize_t i = 0; i < n; i++) { /* checked first: nothing is built for a window left to Python */
        PyObject *r = PyList_GET_ITEM(reqs, i);
        long long flag;
        if (Py_TYPE(r) != dispatch_request || dr_long(r, DR_SYS_FLAG, &flag) < 0) Py_RETURN_NONE;
        if (SLOT(r, dr_off[DR_TOPIC]) == NULL || SLOT(r, dr_off[DR_QUEUE_ID]) == NULL ||
            SLOT(r, dr_off[DR_COMMIT_LOG_OFFSET]) == NULL || SLOT(r, dr_off[DR_MSG_SIZE]) == NULL ||
            SLOT(r, dr_off[DR_TAGS_CODE]) == NULL || SLOT(r, dr_off[DR_CQ_OFFSET]) == NULL ||
            SLOT(r, dr_off[DR_STORE_TS]) == NULL)
            Py_RETURN_NONE;
    }
    PyObject *groups = PyDict_New();
    if (groups == NULL) return NULL;
    PyObject *last_ts = NULL; /* borrowed */
    /* the groups met so far by topic object and exact-int queue id (the window's requests share
     * their topic objects): most records find theirs here without making a key tuple */
    enum { GROUP_CACHE = 32 };
    PyObject *seen_topic[GROUP_CACHE], *seen_list[GROUP_CACHE]; /* borrowed */
    long long seen_qid[GROUP_CACHE];
    int nseen = 0, hit = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(reqs, i);
        long long flag = 0;
        dr_long(r, DR_SYS_FLAG, &flag);
        if ((flag & 0xC) != 0x0 && (flag & 0xC) != 0x8) continue;
        PyObject *topic = SLOT(r, dr_off[DR_TOPIC]), *qid = SLOT(r, dr_off[DR_QUEUE_ID]);
        PyObject *group = NULL;
        long long q = 0;
        const int cacheable = dr_long(r, DR_QUEUE_ID, &q) == 0;
        if (cacheable) {
            for (int j = 0; j < nseen; j++) {
                const int at = (hit + j) % nseen; /* from the last hit on: round-robin queues */
                if (seen_topic[at] == topic && seen_qid[at] == q) {
                    group = seen_list[at];
                    hit = at + 1 < nseen ? at + 1 : 0;
                    break;
                }
            }
        }
        if (group == NULL) {
            PyObject *key = PyTuple_Pack(2, topic, qid);
            if (key == NULL) goto fail;
            group = PyDict_GetItemWithError(groups, key);
            if (group == NULL) {
                if (PyErr_Occurred()) {
                    Py_DECREF(key);
                    goto fail;
                }
                group = PyList_New(0);
                if (group == NULL || PyDict_SetItem(groups, key, group) < 0) {
                    Py_XDECREF(group);
                    Py_DECREF(key);
                    goto fail;
                }
                Py_DECREF(group); /* the dict holds it */
            }
            Py_DECREF(key);
            if (cacheable && nseen < GROUP_CACHE) {
                seen_topic[nseen] = topic;
                seen_qid[nseen] = q;
                seen_list[nseen++] = group;
            }
        }
        PyObject *unit = PyTuple_Pack(4, SLOT(r, dr_off[DR_COMMIT_LOG_OFFSET]), SLOT(r, dr_off[DR_MSG_SIZE]),
                                      SLOT(r, dr_off[DR_TAGS_CODE]), SLOT(r, dr_off[DR_CQ_OFFSET]));
        if (unit == NULL) goto fail;
        int rc = PyList_Append(group, unit);
        Py_DECREF(unit);
        if (rc < 0) goto fail;
        last_ts = SLOT(r, dr_off[DR_STORE_TS]);
    }
    if (last_ts == NULL) return Py_BuildValue("(Ni)", groups, 0);
    return Py_BuildValue("(NO)", groups, last_ts);
fail:
    Py_DECREF(groups);
    return NULL;
}

/* index_entries_of(reqs, rows, hashes, floor) -> (hashes, phys, stamps) | None
 *
 * The loop of rocketq.store.index_file.IndexService.build_index_batch over the index entries
 * the compiled scan made (a RequestList's index_entries: record numbers and key hashes): the
 * entries of records at or past floor that are not ROLLBACK records (sys_flag & 0xC != 0xC), as
 * their key hashes, their records' commit_log_offset and store_timestamp (the very objects).
 * None, with nothing raised, when an argument is not what that loop reads (a row out of range,
 * lists of different lengths, a request not exactly a DispatchRequest, a value not an exact
 * int): the pure loop then takes them and raises what it raises. */
static PyObject *index_entries_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "index_entries_of(reqs, rows, hashes, floor)");
        return NULL;
    }
    PyObject *reqs = args[0], *rows = args[1], *hashes = args[2];
    long long floor;
    if (dispatch_request == NULL || !PyList_Check(reqs) || !PyList_CheckExact(rows) || !PyList_CheckExact(hashes) ||
        PyList_GET_SIZE(rows) != PyList_GET_SIZE(hashes) || long_in(args[3], LLONG_MIN, LLONG_MAX, &floor) < 0)
        Py_RETURN_NONE;
    const Py_ssize_t n = PyList_GET_SIZE(rows), nreqs = PyList_GET_SIZE(reqs);
    for (Py_ssize_t i = 0; i < n; i++) { /* checked first, as cq_group_requests */
        long long row, offset, flag;
        if (item_in(rows, i, 0, (long long)nreqs - 1, &row) < 0) Py_RETURN_NONE;
        PyObject *r = PyList_GET_ITEM(reqs, (Py_ssize_t)row);
        if (Py_TYPE(r) != dispatch_request || dr_long(r, DR_COMMIT_LOG_OFFSET, &offset) < 0 ||
            dr_long(r, DR_SYS_FLAG, &flag) < 0 || SLOT(r, dr_off[DR_STORE_TS]) == NULL)
            Py_RETURN_NONE;
    }
    PyObject *out_h = PyList_New(0), *out_p = PyList_New(0), *out_s = PyList_New(0);
    if (out_h == NULL || out_p == NULL || out_s == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long row = 0, offset = 0, flag = 0;
        item_in(rows, i, 0, (long long)nreqs - 1, &row);
        PyObject *r = PyList_GET_ITEM(reqs, (Py_ssize_t)row);
        dr_long(r, DR_COMMIT_LOG_OFFSET, &offset);
        dr_long(r, DR_SYS_FLAG, &flag);
        if (offset < floor || (flag & 0xC) == 0xC) continue;
        if (PyList_Append(out_h, PyList_GET_ITEM(hashes, i)) < 0 ||
            PyList_Append(out_p, SLOT(r, dr_off[DR_COMMIT_LOG_OFFSET])) < 0 ||
            PyList_Append(out_s, SLOT(r, dr_off[DR_STORE_TS])) < 0)
            goto fail;
    }
    return Py_BuildValue("(NNN)", out_h, out_p, out_s);
fail:
    Py_XDECREF(out_h);
    Py_XDECREF(out_p);
    Py_XDECREF(out_s);
    return NULL;
}

/* cq_put_run(cq, units) -> count | None
 *
 * The first step of rocketq.store.consume_queue.ConsumeQueue.put_units, for a ConsumeQueue `cq`
 * whose last file is not full: cq_pack_run's run from units[0], written straight into that
 * file's write target (its write buffer, else its mapping) at its write position, the file's
 * wrote_position and the queue's _max_physic_offset moved past it; returns how many units it
 * wrote (0: the first unit is not part of a run, nothing written). The caller gives the rest
 * of the units to put_units. None, with nothing written and nothing raised, when the queue has
 * no file, its last file is full, an attribute is not what put_units reads or a unit is not
 * what cq_pack_run takes: put_units then takes every unit. */
static PyObject *cq_attr_names[8]; /* queue, _files, wrote_position, file_size, file_from_offset,
                                      write_buffer, mm, _max_physic_offset */

static int attr_ll(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    int rc = long_in(v, -(1LL << 61), 1LL << 61, out);
    Py_DECREF(v);
    return rc;
}

static PyObject *cq_put_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "cq_put_run(cq, units)");
        return NULL;
    }
    static const char *const names[8] = {"queue", "_files", "wrote_position", "file_size", "file_from_offset",
                                         "write_buffer", "mm", "_max_physic_offset"};
    for (int j = 0; j < 8; j++) {
        if (cq_attr_names[j] == NULL && (cq_attr_names[j] = PyUnicode_InternFromString(names[j])) == NULL)
            return NULL;
    }
    PyObject **nm = cq_attr_names;
    PyObject *cq = args[0], *units = args[1];
    if (!PyList_CheckExact(units)) Py_RETURN_NONE;
    PyObject *queue = PyObject_GetAttr(cq, nm[0]);
    PyObject *files = queue == NULL ? NULL : PyObject_GetAttr(queue, nm[1]);
    Py_XDECREF(queue);
    if (files == NULL || !PyList_CheckExact(files) || PyList_GET_SIZE(files) == 0) {
        PyErr_Clear();
        Py_XDECREF(files);
        Py_RETURN_NONE;
    }
    PyObject *last = Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1));
    Py_DECREF(files);
    PyObject *result = NULL, *target = NULL;
    long long wrote, file_size, from, max_physic;
    if (attr_ll(last, nm[2], &wrote) < 0 || attr_ll(last, nm[3], &file_size) < 0 ||
        attr_ll(last, nm[4], &from) < 0 || attr_ll(cq, nm[7], &max_physic) < 0 || wrote < 0 ||
        wrote >= file_size) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    target = PyObject_GetAttr(last, nm[5]);
    if (target == Py_None) {
        Py_DECREF(target);
        target = PyObject_GetAttr(last, nm[6]);
    }
    if (target == NULL) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        goto done;
    }
    const long long current = from + wrote, room = (file_size - wrote) / 20;
    const Py_ssize_t n = PyList_GET_SIZE(units);
    const long long avail = n < room ? n : room;
    const long long big = 1LL << 58; /* as cq_pack_run */
    long long count = 0;
    for (; count < avail; count++) { /* checked first: nothing is written for units left to Python */
        PyObject *u = PyList_GET_ITEM(units, (Py_ssize_t)count);
        long long offset, size, tags, cq_offset;
        if (!PyTuple_CheckExact(u) || PyTuple_GET_SIZE(u) != 4 || tuple_ll(u, 0, -big, big, &offset) < 0 ||
            tuple_ll(u, 1, INT32_MIN, INT32_MAX, &size) < 0 || tuple_ll(u, 2, INT64_MIN, INT64_MAX, &tags) < 0 ||
            tuple_ll(u, 3, -big, big, &cq_offset) < 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (cq_offset * 20 != current + count * 20 || offset + size <= max_physic) break;
        if (offset < 0 || size <= 0 || cq_offset == 0) break;
        max_physic = offset + size;
    }
    if (count == 0) {
        result = PyLong_FromLong(0);
        goto done;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(target, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (view.itemsize != 1 || wrote > view.len || count > (view.len - wrote) / 20) {
        PyBuffer_Release(&view);
        result = Py_NewRef(Py_None);
        goto done;
    }
    unsigned char *out = (unsigned char *)view.buf + wrote;
    for (long long k = 0; k < count; k++) {
        PyObject *u = PyList_GET_ITEM(units, (Py_ssize_t)k);
        long long offset = 0, size = 0, tags = 0;
        tuple_ll(u, 0, -big, big, &offset);
        tuple_ll(u, 1, INT32_MIN, INT32_MAX, &size);
        tuple_ll(u, 2, INT64_MIN, INT64_MAX, &tags);
        unsigned char *p = out + k * 20;
        put_be64(p, offset);
        put_be32(p + 8, (int32_t)size);
        put_be64(p + 12, tags);
    }
    PyBuffer_Release(&view);
    PyObject *new_wrote = PyLong_FromLongLong(wrote + count * 20);
    PyObject *new_max = PyLong_FromLongLong(max_physic);
    if (new_wrote == NULL || new_max == NULL || PyObject_SetAttr(last, nm[2], new_wrote) < 0 ||
        PyObject_SetAttr(cq, nm[7], new_max) < 0) {
        Py_XDECREF(new_wrote);
        Py_XDECREF(new_max);
        goto done;
    }
    Py_DECREF(new_wrote);
    Py_DECREF(new_max);
    result = PyLong_FromLongLong(count);
done:
    Py_XDECREF(target);
    Py_DECREF(last);
    return result;
}

/* index_put_file(f, hashes, phys, stamps) -> n | None
 *
 * rocketq.store.index_file.IndexFile.put_keys for an IndexFile `f` whose reserved blocks
 * already hold the entries to write: as many entries as fit (min(index_num - index_count,
 * len(hashes))) written by index_put_keys' loop, then f's counts, begin and end values and
 * its header as put_keys leaves them, f marked dirty; returns how many it wrote (0: the file is
 * full, nothing touched). None, with nothing written and nothing raised, when blocks must be
 * reserved first, an attribute is not what put_keys reads, a count would not fit the header's
 * int32 fields or index_put_keys leaves the values to Python: put_keys then does it all. */
static PyObject *ix_attr_names[12];

static PyObject *index_put_file(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "index_put_file(f, hashes, phys, stamps)");
        return NULL;
    }
    static const char *const names[12] = {"_mm", "_index_count", "index_num", "hash_slot_num",
                                          "_entries_pos", "_begin_timestamp", "_hash_slot_count",
                                          "_reserved_end", "_begin_phy_offset", "_end_phy_offset",
                                          "_end_timestamp", "_dirty"};
    enum { IX_MM, IX_COUNT, IX_NUM, IX_SLOTS, IX_ENTRIES, IX_BEGIN_TS, IX_SLOT_COUNT, IX_RESERVED, IX_BEGIN_PHY,
           IX_END_PHY, IX_END_TS, IX_DIRTY };
    for (int j = 0; j < 12; j++) {
        if (ix_attr_names[j] == NULL && (ix_attr_names[j] = PyUnicode_InternFromString(names[j])) == NULL)
            return NULL;
    }
    PyObject **nm = ix_attr_names;
    PyObject *f = args[0], *hashes = args[1], *phys = args[2], *stamps = args[3];
    if (!PyList_CheckExact(hashes) || !PyList_CheckExact(phys) || !PyList_CheckExact(stamps)) Py_RETURN_NONE;
    long long count, index_num, slots, entries_pos, begin, slot_count, reserved_end, begin_phy;
    if (attr_ll(f, nm[IX_COUNT], &count) < 0 || attr_ll(f, nm[IX_NUM], &index_num) < 0 ||
        attr_ll(f, nm[IX_SLOTS], &slots) < 0 || attr_ll(f, nm[IX_ENTRIES], &entries_pos) < 0 ||
        attr_ll(f, nm[IX_BEGIN_TS], &begin) < 0 || attr_ll(f, nm[IX_SLOT_COUNT], &slot_count) < 0 ||
        attr_ll(f, nm[IX_RESERVED], &reserved_end) < 0 || attr_ll(f, nm[IX_BEGIN_PHY], &begin_phy) < 0)
        Py_RETURN_NONE;
    const long long room = index_num - count, given = PyList_GET_SIZE(hashes);
    const long long n = room < given ? room : given;
    if (n <= 0) return PyLong_FromLong(0);
    if (entries_pos + (count + n) * INDEX_ENTRY_SIZE > reserved_end || count + n > INT32_MAX ||
        slot_count + n > INT32_MAX || n > PyList_GET_SIZE(phys) || n > PyList_GET_SIZE(stamps))
        Py_RETURN_NONE;
    PyObject *mm = PyObject_GetAttr(f, nm[IX_MM]);
    if (mm == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *argv[10] = {mm, NULL, NULL, NULL, NULL, NULL, NULL, hashes, phys, stamps};
    const long long nums[6] = {slots, entries_pos, count, n, begin, slot_count};
    PyObject *result = NULL, *done = NULL;
    for (int j = 0; j < 6; j++) {
        if ((argv[1 + j] = PyLong_FromLongLong(nums[j])) == NULL) goto out;
    }
    done = index_put_keys(self, argv, 10);
    if (done == NULL) goto out;
    if (done == Py_None) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    long long new_count, new_slot_count;
    PyObject *begin_phy_o = PyTuple_GET_ITEM(done, 2);
    if (long_in(PyTuple_GET_ITEM(done, 0), 0, INT32_MAX, &new_count) < 0 ||
        long_in(PyTuple_GET_ITEM(done, 1), 0, INT32_MAX, &new_slot_count) < 0) {
        PyErr_SetString(PyExc_SystemError, "index_put_file: index_put_keys gave counts out of range");
        goto out;
    }
    if (begin_phy_o != Py_None) {
        PyObject *begin_ts_o = PyTuple_GET_ITEM(done, 3);
        if (long_in(begin_phy_o, LLONG_MIN, LLONG_MAX, &begin_phy) < 0 ||
            long_in(begin_ts_o, LLONG_MIN, LLONG_MAX, &begin) < 0 ||
            PyObject_SetAttr(f, nm[IX_BEGIN_PHY], begin_phy_o) < 0 || PyObject_SetAttr(f, nm[IX_BEGIN_TS], begin_ts_o) < 0)
            goto out;
    }
    PyObject *end_phy_o = PyList_GET_ITEM(phys, (Py_ssize_t)(n - 1));
    PyObject *end_ts_o = PyList_GET_ITEM(stamps, (Py_ssize_t)(n - 1));
    long long end_phy = 0, end_ts = 0;
    long_in(end_phy_o, LLONG_MIN, LLONG_MAX, &end_phy); /* checked by index_put_keys */
    long_in(end_ts_o, LLONG_MIN, LLONG_MAX, &end_ts);
    if (PyObject_SetAttr(f, nm[IX_SLOT_COUNT], PyTuple_GET_ITEM(done, 1)) < 0 ||
        PyObject_SetAttr(f, nm[IX_COUNT], PyTuple_GET_ITEM(done, 0)) < 0 ||
        PyObject_SetAttr(f, nm[IX_END_PHY], end_phy_o) < 0 || PyObject_SetAttr(f, nm[IX_END_TS], end_ts_o) < 0)
        goto out;
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0) goto out;
    if (view.len < INDEX_HEADER_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_SystemError, "index_put_file: the map is shorter than the header");
        goto out;
    }
    unsigned char *h = (unsigned char *)view.buf; /* the header, as IndexFile._write_header packs it */
    put_be64(h, begin);
    put_be64(h + 8, end_ts);
    put_be64(h + 16, begin_phy);
    put_be64(h + 24, end_phy);
    put_be32(h + 32, (int32_t)new_slot_count);
    put_be32(h + 36, (int32_t)new_count);
    PyBuffer_Release(&view);
    if (PyObject_SetAttr(f, nm[IX_DIRTY], Py_True) < 0) goto out;
    result = PyLong_FromLongLong(n);
out:
    Py_XDECREF(done);
    for (int j = 1; j < 7; j++) Py_XDECREF(argv[j]);
    Py_DECREF(mm);
    return result;
}

/* -- module ------------------------------------------------------------------------------- */

/* -- the producer's send request, written ------------------------------------------------------
 *
 *   send_request_frame(opaque, group, topic, queue_id, sys_flag, born_ms, flag, properties, batch,
 *                      broker_name, body)      rocketq.client.send_request.pure_send_request_frame
 *
 * The whole SEND_MESSAGE_V2 (SEND_BATCH_MESSAGE when batch) frame a producer writes, without the
 * RemotingCommand and extFields dict the pure function builds and encodes: the same header
 * (SendMessageRequestHeaderV2's fields a..n in Java's order, then flag 0, language, opaque, JSON,
 * version), texts escaped as encode_basestring does. Takes exact str texts with a UTF-8 form,
 * exact ints (queue id, sys flag, born time, flag, opaque) that fit 64 bits, an exact bool and
 * bytes; anything else, and a frame over the 24-bit header or int32 length, goes to the pure
 * function, so the bytes and errors are the pure ones. */

static struct {
    PyObject *pure;
    char default_topic[64];
    Py_ssize_t default_topic_len;  /* its JSON literal, quotes included */
    char queue_nums[64];
    Py_ssize_t queue_nums_len;
    char lang[32];
    Py_ssize_t lang_len;
    long long version, code_single, code_batch;
} sr;

static PyObject *setup_send_request(PyObject *self, PyObject *args) {
    PyObject *pure, *topic, *nums, *lang;
    long long version, single, batch;
    if (!PyArg_ParseTuple(args, "OUUULLL:setup_send_request", &pure, &topic, &nums, &lang, &version, &single, &batch))
        return NULL;
    const char *p;
    Py_ssize_t n;
    Py_ssize_t tl = jlit_len(topic, &p, &n);
    if (tl < 0 || tl >= (Py_ssize_t)sizeof sr.default_topic) goto bad;
    put_jlit(sr.default_topic, p, n);
    sr.default_topic_len = tl;
    Py_ssize_t nl = jlit_len(nums, &p, &n);
    if (nl < 0 || nl >= (Py_ssize_t)sizeof sr.queue_nums) goto bad;
    put_jlit(sr.queue_nums, p, n);
    sr.queue_nums_len = nl;
    Py_ssize_t ll = jlit_len(lang, &p, &n);
    if (ll < 0 || ll >= (Py_ssize_t)sizeof sr.lang) goto bad;
    put_jlit(sr.lang, p, n);
    sr.lang_len = ll;
    sr.version = version;
    sr.code_single = single;
    sr.code_batch = batch;
    Py_INCREF(pure);
    Py_XSETREF(sr.pure, pure);
    Py_RETURN_NONE;
bad:
    PyErr_SetString(PyExc_ValueError, "setup_send_request: a constant text is too long or not UTF-8");
    return NULL;
}

/* An exact int that fits 64 bits into *v: 1, or 0 when not (no exception), -1 on an error. */
static int exact_ll(PyObject *o, long long *v) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    if (*v == -1 && PyErr_Occurred()) return -1;
    return 1;
}

static PyObject *send_request_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (sr.pure == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_send_request() was not called");
        return NULL;
    }
    if (nargs != 11) return PyObject_Vectorcall(sr.pure, args, (size_t)nargs, NULL);
    /* opaque, queue_id, sys_flag, born_ms, flag: decimal */
    static const int int_args[5] = {0, 3, 4, 5, 6};
    char num[5][24];
    Py_ssize_t num_len[5];
    for (int j = 0; j < 5; j++) {
        long long v;
        int ok = exact_ll(args[int_args[j]], &v);
        if (ok < 0) return NULL;
        if (ok == 0) return PyObject_Vectorcall(sr.pure, args, (size_t)nargs, NULL);
        num_len[j] = put_decimal(num[j], v) - num[j];
    }
    /* group, topic, properties, broker_name: JSON string literals */
    static const int text_args[4] = {1, 2, 7, 9};
    const char *tp[4];
    Py_ssize_t tn[4], tl[4];
    for (int j = 0; j < 4; j++) {
        tl[j] = jlit_len(args[text_args[j]], &tp[j], &tn[j]);
        if (tl[j] < 0) return PyObject_Vectorcall(sr.pure, args, (size_t)nargs, NULL);
    }
    PyObject *batch = args[8], *body = args[10];
    if ((batch != Py_True && batch != Py_False) || !PyBytes_CheckExact(body))
        return PyObject_Vectorcall(sr.pure, args, (size_t)nargs, NULL);
    int is_batch = batch == Py_True;
    char code[24], version[24];
    Py_ssize_t code_len = put_decimal(code, is_batch ? sr.code_batch : sr.code_single) - code;
    Py_ssize_t version_len = put_decimal(version, sr.version) - version;
#define T_(t) (sizeof(t) - 1)
    Py_ssize_t hlen = T_("{\"code\":") + code_len + T_(",\"extFields\":{\"a\":") + tl[0] + T_(",\"b\":") + tl[1] +
                      T_(",\"c\":") + sr.default_topic_len + T_(",\"d\":") + sr.queue_nums_len + T_(",\"e\":\"") +
                      num_len[1] + T_("\",\"f\":\"") + num_len[2] + T_("\",\"g\":\"") + num_len[3] +
                      T_("\",\"h\":\"") + num_len[4] + T_("\",\"i\":") + tl[2] +
                      T_(",\"j\":\"0\",\"k\":\"false\",\"m\":") + (is_batch ? T_("\"true\"") : T_("\"false\"")) +
                      T_(",\"n\":") + tl[3] + T_("},\"flag\":0,\"language\":") + sr.lang_len + T_(",\"opaque\":") +
                      num_len[0] + T_(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") + version_len + T_("}");
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    if (hlen > 0xFFFFFF || 4 + hlen + body_len > I32_MAX) return PyObject_Vectorcall(sr.pure, args, (size_t)nargs, NULL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, 8 + hlen + body_len);
    if (out == NULL) return NULL;
    char *w = PyBytes_AS_STRING(out);
    put_be32((unsigned char *)w, (int32_t)(4 + hlen + body_len));
    put_be32((unsigned char *)w + 4, (int32_t)hlen);
    w += 8;
#define PUT_T(t) (memcpy(w, (t), T_(t)), w += T_(t))
#define PUT_N(p, n) (memcpy(w, (p), (size_t)(n)), w += (n))
    PUT_T("{\"code\":");
    PUT_N(code, code_len);
    PUT_T(",\"extFields\":{\"a\":");
    w = put_jlit(w, tp[0], tn[0]);
    PUT_T(",\"b\":");
    w = put_jlit(w, tp[1], tn[1]);
    PUT_T(",\"c\":");
    PUT_N(sr.default_topic, sr.default_topic_len);
    PUT_T(",\"d\":");
    PUT_N(sr.queue_nums, sr.queue_nums_len);
    PUT_T(",\"e\":\"");
    PUT_N(num[1], num_len[1]);
    PUT_T("\",\"f\":\"");
    PUT_N(num[2], num_len[2]);
    PUT_T("\",\"g\":\"");
    PUT_N(num[3], num_len[3]);
    PUT_T("\",\"h\":\"");
    PUT_N(num[4], num_len[4]);
    PUT_T("\",\"i\":");
    w = put_jlit(w, tp[2], tn[2]);
    PUT_T(",\"j\":\"0\",\"k\":\"false\",\"m\":");
    if (is_batch) PUT_T("\"true\"");
    else PUT_T("\"false\"");
    PUT_T(",\"n\":");
    w = put_jlit(w, tp[3], tn[3]);
    PUT_T("},\"flag\":0,\"language\":");
    PUT_N(sr.lang, sr.lang_len);
    PUT_T(",\"opaque\":");
    PUT_N(num[0], num_len[0]);
    PUT_T(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    PUT_N(version, version_len);
    PUT_T("}");
    memcpy(w, PyBytes_AS_STRING(body), (size_t)body_len);
#undef PUT_N
#undef PUT_T
#undef T_
    return out;
}

/* -- the producer's send answer, read ------------------------------------------------------------
 *
 *   send_result(buf, n, opaque, msg_id, mq, max_frame_size) -> SendResult | None
 *                                        rocketq.client.send_answer.pure_send_result
 *
 * The SendResult the blocking producer makes of a read buf[:n] that is exactly one whole
 * response frame to request ``opaque`` with a status code (SUCCESS or a flush/slave timeout),
 * without the RemotingCommand and its extFields dict: the header is scanned as
 * decode_json_header scans it (the same JSON it takes; its keys each once) and only
 * extFields' msgId, queueId, queueOffset and transactionId are kept. None for anything else (a
 * frame cut short or followed by more bytes, another opaque, a request, an error code, a
 * header this scan does not take, a queueId or queueOffset other than a plain integer of up to
 * 18 digits, a queueId other than mq's, a key written with escapes): the caller then decodes
 * the read as it always did (FrameDecoder, RemotingCommand, _result), which is the reference. */

enum { SR_STATUS, SR_MSG_ID, SR_OFFSET_MSG_ID, SR_QUEUE, SR_QUEUE_OFFSET, SR_TRANSACTION_ID, SR_COUNT };
static const char *const sr_names[SR_COUNT] = {
    "status", "msg_id", "offset_msg_id", "message_queue", "queue_offset", "transaction_id",
};

static struct {
    PyTypeObject *result_type;      /* SendResult */
    Py_ssize_t off[SR_COUNT];
    PyObject *status_by_code;       /* int -> SendStatus */
    PyObject *str_queue_id;         /* "queue_id": MessageQueue's attribute */
} sres;

static PyObject *setup_send_result(PyObject *self, PyObject *args) {
    PyObject *cls, *by_code;
    if (!PyArg_ParseTuple(args, "OO!:setup_send_result", &cls, &PyDict_Type, &by_code)) return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_send_result: SendResult must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, sr_names, sres.off, SR_COUNT) < 0) return NULL;
    if (sres.str_queue_id == NULL && (sres.str_queue_id = PyUnicode_InternFromString("queue_id")) == NULL) return NULL;
    Py_INCREF(cls);
    Py_INCREF(by_code);
    Py_XSETREF(sres.result_type, (PyTypeObject *)cls);
    Py_XSETREF(sres.status_by_code, by_code);
    Py_RETURN_NONE;
}

/* The unescaped JSON string at s->at that is a plain integer of 1 to 18 digits (a '-' first
 * allowed; what int() reads the same), its value in *out; 0 when the string is anything else. */
static int jdigits(jscan *s, long long *out) {
    Py_ssize_t start, end, len;
    int esc;
    if (!jspan(s, &start, &end, &len, &esc) || esc) return 0;
    const unsigned char *p = s->p;
    int neg = start < end && p[start] == '-';
    Py_ssize_t i = start + neg;
    if (end - i < 1 || end - i > 18) return 0;
    long long v = 0;
    for (; i < end; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* The header keys this scan takes, as decode_json_header's fast path does. */
enum { SK_CODE, SK_LANGUAGE, SK_VERSION, SK_OPAQUE, SK_FLAG, SK_REMARK, SK_EXT, SK_SERIALIZE, SK_COUNT };
static const char *const sk_keys[SK_COUNT] = {
    "code", "language", "version", "opaque", "flag", "remark", "extFields", "serializeTypeCurrentRPC",
};
enum { SE_MSG_ID, SE_QUEUE_ID, SE_QUEUE_OFFSET, SE_TRANSACTION_ID, SE_COUNT };
static const char *const se_keys[SE_COUNT] = {"msgId", "queueId", "queueOffset", "transactionId"};

static int key_index(const unsigned char *p, Py_ssize_t ks, Py_ssize_t kl, const char *const *keys, int n) {
    for (int f = 0; f < n; f++)
        if ((Py_ssize_t)strlen(keys[f]) == kl && memcmp(p + ks, keys[f], (size_t)kl) == 0) return f;
    return -1;
}

static PyObject *send_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long n, opaque, max_frame;
    if (sres.result_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_send_result() was not called");
        return NULL;
    }
    if (nargs != 6 || long_in(args[1], 0, PY_SSIZE_T_MAX, &n) < 0 || long_in(args[5], 0, LLONG_MAX, &max_frame) < 0) {
        PyErr_SetString(PyExc_TypeError, "send_result(buf, n, opaque, msg_id, mq, max_frame_size)");
        return NULL;
    }
    if (!PyLong_CheckExact(args[2])) Py_RETURN_NONE;
    int overflow;
    opaque = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow || (opaque == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *ext_str[SE_COUNT] = {NULL};
    PyObject *result = NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    if (n > view.len || n < 8) goto none;
    long long length = be32(p);
    /* exactly one frame, within the decoder's limit, JSON, its header inside it */
    if (length != n - 4 || length < 4 || length > max_frame - 4) goto none;
    uint32_t type_hlen = (uint32_t)be32(p + 4);
    long long hlen = type_hlen & 0xFFFFFF;
    if ((type_hlen >> 24) != 0 || hlen > length - 4) goto none;
    jscan s = {p + 8, (Py_ssize_t)hlen, 0};
    const unsigned char *h = s.p;
    long long nums[SK_COUNT] = {0};
    long long ext_num[SE_COUNT] = {0};
    unsigned seen = 0, ext_seen = 0;
    if (s.n < 2 || h[0] != '{') goto none;
    s.at = 1;
    if (h[1] == '}') {
        s.at = 2;
    } else {
        for (;;) {
            Py_ssize_t ks, ke, kl, vs, ve, vl;
            int kesc, vesc, ok = 1;
            if (!jspan(&s, &ks, &ke, &kl, &kesc) || kesc || s.at >= s.n || h[s.at] != ':') goto none;
            s.at++;
            int field = key_index(h, ks, kl, sk_keys, SK_COUNT);
            if (field < 0 || (seen & (1u << field))) goto none;
            seen |= 1u << field;
            switch (field) {
            case SK_LANGUAGE: case SK_REMARK: case SK_SERIALIZE:
                ok = jspan(&s, &vs, &ve, &vl, &vesc);
                break;
            case SK_EXT:
                if (s.at >= s.n || h[s.at] != '{') goto none;
                s.at++;
                if (s.at < s.n && h[s.at] == '}') {
                    s.at++;
                    break;
                }
                for (;;) {
                    if (!jspan(&s, &ks, &ke, &kl, &kesc) || s.at >= s.n || h[s.at] != ':') goto none;
                    s.at++;
                    int e = kesc ? -2 : key_index(h, ks, kl, se_keys, SE_COUNT);
                    if (e == -2) goto none; /* a key with escapes may be one of these */
                    if (e == SE_QUEUE_ID || e == SE_QUEUE_OFFSET) {
                        if (!jdigits(&s, &ext_num[e])) goto none;
                    } else if (e >= 0) {
                        PyObject *v = jstring(&s);
                        if (v == NULL) goto none;
                        Py_XSETREF(ext_str[e], v); /* a key twice: the last value, as json */
                    } else if (!jspan(&s, &vs, &ve, &vl, &vesc)) {
                        goto none;
                    }
                    if (e >= 0) ext_seen |= 1u << e;
                    if (s.at >= s.n) goto none;
                    if (h[s.at] == '}') {
                        s.at++;
                        break;
                    }
                    if (h[s.at] != ',') goto none;
                    s.at++;
                }
                break;
            default:
                ok = jint(&s, &nums[field]);
                break;
            }
            if (!ok || s.at >= s.n) goto none;
            if (h[s.at] == '}') {
                s.at++;
                break;
            }
            if (h[s.at] != ',') goto none;
            s.at++;
        }
    }
    if (s.at != s.n || !(nums[SK_FLAG] & 1) || nums[SK_OPAQUE] != opaque) goto none;
    PyObject *code = PyLong_FromLongLong(nums[SK_CODE]);
    if (code == NULL) goto fail;
    PyObject *status = PyDict_GetItemWithError(sres.status_by_code, code);
    Py_DECREF(code);
    if (status == NULL) {
        if (PyErr_Occurred()) goto fail;
        goto none;
    }
    PyObject *mq = args[4];
    if (ext_seen & (1u << SE_QUEUE_ID)) {
        PyObject *qid = PyObject_GetAttr(mq, sres.str_queue_id);
        if (qid == NULL) goto fail;
        long long q = PyLong_AsLongLongAndOverflow(qid, &overflow);
        int exact = PyLong_CheckExact(qid);
        Py_DECREF(qid);
        if (q == -1 && PyErr_Occurred()) goto fail;
        if (!exact || overflow || q != ext_num[SE_QUEUE_ID]) goto none; /* another queue: the general path */
    }
    PyObject *qoff = PyLong_FromLongLong(ext_seen & (1u << SE_QUEUE_OFFSET) ? ext_num[SE_QUEUE_OFFSET] : -1);
    if (qoff == NULL) goto fail;
    result = blank_instance(sres.result_type);
    if (result == NULL) {
        Py_DECREF(qoff);
        goto fail;
    }
    const Py_ssize_t *off = sres.off;
    SLOT(result, off[SR_STATUS]) = Py_NewRef(status);
    SLOT(result, off[SR_MSG_ID]) = Py_NewRef(args[3]);
    SLOT(result, off[SR_OFFSET_MSG_ID]) = ext_str[SE_MSG_ID] != NULL ? ext_str[SE_MSG_ID] : PyUnicode_New(0, 0);
    ext_str[SE_MSG_ID] = NULL;
    SLOT(result, off[SR_QUEUE]) = Py_NewRef(mq);
    SLOT(result, off[SR_QUEUE_OFFSET]) = qoff;
    SLOT(result, off[SR_TRANSACTION_ID]) =
        ext_str[SE_TRANSACTION_ID] != NULL ? ext_str[SE_TRANSACTION_ID] : Py_NewRef(Py_None);
    ext_str[SE_TRANSACTION_ID] = NULL;
    if (SLOT(result, off[SR_OFFSET_MSG_ID]) == NULL) {
        Py_CLEAR(result);
        goto fail;
    }
    PyBuffer_Release(&view);
    return result;
none:
    if (PyErr_Occurred()) goto fail; /* memory */
    for (int e = 0; e < SE_COUNT; e++) Py_XDECREF(ext_str[e]);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    for (int e = 0; e < SE_COUNT; e++) Py_XDECREF(ext_str[e]);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- the single put, compiled: CommitLog.put_message and MessageStore.put_message in one call ----
 *
 *   setup_put_lane(MappedFile, PutMessageResult, PutMessageStatus.PUT_OK)
 *   setup_lane_stats(StoreStats)
 *   put_lane(lock, topic_cache, store_host, store_v6, file_size, units_per_cq_file, sync) -> PutLane
 *   lane.put(msg) -> PutMessageResult | None              CommitLog.put_message of a BrokerMessage
 *   lane.store_put(msg, queue_id) -> PutMessageResult | None       MessageStore.put_message
 *
 * A PutLane belongs to one plain CommitLog (rocketq/store/commitlog.py) and holds what the fast
 * path of its put_message reads, kept current by the CommitLog wherever Python changes it: the
 * current segment (cur, target, cur_from: CommitLog._roll), whether it takes writes (accepting:
 * _update_accepting) and what a put calls afterwards (after_put: _update_after_put). The topic
 * cache, its shape caches and its per-topic queue-offset dicts are the CommitLog's own objects,
 * read and updated in place. A MessageStore in front of the CommitLog sets its side (stats,
 * born_host, every, timed) and counts in since the bytes put since the dispatch lag was looked at.
 *
 * put does what CommitLog.put_message's fast path does, from the topic cache to the result: for
 * a BrokerMessage of a cached topic and (body, properties) shape without transaction bits, with
 * an IPv4 born host and every field an exact int or bytes in its range, under ASYNC_FLUSH, while
 * the CommitLog takes writes, when the current segment has room (no roll) and the queue offset
 * opens no ConsumeQueue file: the record (fill_v1_record, TOTALSIZE last), the queue offset, the
 * segment's wrote_position and store_timestamp, after_put() (not called while wake_event, the
 * dispatch service's, is set: its wakeup has nothing to do then) and the same PutMessageResult. None,
 * with nothing written or changed, for anything else: CommitLog.put_message's Python path then
 * runs, the reference, and writes, raises or rolls as it always did.
 *
 * The put lock: the lane never waits for it. While a thread holds it (a batch, a roll, shutdown,
 * set_writable, a queue-offset repair) the lane hands the put to the Python path, which waits.
 * When it is free, the lane makes its whole write holding the GIL and calls nothing that could
 * run Python code or let the GIL go between that test and the last update (the clock is read and
 * the message measured before; only ints, which never start a garbage collection, are allocated
 * in between), so no other thread can enter the critical section or see it half done: the
 * exclusion the lock gives, without its acquire and release.
 *
 * store_put is MessageStore.put_message's usual path in the same call: a Message nothing parks
 * (message_inner's conditions) written straight into its record, its properties text included,
 * or a BrokerMessage without a queue id whose properties name nothing that parks (no TIMER_,
 * __STARTDELIVERTIME or DELAY); then the façade's bookkeeping (since, stats.put_count and
 * put_bytes; put_failures when after_put raises). None as well when the lag is due for a look
 * (since >= every) and while put latency is sampled (timed). A Message's born timestamp is its
 * store timestamp: one clock read, time.time_ns()'s clock (or lane.clock(), when set, for tests). */

static PyTypeObject *lane_mapped_file, *lane_result, *lane_stats;
static PyObject *lane_put_ok, *lane_str_flag, *lane_zero;
enum { LMF_WROTE, LMF_STAMP, LMF_COUNT };
static const char *const lmf_names[LMF_COUNT] = {"wrote_position", "store_timestamp"};
static Py_ssize_t lmf_off[LMF_COUNT];
enum { LST_COUNT, LST_BYTES, LST_FAILURES, LST_N };
static const char *const lst_names[LST_N] = {"put_count", "put_bytes", "put_failures"};
static Py_ssize_t lst_off[LST_N];

static PyObject *setup_put_lane(PyObject *self, PyObject *args) {
    PyObject *mf, *result, *ok;
    if (!PyArg_ParseTuple(args, "O!O!O:setup_put_lane", &PyType_Type, &mf, &PyType_Type, &result, &ok)) return NULL;
    PyTypeObject *rt = (PyTypeObject *)result;
    if (!PyType_IsSubtype(rt, &PyTuple_Type) || rt->tp_basicsize != PyTuple_Type.tp_basicsize ||
        rt->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "setup_put_lane: the result class must be a tuple subclass without fields");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)mf, lmf_names, lmf_off, LMF_COUNT) < 0) return NULL;
    if (lane_str_flag == NULL && (lane_str_flag = PyUnicode_InternFromString("_flag")) == NULL) return NULL;
    if (lane_zero == NULL && (lane_zero = PyLong_FromLong(0)) == NULL) return NULL;
    Py_XSETREF(lane_mapped_file, (PyTypeObject *)Py_NewRef(mf));
    Py_XSETREF(lane_result, (PyTypeObject *)Py_NewRef(result));
    Py_XSETREF(lane_put_ok, Py_NewRef(ok));
    Py_RETURN_NONE;
}

static PyObject *setup_lane_stats(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "setup_lane_stats: StoreStats must be a class");
        return NULL;
    }
    if (read_offsets((PyTypeObject *)cls, lst_names, lst_off, LST_N) < 0) return NULL;
    Py_XSETREF(lane_stats, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    PyObject *locked;      /* the put lock's bound locked() */
    PyObject *topic_cache; /* CommitLog._topic_cache */
    PyObject *store_host;  /* bytes */
    PyObject *cur;         /* the current segment (MappedFile) or None */
    PyObject *target;      /* its write target */
    PyObject *after_put;   /* callable or None */
    PyObject *wake_event;  /* a threading.Event whose being set means after_put has nothing to do */
    PyObject *stats;       /* the store's StoreStats, or None */
    PyObject *born_host;   /* the store's born host of a Message, or None */
    PyObject *clock;       /* None: the system clock; else a callable giving time.time_ns() */
    long long store_v6, file_size, units, cur_from, every, since;
    char sync, accepting, timed;
} PutLane;

static int PutLane_traverse(PutLane *self, visitproc visit, void *arg) {
    Py_VISIT(self->locked);
    Py_VISIT(self->topic_cache);
    Py_VISIT(self->cur);
    Py_VISIT(self->target);
    Py_VISIT(self->after_put);
    Py_VISIT(self->wake_event);
    Py_VISIT(self->stats);
    Py_VISIT(self->clock);
    return 0;
}

static int PutLane_clear(PutLane *self) {
    Py_CLEAR(self->locked);
    Py_CLEAR(self->topic_cache);
    Py_CLEAR(self->store_host);
    Py_CLEAR(self->cur);
    Py_CLEAR(self->target);
    Py_CLEAR(self->after_put);
    Py_CLEAR(self->wake_event);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->born_host);
    Py_CLEAR(self->clock);
    return 0;
}

static void PutLane_dealloc(PutLane *self) {
    PyObject_GC_UnTrack(self);
    PutLane_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The put's store time, time.time_ns() // 1_000_000: 1, or 0 when lane.clock gives something
 * else than an int, -1 when it raised. */
static int lane_now(PutLane *self, long long *now) {
    if (self->clock == NULL || self->clock == Py_None) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        *now = (long long)ts.tv_sec * 1000 + (long long)ts.tv_nsec / 1000000;
        return 1;
    }
    PyObject *r = PyObject_CallNoArgs(self->clock);
    if (r == NULL) return -1;
    long long ns;
    int ok = long_in(r, LLONG_MIN, LLONG_MAX, &ns) == 0;
    Py_DECREF(r);
    if (!ok) return 0;
    *now = ns / 1000000 - (ns % 1000000 < 0); /* floor division, as // */
    return 1;
}

/* One put's values, checked. */
typedef struct {
    PyObject *topic; /* str */
    PyObject *qid;   /* exact int: the key of the queue-offset dict */
    PyObject *msg;   /* a Message whose properties text msg_text writes (props NULL), else NULL */
    const char *body, *props, *born_host;
    Py_ssize_t bl, pl;
    long long queue_id, flag, sys_flag, born_ts, reconsume, prepared;
} lane_msg;

/* a BrokerMessage's fields into m: 1, or 0 when it is not one the lane takes */
static int lane_broker_msg(PyObject *msg, lane_msg *m) {
    if (broker_message == NULL || Py_TYPE(msg) != broker_message) return 0;
    PyObject *v[BM_COUNT];
    for (int i = 0; i < BM_COUNT; i++)
        if ((v[i] = SLOT(msg, bm_off[i])) == NULL) return 0;
    if (!PyUnicode_CheckExact(v[BM_TOPIC]) || !PyBytes_CheckExact(v[BM_BODY]) || !PyBytes_CheckExact(v[BM_PROPERTIES]) ||
        !PyBytes_CheckExact(v[BM_BORN_HOST]) || PyBytes_GET_SIZE(v[BM_BORN_HOST]) != 8 ||
        long_in(v[BM_QUEUE_ID], I32_MIN, I32_MAX, &m->queue_id) < 0 || long_in(v[BM_FLAG], I32_MIN, I32_MAX, &m->flag) < 0 ||
        long_in(v[BM_SYS_FLAG], I32_MIN, I32_MAX, &m->sys_flag) < 0 ||
        long_in(v[BM_BORN_TIMESTAMP], LLONG_MIN, LLONG_MAX, &m->born_ts) < 0 ||
        long_in(v[BM_RECONSUME_TIMES], I32_MIN, I32_MAX, &m->reconsume) < 0 ||
        long_in(v[BM_PREPARED_OFFSET], LLONG_MIN, LLONG_MAX, &m->prepared) < 0)
        return 0;
    m->topic = v[BM_TOPIC];
    m->qid = v[BM_QUEUE_ID];
    m->msg = NULL;
    m->body = PyBytes_AS_STRING(v[BM_BODY]);
    m->bl = PyBytes_GET_SIZE(v[BM_BODY]);
    m->props = PyBytes_AS_STRING(v[BM_PROPERTIES]);
    m->pl = PyBytes_GET_SIZE(v[BM_PROPERTIES]);
    m->born_host = PyBytes_AS_STRING(v[BM_BORN_HOST]);
    return 1;
}

/* The put of m at store time now, as described above: 1 with the result in *out, 0 when the
 * Python path must take it (nothing done), -1 with an exception (*written: whether the record
 * and its state are in, i.e. after_put raised). */
static int lane_write(PutLane *self, const lane_msg *m, long long now, PyObject **out, int *written) {
    *written = 0;
    if (self->sync || lane_result == NULL || lane_mapped_file == NULL || lane_str_flag == NULL || self->topic_cache == NULL ||
        self->locked == NULL)
        return 0;
    PyObject *info = PyDict_GetItemWithError(self->topic_cache, m->topic);
    if (info == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4) return 0;
    PyObject *topic_b = PyTuple_GET_ITEM(info, 0), *shapes = PyTuple_GET_ITEM(info, 2);
    PyObject *qoffs = PyTuple_GET_ITEM(info, 3);
    if (!PyBytes_CheckExact(topic_b) || PyTuple_GET_ITEM(info, 1) != Py_False || !PyDict_CheckExact(shapes) ||
        !PyDict_CheckExact(qoffs))
        return 0;
    const Py_ssize_t tl = PyBytes_GET_SIZE(topic_b), sh = PyBytes_GET_SIZE(self->store_host);
    const long long flags = m->sys_flag | self->store_v6;
    if ((m->sys_flag & 0x3C) || tl > 127 || m->pl > 32767 || m->bl > I32_MAX || flags < I32_MIN || flags > I32_MAX)
        return 0;
    const long long length = 64 + sh + 16 + m->bl + 1 + tl + 2 + m->pl;
    /* the shape cache holds only shapes within every limit (RecordEncoder._encode) */
    PyObject *key = PyLong_FromLongLong((long long)m->bl << 16 | m->pl);
    if (key == NULL) return -1;
    PyObject *shape = PyDict_GetItemWithError(shapes, key);
    Py_DECREF(key);
    if (shape == NULL) return PyErr_Occurred() ? -1 : 0;
    long long shape_len;
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != 2 ||
        long_in(PyTuple_GET_ITEM(shape, 1), 0, I32_MAX, &shape_len) < 0 || shape_len != length)
        return 0;
    const uint32_t crc = crc32_of((const unsigned char *)m->body, m->bl) & 0x7FFFFFFFu;

    /* -- from here to the last update: nothing that may run Python code or let the GIL go -- */
    PyObject *held = PyObject_CallNoArgs(self->locked);
    if (held == NULL) return -1;
    Py_DECREF(held);
    if (held != Py_False || !self->accepting) return 0;
    PyObject *mf = self->cur;
    if (mf == NULL || Py_TYPE(mf) != lane_mapped_file || self->target == NULL) return 0;
    PyObject *wrote = SLOT(mf, lmf_off[LMF_WROTE]);
    long long wp;
    if (wrote == NULL || long_in(wrote, 0, LLONG_MAX, &wp) < 0) return 0;
    if (length + 8 > self->file_size - wp) return 0; /* a roll: the Python path's */
    PyObject *qv = PyDict_GetItemWithError(qoffs, m->qid);
    long long qoff = 0;
    if (qv == NULL) {
        if (PyErr_Occurred()) return -1;
    } else if (long_in(qv, LLONG_MIN, LLONG_MAX - 1, &qoff) < 0) {
        return 0;
    }
    if (qoff % self->units == 0) return 0; /* opens a ConsumeQueue file: reserved by the Python path */
    Py_buffer view;
    if (PyObject_GetBuffer(self->target, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (wp > view.len - length) {
        PyBuffer_Release(&view);
        return 0;
    }
    const long long physical = self->cur_from + wp;
    PyObject *o_phys = PyLong_FromLongLong(physical), *o_len = PyLong_FromLongLong(length);
    PyObject *o_qoff = PyLong_FromLongLong(qoff), *o_next = PyLong_FromLongLong(qoff + 1);
    PyObject *o_wp = PyLong_FromLongLong(wp + length), *o_now = PyLong_FromLongLong(now);
    if (o_phys == NULL || o_len == NULL || o_qoff == NULL || o_next == NULL || o_wp == NULL || o_now == NULL ||
        PyDict_SetItem(qoffs, m->qid, o_next) < 0) {
        PyBuffer_Release(&view);
        Py_XDECREF(o_phys);
        Py_XDECREF(o_len);
        Py_XDECREF(o_qoff);
        Py_XDECREF(o_next);
        Py_XDECREF(o_wp);
        Py_XDECREF(o_now);
        return -1;
    }
    Py_DECREF(o_next);
    unsigned char *w = (unsigned char *)view.buf + wp;
    fill_v1_record(w, (int32_t)crc, (int32_t)m->queue_id, (int32_t)m->flag, qoff, physical, (int32_t)flags,
                   m->born_ts, m->born_host, now, PyBytes_AS_STRING(self->store_host), sh, (int32_t)m->reconsume,
                   m->prepared, m->body, m->bl, PyBytes_AS_STRING(topic_b), tl, m->props, m->pl);
    if (m->props == NULL) msg_text(m->msg, (char *)w + length - m->pl);
    put_be32(w, (int32_t)length); /* commit point: TOTALSIZE last */
    PyBuffer_Release(&view);
    PyObject *old_wp = SLOT(mf, lmf_off[LMF_WROTE]), *old_ts = SLOT(mf, lmf_off[LMF_STAMP]);
    SLOT(mf, lmf_off[LMF_WROTE]) = o_wp;
    SLOT(mf, lmf_off[LMF_STAMP]) = Py_NewRef(o_now);
    Py_XDECREF(old_wp);
    Py_XDECREF(old_ts);
    /* -- the critical section ends: the Python path releases the put lock here -- */
    *written = 1;
    PyObject *res = NULL;
    if (self->after_put != NULL && self->after_put != Py_None) {
        /* ServiceThread.wakeup (the dispatch service's) does nothing while its event is set:
         * Event.is_set() is its _flag */
        PyObject *flag = NULL;
        if (self->wake_event != NULL && self->wake_event != Py_None &&
            (flag = PyObject_GetAttr(self->wake_event, lane_str_flag)) == NULL)
            goto fail;
        if (flag != Py_True) {
            PyObject *r = PyObject_CallNoArgs(self->after_put);
            if (r == NULL) {
                Py_XDECREF(flag);
                goto fail;
            }
            Py_DECREF(r);
        }
        Py_XDECREF(flag);
    }
    res = lane_result->tp_alloc(lane_result, 8);
    if (res == NULL) goto fail;
    PyObject *items[8] = {Py_NewRef(lane_put_ok), o_phys, o_len, o_qoff, o_now, Py_NewRef(self->store_host),
                          PyLong_FromLong(1), Py_NewRef(Py_None)};
    for (int i = 0; i < 8; i++) PyTuple_SET_ITEM(res, i, items[i]);
    *out = res;
    return 1;
fail:
    Py_DECREF(o_phys);
    Py_DECREF(o_len);
    Py_DECREF(o_qoff);
    Py_DECREF(o_now);
    return -1;
}

static PyObject *PutLane_put(PutLane *self, PyObject *msg) {
    long long now;
    int r = lane_now(self, &now);
    if (r <= 0) return r < 0 ? NULL : Py_NewRef(Py_None);
    lane_msg m;
    if (!lane_broker_msg(msg, &m)) Py_RETURN_NONE;
    PyObject *out = NULL;
    int written;
    r = lane_write(self, &m, now, &out, &written);
    if (r < 0) return NULL;
    return r == 0 ? Py_NewRef(Py_None) : out;
}

/* stats.<slot> += by; -1 with an exception */
static int lane_count(PyObject *stats, int slot, long long by) {
    PyObject *old = SLOT(stats, lst_off[slot]);
    if (old == NULL) {
        PyErr_SetString(PyExc_AttributeError, lst_names[slot]);
        return -1;
    }
    PyObject *add = PyLong_FromLongLong(by);
    if (add == NULL) return -1;
    PyObject *sum = PyNumber_Add(old, add);
    Py_DECREF(add);
    if (sum == NULL) return -1;
    old = SLOT(stats, lst_off[slot]);
    SLOT(stats, lst_off[slot]) = sum;
    Py_XDECREF(old);
    return 0;
}

static PyObject *PutLane_store_put(PutLane *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "store_put(msg, queue_id)");
        return NULL;
    }
    PyObject *msg = args[0], *queue_id = args[1], *stats = self->stats;
    if (self->timed || self->since >= self->every || lane_stats == NULL || stats == NULL ||
        Py_TYPE(stats) != lane_stats)
        Py_RETURN_NONE;
    long long now;
    int r = lane_now(self, &now);
    if (r <= 0) return r < 0 ? NULL : Py_NewRef(Py_None);
    lane_msg m;
    if (message_class != NULL && Py_TYPE(msg) == message_class) {
        /* message_inner's Message, written in place: queue id `queue_id or 0`, born now */
        PyObject *topic = SLOT(msg, ms_off[MS_TOPIC]), *body = SLOT(msg, ms_off[MS_BODY]);
        PyObject *flag = SLOT(msg, ms_off[MS_FLAG]), *born = self->born_host;
        if (queue_id == Py_None) {
            m.qid = lane_zero;
            m.queue_id = 0;
        } else if (long_in(queue_id, I32_MIN, I32_MAX, &m.queue_id) == 0) {
            m.qid = queue_id;
        } else {
            Py_RETURN_NONE;
        }
        if (topic == NULL || body == NULL || flag == NULL || born == NULL || !PyUnicode_CheckExact(topic) ||
            !PyBytes_CheckExact(body) || !PyBytes_CheckExact(born) || PyBytes_GET_SIZE(born) != 8 ||
            long_in(flag, I32_MIN, I32_MAX, &m.flag) < 0)
            Py_RETURN_NONE;
        Py_ssize_t pl = msg_text(msg, NULL);
        if (pl < 0) Py_RETURN_NONE;
        m.topic = topic;
        m.msg = msg;
        m.body = PyBytes_AS_STRING(body);
        m.bl = PyBytes_GET_SIZE(body);
        m.props = NULL;
        m.pl = pl;
        m.born_host = PyBytes_AS_STRING(born);
        m.sys_flag = m.reconsume = m.prepared = 0;
        m.born_ts = now;
    } else if (queue_id == Py_None && lane_broker_msg(msg, &m)) {
        /* StorePuts._inner's BrokerMessage that nothing parks: taken as it is */
        const unsigned char *p = (const unsigned char *)m.props;
        if (has_sub(p, m.pl, "TIMER_", 6) || has_sub(p, m.pl, "__STARTDELIVERTIME\x01", 19) ||
            has_sub(p, m.pl, "DELAY\x01", 6))
            Py_RETURN_NONE;
    } else {
        Py_RETURN_NONE;
    }
    PyObject *out = NULL;
    int written;
    r = lane_write(self, &m, now, &out, &written);
    if (r == 0) Py_RETURN_NONE;
    if (r < 0) {
        if (written) { /* after_put raised: the façade counts a failure, as around the Python put */
            PyObject *exc_type, *exc, *tb;
            PyErr_Fetch(&exc_type, &exc, &tb);
            int bad = lane_count(stats, LST_FAILURES, 1);
            PyErr_Restore(exc_type, exc, tb);
            if (bad < 0) return NULL;
        }
        return NULL;
    }
    const long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(out, 2));
    self->since += size;
    if (lane_count(stats, LST_COUNT, 1) < 0 || lane_count(stats, LST_BYTES, size) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyMethodDef PutLane_methods[] = {
    {"put", (PyCFunction)PutLane_put, METH_O,
     "put(msg): CommitLog.put_message of a BrokerMessage on its fast path, or None (nothing done)"},
    {"store_put", (PyCFunction)(void (*)(void))PutLane_store_put, METH_FASTCALL,
     "store_put(msg, queue_id): MessageStore.put_message's usual path, or None (nothing done)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef PutLane_members[] = {
    {"cur", T_OBJECT, offsetof(PutLane, cur), 0, "the current segment (CommitLog._cur)"},
    {"target", T_OBJECT, offsetof(PutLane, target), 0, "its write target (CommitLog._cur_target)"},
    {"cur_from", T_LONGLONG, offsetof(PutLane, cur_from), 0, "its first offset (CommitLog._cur_from)"},
    {"accepting", T_BOOL, offsetof(PutLane, accepting), 0, "CommitLog._accepting"},
    {"after_put", T_OBJECT, offsetof(PutLane, after_put), 0, "CommitLog._after_put"},
    {"wake_event", T_OBJECT, offsetof(PutLane, wake_event), 0,
     "None, or the threading.Event of the ServiceThread whose wakeup after_put is: set, no call"},
    {"stats", T_OBJECT, offsetof(PutLane, stats), 0, "the store's StoreStats"},
    {"born_host", T_OBJECT, offsetof(PutLane, born_host), 0, "the store's born host of a Message"},
    {"every", T_LONGLONG, offsetof(PutLane, every), 0, "bytes between two looks at the dispatch lag"},
    {"since", T_LONGLONG, offsetof(PutLane, since), 0, "bytes put since the last look"},
    {"timed", T_BOOL, offsetof(PutLane, timed), 0, "put latency is sampled: store_put takes nothing"},
    {"clock", T_OBJECT, offsetof(PutLane, clock), 0, "None (the system clock) or a time.time_ns twin"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject PutLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rocketq._speedups.PutLane",
    .tp_basicsize = sizeof(PutLane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled single put of one CommitLog (see rocketq.store.commitlog)",
    .tp_dealloc = (destructor)PutLane_dealloc,
    .tp_traverse = (traverseproc)PutLane_traverse,
    .tp_clear = (inquiry)PutLane_clear,
    .tp_methods = PutLane_methods,
    .tp_members = PutLane_members,
};

static PyObject *put_lane(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long store_v6, file_size, units;
    if (nargs != 7 || !PyDict_CheckExact(args[1]) || !PyBytes_CheckExact(args[2]) ||
        long_in(args[3], 0, I32_MAX, &store_v6) < 0 || long_in(args[4], 1, LLONG_MAX / 2, &file_size) < 0 ||
        long_in(args[5], 1, LLONG_MAX, &units) < 0) {
        PyErr_SetString(PyExc_TypeError, "put_lane(lock, topic_cache: dict, store_host: bytes, store_v6: int, "
                                         "file_size: int > 0, units_per_cq_file: int > 0, sync)");
        return NULL;
    }
    int sync = PyObject_IsTrue(args[6]);
    if (sync < 0) return NULL;
    if (!(PutLaneType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&PutLaneType) < 0) return NULL;
    PyObject *locked = PyObject_GetAttrString(args[0], "locked");
    if (locked == NULL) return NULL;
    PutLane *lane = PyObject_GC_New(PutLane, &PutLaneType);
    if (lane == NULL) {
        Py_DECREF(locked);
        return NULL;
    }
    lane->locked = locked;
    lane->topic_cache = Py_NewRef(args[1]);
    lane->store_host = Py_NewRef(args[2]);
    lane->cur = lane->target = lane->after_put = lane->wake_event = lane->stats = lane->born_host = lane->clock = NULL;
    lane->store_v6 = store_v6;
    lane->file_size = file_size;
    lane->units = units;
    lane->cur_from = lane->since = 0;
    lane->every = LLONG_MAX;
    lane->sync = (char)sync;
    lane->accepting = lane->timed = 0;
    PyObject_GC_Track(lane);
    return (PyObject *)lane;
}

/* -- the blocking producer's plain send, prepared and framed ------------------------------------
 *
 *   seq_take(seq, n) -> int               rocketq.message.pure_seq_take
 *   plain_send_frame(msg, group, queue_id, broker_name, max_body, threshold, prefix, offset_ms,
 *                    seq, born_ms) -> (frame, opaque, msg_id) | None
 *                                         rocketq.client.send_plain.pure_plain_send_frame
 *
 * seq is a UniqueIdGenerator's sequence: a list holding one int in 0..0xFFFF. seq_take returns it
 * and stores it plus n (masked to 16 bits) in one step with the GIL held, nothing in between that
 * could run Python code, so threads taking ids (one at a time or a batch's n) never share one.
 *
 * plain_send_frame is what the producer's _prepare and _request_frame make of a plain message
 * (exactly a Message, no properties, tags, keys or delay level, an exact bytes body of 1 byte up
 * to max_body and not over the compress threshold, an exact int flag): its UNIQ_KEY (prefix,
 * offset_ms as 8 hex digits, the next sequence number as 4: UniqueIdGenerator.next_id's layout),
 * the next opaque of rocketq.remoting.command's counter (next_opaque's rule), and the
 * SEND_MESSAGE_V2 frame send_request_frame writes with the two properties every send has. For
 * anything else it returns None before taking an id or an opaque; the caller then goes the
 * general way. */

static struct {
    PyTypeObject *message_type;
    PyObject *opaque_counter; /* itertools.count of next_opaque */
    PyObject *props_head;     /* "UNIQ_KEY\x01" */
    PyObject *props_tail;     /* "\x02WAIT\x01true\x02" */
    PyObject *names[7];       /* topic, body, tags, keys, properties, delay_level, flag */
} ps;

static PyObject *setup_plain_send(PyObject *self, PyObject *args) {
    PyObject *cls, *counter, *head, *tail;
    if (!PyArg_ParseTuple(args, "OOUU:setup_plain_send", &cls, &counter, &head, &tail)) return NULL;
    if (!PyType_Check(cls) || !PyUnicode_IS_COMPACT_ASCII(head) || !PyUnicode_IS_COMPACT_ASCII(tail)) {
        PyErr_SetString(PyExc_TypeError, "setup_plain_send(Message, opaque counter, ASCII head, ASCII tail)");
        return NULL;
    }
    static const char *const names[7] = {"topic", "body", "tags", "keys", "properties", "delay_level", "flag"};
    for (int j = 0; j < 7; j++) {
        if (ps.names[j] == NULL && (ps.names[j] = PyUnicode_InternFromString(names[j])) == NULL) return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(ps.message_type, (PyTypeObject *)cls);
    Py_INCREF(counter);
    Py_XSETREF(ps.opaque_counter, counter);
    Py_INCREF(head);
    Py_XSETREF(ps.props_head, head);
    Py_INCREF(tail);
    Py_XSETREF(ps.props_tail, tail);
    Py_RETURN_NONE;
}

/* seq's value (0..0xFFFF) into *v: 1, or 0 when seq is not a list of one such exact int. */
static int seq_value(PyObject *seq, long long *v) {
    if (!PyList_CheckExact(seq) || PyList_GET_SIZE(seq) != 1) return 0;
    int ok = exact_ll(PyList_GET_ITEM(seq, 0), v);
    if (ok <= 0) {
        PyErr_Clear();
        return 0;
    }
    return *v >= 0 && *v <= 0xFFFF;
}

/* Store v + n (16 bits) in seq, already checked by seq_value: no Python code runs. */
static int seq_store(PyObject *seq, long long v, long long n) {
    PyObject *next = PyLong_FromLongLong((v + n) & 0xFFFF);
    if (next == NULL) return -1;
    return PyList_SetItem(seq, 0, next); /* steals next; the old int has no finalizer */
}

static PyObject *seq_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long v, n;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "seq_take(seq, n) takes 2 arguments");
        return NULL;
    }
    int ok = exact_ll(args[1], &n);
    if (ok < 0) return NULL;
    if (ok == 0 || n < 0 || n > (1LL << 62) || !seq_value(args[0], &v)) {
        PyErr_SetString(PyExc_ValueError, "seq_take: seq must be a list of one int in 0..0xFFFF, n an int in 0..2**62");
        return NULL;
    }
    if (seq_store(args[0], v, n) < 0) return NULL;
    return PyLong_FromLongLong(v);
}

static PyObject *plain_send_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ps.message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketq._speedups.setup_plain_send() was not called");
        return NULL;
    }
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "plain_send_frame takes 10 arguments");
        return NULL;
    }
    PyObject *msg = args[0], *prefix = args[6], *seq = args[8];
    if (Py_TYPE(msg) != ps.message_type) Py_RETURN_NONE;
    PyObject *a[7] = {NULL};
    PyObject *result = NULL, *msg_id = NULL, *props = NULL, *opaque = NULL, *frame = NULL;
    for (int j = 0; j < 7; j++) {
        if ((a[j] = PyObject_GetAttr(msg, ps.names[j])) == NULL) goto out;
    }
    PyObject *topic = a[0], *body = a[1], *tags = a[2], *keys = a[3], *properties = a[4];
    long long max_body, threshold, offset, delay, flag, s;
    int ok;
    if ((ok = exact_ll(args[4], &max_body)) <= 0 || (ok = exact_ll(args[5], &threshold)) <= 0 ||
        (ok = exact_ll(args[7], &offset)) <= 0 || (ok = exact_ll(a[5], &delay)) <= 0 ||
        (ok = exact_ll(a[6], &flag)) <= 0) {
        if (ok < 0) PyErr_Clear();
        goto plain_not;
    }
    if (!PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) == 0 ||
        PyBytes_GET_SIZE(body) > max_body || PyBytes_GET_SIZE(body) > threshold ||
        !(tags == Py_None || (PyUnicode_CheckExact(tags) && PyUnicode_GET_LENGTH(tags) == 0)) ||
        !((PyTuple_CheckExact(keys) && PyTuple_GET_SIZE(keys) == 0) ||
          (PyList_CheckExact(keys) && PyList_GET_SIZE(keys) == 0)) ||
        !PyDict_CheckExact(properties) || PyDict_GET_SIZE(properties) != 0 || delay > 0 ||
        !PyUnicode_CheckExact(prefix) || !PyUnicode_IS_COMPACT_ASCII(prefix) || offset < 0 ||
        offset > 0xFFFFFFFFLL || !PyLong_CheckExact(args[9]) || !seq_value(seq, &s))
        goto plain_not;
    /* the id: prefix, then the month offset and the sequence number in uppercase hex */
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    if ((msg_id = PyUnicode_New(plen + 12, 127)) == NULL) goto out;
    if (seq_store(seq, s, 1) < 0) goto out;
    static const char hex[] = "0123456789ABCDEF";
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(msg_id);
    memcpy(w, PyUnicode_1BYTE_DATA(prefix), (size_t)plen);
    w += plen;
    for (int k = 7; k >= 0; k--) *w++ = (Py_UCS1)hex[(offset >> (4 * k)) & 0xF];
    for (int k = 3; k >= 0; k--) *w++ = (Py_UCS1)hex[(s >> (4 * k)) & 0xF];
    /* the opaque: next_opaque's (n - 1) % 0x7FFFFFFF + 1 of the counter's next n */
    PyObject *n = PyIter_Next(ps.opaque_counter);
    if (n == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the opaque counter ended");
        goto out;
    }
    long long nv;
    ok = exact_ll(n, &nv);
    if (ok > 0 && nv >= 1) {
        Py_DECREF(n);
        opaque = PyLong_FromLongLong((nv - 1) % 0x7FFFFFFFLL + 1);
    } else { /* past 64 bits: Python's arithmetic */
        PyErr_Clear();
        PyObject *one = PyLong_FromLong(1), *mod = PyLong_FromLong(0x7FFFFFFFL);
        PyObject *less = one && mod ? PyNumber_Subtract(n, one) : NULL;
        PyObject *rem = less ? PyNumber_Remainder(less, mod) : NULL;
        opaque = rem ? PyNumber_Add(rem, one) : NULL;
        Py_XDECREF(rem);
        Py_XDECREF(less);
        Py_XDECREF(mod);
        Py_XDECREF(one);
        Py_DECREF(n);
    }
    if (opaque == NULL) goto out;
    /* the properties every send adds: UNIQ_KEY and WAIT, as encode_properties writes them */
    Py_ssize_t hl = PyUnicode_GET_LENGTH(ps.props_head), tl = PyUnicode_GET_LENGTH(ps.props_tail);
    if ((props = PyUnicode_New(hl + plen + 12 + tl, 127)) == NULL) goto out;
    w = PyUnicode_1BYTE_DATA(props);
    memcpy(w, PyUnicode_1BYTE_DATA(ps.props_head), (size_t)hl);
    memcpy(w + hl, PyUnicode_1BYTE_DATA(msg_id), (size_t)(plen + 12));
    memcpy(w + hl + plen + 12, PyUnicode_1BYTE_DATA(ps.props_tail), (size_t)tl);
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) goto out;
    PyObject *fargs[11] = {opaque, args[1], topic, args[2], zero, args[9], a[6], props, Py_False, args[3], body};
    frame = send_request_frame(NULL, fargs, 11);
    Py_DECREF(zero);
    if (frame == NULL) goto out;
    result = PyTuple_Pack(3, frame, opaque, msg_id);
    goto out;
plain_not:
    result = Py_None;
    Py_INCREF(result);
out:
    Py_XDECREF(frame);
    Py_XDECREF(props);
    Py_XDECREF(opaque);
    Py_XDECREF(msg_id);
    for (int j = 0; j < 7; j++) Py_XDECREF(a[j]);
    return result;
}

/* -- a DLedger leader's record of one message ---------------------------------------------------
 *
 *   dledger_record(length, msg, crc, sys_flag, queue_offset, physical, now, store_host, topic, magic)
 *
 * The bytes of one V1 record with an IPv4 born host for a DLedger entry
 * (rocketq.store.dledger_commitlog._OneAppend._pack's struct pack, the layout
 * rocketq.protocol.record.record_layout gives it): every field from the BrokerMessage's slots
 * and the put's values, sys_flag as given (the store's flags already in it). None, with nothing
 * made, when any value is not one this takes (the V2 magic, not an exact int in its field's
 * range, not bytes, a born host other than 8 bytes, a record of another length): the caller then
 * packs it with the struct layout, whose bytes or errors are the reference
 * (rocketq.store.dledger_commitlog.pure_dledger_record). */

static PyObject *dledger_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "dledger_record(length, msg, crc, sys_flag, queue_offset, physical, now, "
                                         "store_host, topic, magic)");
        return NULL;
    }
    PyObject *m = args[1], *store_host = args[7], *topic = args[8];
    if (broker_message == NULL || Py_TYPE(m) != broker_message || !PyBytes_CheckExact(store_host) ||
        !PyBytes_CheckExact(topic))
        Py_RETURN_NONE;
    PyObject *body = SLOT(m, bm_off[BM_BODY]), *props = SLOT(m, bm_off[BM_PROPERTIES]);
    PyObject *born_host = SLOT(m, bm_off[BM_BORN_HOST]);
    if (body == NULL || props == NULL || born_host == NULL || !PyBytes_CheckExact(body) ||
        !PyBytes_CheckExact(props) || !PyBytes_CheckExact(born_host) || PyBytes_GET_SIZE(born_host) != 8)
        Py_RETURN_NONE;
    long long length, crc, flags, qoff, physical, now, magic, queue_id, flag, born_ts, reconsume, prepared;
    PyObject *qid_o = SLOT(m, bm_off[BM_QUEUE_ID]), *flag_o = SLOT(m, bm_off[BM_FLAG]);
    PyObject *born_o = SLOT(m, bm_off[BM_BORN_TIMESTAMP]);
    PyObject *rec_o = SLOT(m, bm_off[BM_RECONSUME_TIMES]), *prep_o = SLOT(m, bm_off[BM_PREPARED_OFFSET]);
    if (qid_o == NULL || flag_o == NULL || born_o == NULL || rec_o == NULL || prep_o == NULL) Py_RETURN_NONE;
    if (long_in(args[0], 0, I32_MAX, &length) < 0 || long_in(args[2], I32_MIN, I32_MAX, &crc) < 0 ||
        long_in(args[3], I32_MIN, I32_MAX, &flags) < 0 || long_in(args[4], LLONG_MIN, LLONG_MAX, &qoff) < 0 ||
        long_in(args[5], LLONG_MIN, LLONG_MAX, &physical) < 0 || long_in(args[6], LLONG_MIN, LLONG_MAX, &now) < 0 ||
        long_in(args[9], I32_MIN, I32_MAX, &magic) < 0 || long_in(qid_o, I32_MIN, I32_MAX, &queue_id) < 0 ||
        long_in(flag_o, I32_MIN, I32_MAX, &flag) < 0 || long_in(born_o, LLONG_MIN, LLONG_MAX, &born_ts) < 0 ||
        long_in(rec_o, I32_MIN, I32_MAX, &reconsume) < 0 || long_in(prep_o, LLONG_MIN, LLONG_MAX, &prepared) < 0)
        Py_RETURN_NONE;
    Py_ssize_t sh = PyBytes_GET_SIZE(store_host), bl = PyBytes_GET_SIZE(body), tl = PyBytes_GET_SIZE(topic);
    Py_ssize_t pl = PyBytes_GET_SIZE(props);
    if (magic != MESSAGE_MAGIC_CODE || tl > 127 || pl > 32767 || bl > I32_MAX ||
        (Py_ssize_t)length != 64 + sh + 16 + bl + 1 + tl + 2 + pl)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
    if (out == NULL) return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    fill_v1_record(w, (int32_t)crc, (int32_t)queue_id, (int32_t)flag, qoff, physical, (int32_t)flags, born_ts,
                   PyBytes_AS_STRING(born_host), now, PyBytes_AS_STRING(store_host), sh, (int32_t)reconsume, prepared,
                   PyBytes_AS_STRING(body), bl, PyBytes_AS_STRING(topic), tl, PyBytes_AS_STRING(props), pl);
    put_be32(w, (int32_t)length);
    return out;
}

/* -- the store's pre-check of a put for a timer or a delay level ---------------------------------
 *
 *   may_be_timed(properties) -> bool
 *
 * True when the encoded properties hold "TIMER_", "__STARTDELIVERTIME\x01" or "DELAY\x01"
 * anywhere (rocketq.store.timer.pure_may_be_timed, the reference): one pass over the bytes where
 * the three substring tests of the pure one walk them three times. Any object with a buffer. */

static PyObject *may_be_timed(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    int found = 0;
    for (Py_ssize_t i = 0; i < n && !found; i++) {
        switch (p[i]) {
        case 'T':
            found = i + 6 <= n && memcmp(p + i, "TIMER_", 6) == 0;
            break;
        case '_':
            found = i + 19 <= n && memcmp(p + i, "__STARTDELIVERTIME\x01", 19) == 0;
            break;
        case 'D':
            found = i + 6 <= n && memcmp(p + i, "DELAY\x01", 6) == 0;
            break;
        default:
            break;
        }
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"setup_record", (PyCFunction)setup_record, METH_VARARGS,
     "setup_record(RecordView, RecordKind.MESSAGE, MessageExt, pure decode_record, pure view_to_message, "
     "unpack_socket_addr, crc32): bind the record codec to its classes and pure fallbacks"},
    {"decode_record", (PyCFunction)(void (*)(void))decode_record, METH_FASTCALL | METH_KEYWORDS,
     "rocketq.protocol.record.decode_record, compiled"},
    {"view_to_message", (PyCFunction)view_to_message, METH_O,
     "rocketq.protocol.record.view_to_message, compiled"},
    {"setup_send_header", (PyCFunction)setup_send_header, METH_VARARGS,
     "setup_send_header(SendMessageRequestHeader, pure decode_send_header, V1 keys, V2 keys)"},
    {"decode_send_header", (PyCFunction)(void (*)(void))decode_send_header, METH_FASTCALL | METH_KEYWORDS,
     "rocketq.protocol.headers.decode_send_header, compiled"},
    {"setup_sent_properties", (PyCFunction)setup_sent_properties, METH_VARARGS,
     "setup_sent_properties(pure sent_properties, encoded_or_none)"},
    {"sent_properties", (PyCFunction)(void (*)(void))sent_properties, METH_FASTCALL,
     "rocketq.broker.send_properties.sent_properties, compiled"},
    {"setup_send_ok_frame", (PyCFunction)setup_send_ok_frame, METH_VARARGS,
     "setup_send_ok_frame(pure send_ok_frame, PutMessageResult, FLAG_RESPONSE, language name, CURRENT_VERSION)"},
    {"send_ok_frame", (PyCFunction)(void (*)(void))send_ok_frame, METH_FASTCALL,
     "rocketq.broker.send.send_ok_frame, compiled"},
    {"setup_json_header", (PyCFunction)setup_json_header, METH_VARARGS,
     "setup_json_header(RemotingCommand, pure decode_json_header, language by name, JAVA, OTHER, SerializeType.JSON)"},
    {"decode_json_header", (PyCFunction)(void (*)(void))decode_json_header, METH_FASTCALL,
     "rocketq.remoting.command.decode_json_header, compiled"},
    {"parse_frames", (PyCFunction)(void (*)(void))parse_frames, METH_FASTCALL,
     "parse_frames(src, pos, end, max_body, header_mask, out) -> (pos, need): the loop of "
     "rocketq.remoting.codec.FrameDecoder._parse over JSON frames, compiled"},
    {"setup_json_encode", (PyCFunction)setup_json_encode, METH_VARARGS,
     "setup_json_encode(RemotingCommand, pure encode_json_header, language names, SerializeType.JSON)"},
    {"encode_json_header", (PyCFunction)(void (*)(void))encode_json_header, METH_FASTCALL,
     "rocketq.remoting.command.encode_json_header, compiled"},
    {"setup_encode_frame", (PyCFunction)setup_encode_frame, METH_O,
     "setup_encode_frame(pure encode): bind encode_frame to the pure frame encoder"},
    {"encode_frame", (PyCFunction)(void (*)(void))encode_frame, METH_FASTCALL,
     "rocketq.remoting.codec.encode, compiled"},
    {"setup_put_record", (PyCFunction)setup_put_record, METH_O,
     "setup_put_record(BrokerMessage): bind put_record to the message class"},
    {"put_record", (PyCFunction)(void (*)(void))put_record, METH_FASTCALL,
     "put_record(target, pos, length, msg, crc, queue_offset, physical, store_v6, now, store_host, topic): "
     "CommitLog.put_message's write of one V1/IPv4 record, compiled"},
    {"scan_window", (PyCFunction)(void (*)(void))scan_window, METH_FASTCALL,
     "scan_window(data, base=None, objects_below=0, entry_index=None, checked_from=None): "
     "rocketq.store.record_scan's walk, "
     "V1/IPv4 check, columns, tags codes and index key hashes of a window of CommitLog records (or of "
     "DLedger entries' records), in one pass"},
    {"index_put_keys", (PyCFunction)(void (*)(void))index_put_keys, METH_FASTCALL,
     "index_put_keys(mm, slots, entries_pos, count, n, begin_ts, slot_count, hashes, phys, stamps): "
     "rocketq.store.index_file.IndexFile.put_keys' entry loop, compiled"},
    {"cq_pack_run", (PyCFunction)(void (*)(void))cq_pack_run, METH_FASTCALL,
     "cq_pack_run(units, start, room, current, max_physic): the run loop of "
     "rocketq.store.consume_queue.ConsumeQueue.put_units, compiled"},
    {"setup_dispatch", (PyCFunction)setup_dispatch, METH_O,
     "setup_dispatch(DispatchRequest): bind scan_window's request objects to their class"},
    {"batch_plan", (PyCFunction)(void (*)(void))batch_plan, METH_FASTCALL,
     "batch_plan(data, suffix, shared): the messages of a batch send a RocketMQ client sends, planned "
     "as records, or None"},
    {"batch_write", (PyCFunction)(void (*)(void))batch_write, METH_FASTCALL,
     "batch_write(target, pos, base, now, store_host, sys_flag, born_ts, born_host, topic, queue_id, "
     "queue_offset, data, plan, suffix): a planned batch packed as CommitLog records"},
    {"crc32", (PyCFunction)crc32_py, METH_O, "zlib.crc32(data), the table-driven CRC of batch_write"},
    {"encode_entries", (PyCFunction)(void (*)(void))dledger_encode_entries, METH_FASTCALL,
     "encode_entries(magic, first_index, term, positions, bodies, prev_chain): "
     "rocketq.ha.entry_format.encode_entries, compiled"},
    {"setup_message_put", (PyCFunction)setup_message_put, METH_VARARGS,
     "setup_message_put(Message, parking names): bind message_inner and plan_messages to the message class"},
    {"message_inner", (PyCFunction)(void (*)(void))message_inner, METH_FASTCALL,
     "message_inner(msg, queue_id, born_ts, born_host): the BrokerMessage MessageStore.put_message makes of "
     "a Message nothing parks, or None"},
    {"plan_messages", (PyCFunction)plan_messages, METH_O,
     "plan_messages(msgs): a list of plain Messages of one topic as (data, plan) for batch_write, or None"},
    {"check_entries", (PyCFunction)(void (*)(void))dledger_check_entries, METH_FASTCALL,
     "check_entries(buf, pos, index, prev_chain, min_term): rocketq.ha.entry_format.check_entries, compiled"},
    {"setup_raft_entry", (PyCFunction)setup_raft_entry, METH_VARARGS,
     "setup_raft_entry(Entry, EntryKind.NORMAL, EntryKind.NOOP): bind split_raw_entries to the entry class"},
    {"split_raw_entries", (PyCFunction)(void (*)(void))split_raw_entries, METH_FASTCALL,
     "split_raw_entries(body, off, count): rocketq.ha.peer_codec.split_raw_pure, compiled, or None"},
    {"setup_send_request", (PyCFunction)setup_send_request, METH_VARARGS,
     "setup_send_request(pure, default_topic, queue_nums, language, version, code, batch_code)"},
    {"setup_send_result", (PyCFunction)setup_send_result, METH_VARARGS,
     "setup_send_result(SendResult, status by code)"},
    {"send_result", (PyCFunction)(void (*)(void))send_result, METH_FASTCALL,
     "send_result(buf, n, opaque, msg_id, mq, max_frame_size): "
     "rocketq.client.send_answer.pure_send_result, compiled"},
    {"send_request_frame", (PyCFunction)(void (*)(void))send_request_frame, METH_FASTCALL,
     "send_request_frame(opaque, group, topic, queue_id, sys_flag, born_ms, flag, properties, batch, "
     "broker_name, body): rocketq.client.send_request.pure_send_request_frame, compiled"},
    {"setup_lone_send", (PyCFunction)setup_lone_send, METH_O,
     "setup_lone_send(pure lone_send): bind lone_send to its pure twin"},
    {"lone_send", (PyCFunction)(void (*)(void))lone_send, METH_FASTCALL,
     "lone_send(data, max_body) -> (command, header) or None: rocketq.broker.send_frame.pure_lone_send, "
     "compiled"},
    {"broker_message", (PyCFunction)(void (*)(void))new_broker_message, METH_FASTCALL,
     "broker_message(topic, body, properties, queue_id, flag, sys_flag, born_timestamp, born_host, "
     "reconsume_times): BrokerMessage(...) with those positional arguments, built in C"},
    {"cq_group_requests", (PyCFunction)cq_group_requests, METH_O,
     "cq_group_requests(reqs): ConsumeQueueStore._put_batch's grouping of a window's requests, or None"},
    {"index_entries_of", (PyCFunction)(void (*)(void))index_entries_of, METH_FASTCALL,
     "index_entries_of(reqs, rows, hashes, floor): build_index_batch's entries of a RequestList, or None"},
    {"cq_put_run", (PyCFunction)(void (*)(void))cq_put_run, METH_FASTCALL,
     "cq_put_run(cq, units): ConsumeQueue.put_units' first run written into the queue's last file, or None"},
    {"index_put_file", (PyCFunction)(void (*)(void))index_put_file, METH_FASTCALL,
     "index_put_file(f, hashes, phys, stamps): IndexFile.put_keys with its blocks reserved, compiled, or None"},
    {"setup_put_lane", (PyCFunction)setup_put_lane, METH_VARARGS,
     "setup_put_lane(MappedFile, PutMessageResult, PutMessageStatus.PUT_OK): bind put_lane to its classes"},
    {"setup_lane_stats", (PyCFunction)setup_lane_stats, METH_O,
     "setup_lane_stats(StoreStats): bind PutLane.store_put to the store's counters"},
    {"put_lane", (PyCFunction)(void (*)(void))put_lane, METH_FASTCALL,
     "put_lane(lock, topic_cache, store_host, store_v6, file_size, units_per_cq_file, sync): the compiled "
     "single put of one CommitLog (PutLane)"},
    {"setup_plain_send", (PyCFunction)setup_plain_send, METH_VARARGS,
     "setup_plain_send(Message, opaque counter, properties head, properties tail): bind plain_send_frame"},
    {"seq_take", (PyCFunction)(void (*)(void))seq_take, METH_FASTCALL,
     "seq_take(seq, n): rocketq.message.pure_seq_take, compiled (atomic with the GIL held)"},
    {"plain_send_frame", (PyCFunction)(void (*)(void))plain_send_frame, METH_FASTCALL,
     "plain_send_frame(msg, group, queue_id, broker_name, max_body, threshold, prefix, offset_ms, seq, born_ms): "
     "rocketq.client.send_plain.pure_plain_send_frame, compiled"},
    {"dledger_record", (PyCFunction)(void (*)(void))dledger_record, METH_FASTCALL,
     "dledger_record(length, msg, crc, sys_flag, queue_offset, physical, now, store_host, topic, magic): "
     "rocketq.store.dledger_commitlog.pure_dledger_record, compiled (None: not taken)"},
    {"may_be_timed", (PyCFunction)may_be_timed, METH_O,
     "may_be_timed(properties): rocketq.store.timer.pure_may_be_timed, compiled"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rocketq._speedups",
    "Compiled versions of rocketq's hottest codec functions (see rocketq.speedups).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    crc_init();
    st.empty_str = PyUnicode_FromStringAndSize("", 0);
    st.empty_bytes = PyBytes_FromStringAndSize("", 0);
    str_code = PyUnicode_InternFromString("code");
    str_local = PyUnicode_InternFromString("local");
    str_bounds = PyUnicode_InternFromString("bounds");
    str_counts = PyUnicode_InternFromString("counts");
    str_sum = PyUnicode_InternFromString("sum");
    int_one = PyLong_FromLong(1);
    if (str_local == NULL || str_bounds == NULL || str_counts == NULL || str_sum == NULL || int_one == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    if (st.empty_str == NULL || st.empty_bytes == NULL || str_code == NULL || PyType_Ready(&RpcTimerType) < 0 ||
        PyType_Ready(&SendCounterType) < 0 || PyModule_AddObjectRef(m, "RpcTimer", (PyObject *)&RpcTimerType) < 0 ||
        PyModule_AddObjectRef(m, "SendCounter", (PyObject *)&SendCounterType) < 0 ||
        PyType_Ready(&PutSamplerType) < 0 || PyModule_AddObjectRef(m, "PutSampler", (PyObject *)&PutSamplerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
