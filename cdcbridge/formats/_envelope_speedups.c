/*
 * Optional C encoders of the two Avro envelopes (cdcbridge.formats.fast_envelopes is their only user).
 *
 * encode_mutate_log(record, instance, schema_id) and
 * encode_record_image(record, instance, schema_id, current_row, tombstones) write the Confluent-framed Avro
 * bodies that build_mutate_log() / build_record_image() + fastavro's schemaless_writer give for the same
 * record, byte for byte, for the exact schemas in schemas/mutate_log.avsc and schemas/record_image.avsc
 * (fast_envelopes.py turns an encoder off if its schema differs). They handle only the plain case: exact types,
 * in-range numbers, valid Unicode. Anything else returns None, and the caller takes the Python path, which
 * raises the well-worded errors; only MemoryError-type failures raise here.
 *
 * Avro binary, as fastavro writes it: longs, enum indexes, union branch indexes and array / map counts are
 * zig-zag varints; strings and bytes are a length then raw bytes; doubles are 8 bytes little-endian;
 * booleans one byte; an array is one block (count, items, 0), an empty array the single byte 0; a map is one
 * block (count, then key string + value per entry in the dict's order, 0), an empty map the single byte 0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Return codes of the encoding helpers. */
#define OK 0
#define NOT_PLAIN (-1) /* not the plain case: the caller returns None (no exception set) */
#define ERROR (-2)     /* an exception (MemoryError) is set */

/* Enum indexes: MutationType in mutate_log.avsc (RecordType of both envelopes is its first three symbols)
 * and CellOp, in the order of cdcbridge/contract.py's enums (tests/unit/test_contract.py checks them). */
enum { TYPE_PUT = 0, TYPE_UPDATE = 1, TYPE_DELETE = 2, TYPE_INCREMENT = 3 };
enum { CELL_OP_PUT = 0, CELL_OP_DELETE_ONE_VERSION = 1, CELL_OP_DELETE_ALL_VERSION = 2, CELL_OP_INCREMENT = 3 };

/* Branch indexes of the unions (MutationCell and ImageCell have the same value and version unions). */
#define PK_LONG 0   /* pk value: ["long", "string", "bytes"] */
#define PK_STRING 1
#define PK_BYTES 2
#define VALUE_NULL 0 /* cell value: ["null", "boolean", "long", "double", "string", "bytes"] */
#define VALUE_BOOLEAN 1
#define VALUE_LONG 2
#define VALUE_DOUBLE 3
#define VALUE_STRING 4
#define VALUE_BYTES 5
#define NULLABLE_NULL 0 /* version, amount: ["null", "long"] */
#define NULLABLE_LONG 1

/* Widths of the seq_key fields, cdcbridge/contract.py SEQ_KEY_FORMAT "%010d%020d%010d%06d"
 * (tests/unit/test_contract.py checks these against contract.py). */
#define EPOCH_DIGITS 10
#define TIMESTAMP_DIGITS 20
#define ROW_DIGITS 10
#define OP_DIGITS 6
#define SEQ_KEY_LEN (EPOCH_DIGITS + TIMESTAMP_DIGITS + ROW_DIGITS + OP_DIGITS)

/* Set by configure(); `configured` stays 0 until all of them are. */
static int configured = 0;
static PyTypeObject *record_type = NULL, *cell_type = NULL, *sequence_type = NULL;
static PyObject *action_put = NULL, *action_update = NULL, *action_delete = NULL;
static PyObject *op_put = NULL, *op_delete_one = NULL, *op_delete_all = NULL, *op_increment = NULL;
static PyObject *bridge_version = NULL; /* bytes: the UTF-8 of cdcbridge.__version__ */
/* Exclusive upper bounds of the seq numbers (cdcbridge/contract.py SEQ_LIMITS, passed in by configure()). */
static uint64_t epoch_limit, timestamp_limit, row_limit, op_limit;

/* Attribute names, interned once. */
static PyObject *s_table, *s_action, *s_primary_key, *s_cells, *s_sequence, *s_shard_id, *s_name, *s_op, *s_value,
    *s_timestamp_ms, *s_epoch, *s_timestamp_us, *s_row_index;

/* ==== shared: output buffer, Avro primitives, plain values ============================================== */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_init(Buf *buf, Py_ssize_t cap) {
    buf->data = PyMem_Malloc((size_t)cap);
    buf->len = 0;
    buf->cap = cap;
    if (buf->data == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    return OK;
}

static void buf_free(Buf *buf) {
    PyMem_Free(buf->data);
    buf->data = NULL;
}

/* Make room for `extra` more bytes. */
static int buf_reserve(Buf *buf, Py_ssize_t extra) {
    if (buf->len + extra <= buf->cap) {
        return OK;
    }
    if (extra > PY_SSIZE_T_MAX / 2 - buf->len) {
        PyErr_NoMemory();
        return ERROR;
    }
    Py_ssize_t cap = buf->cap * 2;
    if (cap < buf->len + extra) {
        cap = buf->len + extra;
    }
    char *data = PyMem_Realloc(buf->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    buf->data = data;
    buf->cap = cap;
    return OK;
}

static int put_raw(Buf *buf, const char *bytes, Py_ssize_t n) {
    if (buf_reserve(buf, n) < 0) {
        return ERROR;
    }
    memcpy(buf->data + buf->len, bytes, (size_t)n);
    buf->len += n;
    return OK;
}

static int put_byte(Buf *buf, uint8_t byte) {
    if (buf_reserve(buf, 1) < 0) {
        return ERROR;
    }
    buf->data[buf->len++] = (char)byte;
    return OK;
}

/* An Avro long (also enum index, union branch, block count, length): zig-zag, then 7 bits a byte, low first. */
static int put_long(Buf *buf, int64_t value) {
    if (buf_reserve(buf, 10) < 0) {
        return ERROR;
    }
    uint64_t zigzag = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); /* >> of a negative is arithmetic */
    char *out = buf->data + buf->len;
    while (zigzag >= 0x80) {
        *out++ = (char)((zigzag & 0x7F) | 0x80);
        zigzag >>= 7;
    }
    *out++ = (char)zigzag;
    buf->len = out - buf->data;
    return OK;
}

static int put_bytes(Buf *buf, const char *bytes, Py_ssize_t n) {
    if (put_long(buf, (int64_t)n) < 0) {
        return ERROR;
    }
    return put_raw(buf, bytes, n);
}

/* IEEE bits, little-endian whatever the host order (struct.pack('<d') keeps a nan's sign and payload too). */
static int put_double(Buf *buf, double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    char le[8];
    for (int i = 0; i < 8; i++) {
        le[i] = (char)(bits >> (8 * i));
    }
    return put_raw(buf, le, 8);
}

/* `value` written as `width` decimal digits with leading zeros; the caller checked it fits. */
static void put_padded_digits(char *out, uint64_t value, int width) {
    for (int i = width - 1; i >= 0; i--) {
        out[i] = (char)('0' + value % 10);
        value /= 10;
    }
}

/* An Avro string from an exact str; a lone surrogate (no UTF-8) is not plain. */
static int put_str(Buf *buf, PyObject *text) {
    if (!PyUnicode_CheckExact(text)) {
        return NOT_PLAIN;
    }
    Py_ssize_t n;
    /* For an ASCII str this is its own buffer; otherwise CPython caches the UTF-8 inside the str. */
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            return NOT_PLAIN;
        }
        return ERROR;
    }
    return put_bytes(buf, utf8, n);
}

/* *out = the value of an exact int that fits int64; bool, subclasses and bigger ints are not plain. */
static int exact_int64(PyObject *number, int64_t *out) {
    if (!PyLong_CheckExact(number)) {
        return NOT_PLAIN;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (overflow != 0) {
        return NOT_PLAIN;
    }
    if (value == -1 && PyErr_Occurred()) {
        return ERROR;
    }
    *out = (int64_t)value;
    return OK;
}

/* A seq number: an exact int in [0, limit). */
static int seq_number(PyObject *number, uint64_t limit, uint64_t *out) {
    int64_t value;
    int status = exact_int64(number, &value);
    if (status < 0) {
        return status;
    }
    if (value < 0 || (uint64_t)value >= limit) {
        return NOT_PLAIN;
    }
    *out = (uint64_t)value;
    return OK;
}

/* A new reference to obj.name; an unset slot (AttributeError) is not plain. */
static int get_attr(PyObject *obj, PyObject *name, PyObject **out) {
    *out = PyObject_GetAttr(obj, name);
    if (*out != NULL) {
        return OK;
    }
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return NOT_PLAIN;
    }
    return ERROR;
}

/* Every early exit below goes through `done`, which drops the references taken so far. */
#define CHECK(expr)             \
    do {                        \
        status = (expr);        \
        if (status < 0) {       \
            goto done;          \
        }                       \
    } while (0)

/* A ["null", "long"] union: None or an exact int64 (fastavro would refuse anything else). */
static int put_nullable_long(Buf *buf, PyObject *value) {
    if (value == Py_None) {
        return put_long(buf, NULLABLE_NULL);
    }
    int64_t number;
    int status = exact_int64(value, &number);
    if (status < 0) {
        return status;
    }
    if (put_long(buf, NULLABLE_LONG) < 0) {
        return ERROR;
    }
    return put_long(buf, number);
}

/* The tagged value (common.tagged_value for exact types): int64 → long, bool → boolean, float → double,
 * str → string, bytes → bytes. None, subclasses, bytearray and big ints are not plain. */
static int put_cell_value(Buf *buf, PyObject *value) {
    int status;
    if (value == Py_True || value == Py_False) {
        CHECK(put_long(buf, VALUE_BOOLEAN));
        return put_byte(buf, value == Py_True ? 1 : 0);
    }
    if (PyLong_CheckExact(value)) {
        int64_t number;
        CHECK(exact_int64(value, &number));
        CHECK(put_long(buf, VALUE_LONG));
        return put_long(buf, number);
    }
    if (PyFloat_CheckExact(value)) {
        CHECK(put_long(buf, VALUE_DOUBLE));
        return put_double(buf, PyFloat_AS_DOUBLE(value));
    }
    if (PyUnicode_CheckExact(value)) {
        /* The branch byte goes first; on NOT_PLAIN the whole message is dropped, so no need to undo it. */
        CHECK(put_long(buf, VALUE_STRING));
        return put_str(buf, value);
    }
    if (PyBytes_CheckExact(value)) {
        CHECK(put_long(buf, VALUE_BYTES));
        return put_bytes(buf, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
    }
    return NOT_PLAIN;
done:
    return status;
}

/* ==== shared: the fields both envelopes start with ====================================================== */

/* The pk array (common.pk_block): each column's name and its value tagged long / string / bytes. An empty
 * primary key is not plain either: record_key() refuses it. */
/* *columns = a tuple snapshot of a non-empty exact list of exact (name, value) tuples (an allocation may run the
 * garbage collector, and a finalizer could change the list); anything else is not plain. */
static int pk_columns(PyObject *primary_key, PyObject **columns) {
    *columns = NULL;
    if (!PyList_CheckExact(primary_key) || PyList_GET_SIZE(primary_key) == 0) {
        return NOT_PLAIN;
    }
    PyObject *snapshot = PyList_AsTuple(primary_key);
    if (snapshot == NULL) {
        return ERROR;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(snapshot); i++) {
        PyObject *column = PyTuple_GET_ITEM(snapshot, i);
        if (!PyTuple_CheckExact(column) || PyTuple_GET_SIZE(column) != 2) {
            Py_DECREF(snapshot);
            return NOT_PLAIN;
        }
    }
    *columns = snapshot;
    return OK;
}

static int put_pk(Buf *buf, PyObject *primary_key) {
    PyObject *columns;
    int status = pk_columns(primary_key, &columns);
    if (status < 0) {
        return status;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    CHECK(put_long(buf, (int64_t)n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *column = PyTuple_GET_ITEM(columns, i);
        PyObject *value = PyTuple_GET_ITEM(column, 1);
        CHECK(put_str(buf, PyTuple_GET_ITEM(column, 0)));
        if (PyLong_CheckExact(value)) {
            int64_t number;
            CHECK(exact_int64(value, &number));
            CHECK(put_long(buf, PK_LONG));
            CHECK(put_long(buf, number));
        } else if (PyUnicode_CheckExact(value)) {
            CHECK(put_long(buf, PK_STRING));
            CHECK(put_str(buf, value));
        } else if (PyBytes_CheckExact(value)) {
            CHECK(put_long(buf, PK_BYTES));
            CHECK(put_bytes(buf, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value)));
        } else {
            status = NOT_PLAIN; /* bool, float, subclasses, bytearray */
            goto done;
        }
    }
    CHECK(put_long(buf, 0));
done:
    Py_DECREF(columns);
    return status;
}

/* Framing and the fields every message of the record shares (common.common_fields), split around the
 * per-message seq.op_index and seq_key: `head` = framing, source, seq epoch/timestamp_us/row_index;
 * `tail` = timestamp, pk. */
typedef struct {
    Buf head;
    Buf tail;
    char seq_key[SEQ_KEY_LEN];
} Common;

static void common_free(Common *common) {
    buf_free(&common->head);
    buf_free(&common->tail);
}

/* Fill `common` from the record; *action_index gets TYPE_PUT / TYPE_UPDATE / TYPE_DELETE. */
static int put_common(Common *common, PyObject *record, PyObject *instance, uint32_t schema_id, int *action_index) {
    int status;
    PyObject *table = NULL, *action = NULL, *shard_id = NULL, *sequence = NULL, *primary_key = NULL;
    PyObject *epoch_obj = NULL, *timestamp_obj = NULL, *row_obj = NULL;
    uint64_t epoch, timestamp_us, row_index;
    CHECK(buf_init(&common->head, 128));
    CHECK(buf_init(&common->tail, 128));
    CHECK(get_attr(record, s_table, &table));
    CHECK(get_attr(record, s_action, &action));
    CHECK(get_attr(record, s_shard_id, &shard_id));
    CHECK(get_attr(record, s_sequence, &sequence));
    CHECK(get_attr(record, s_primary_key, &primary_key));
    if (action == action_put) {
        *action_index = TYPE_PUT;
    } else if (action == action_update) {
        *action_index = TYPE_UPDATE;
    } else if (action == action_delete) {
        *action_index = TYPE_DELETE;
    } else {
        status = NOT_PLAIN;
        goto done;
    }
    if (Py_TYPE(sequence) != sequence_type) {
        status = NOT_PLAIN;
        goto done;
    }
    CHECK(get_attr(sequence, s_epoch, &epoch_obj));
    CHECK(get_attr(sequence, s_timestamp_us, &timestamp_obj));
    CHECK(get_attr(sequence, s_row_index, &row_obj));
    CHECK(seq_number(epoch_obj, epoch_limit, &epoch));
    CHECK(seq_number(timestamp_obj, timestamp_limit, &timestamp_us));
    CHECK(seq_number(row_obj, row_limit, &row_index));

    Buf *head = &common->head;
    char framing[5] = {0, (char)(schema_id >> 24), (char)(schema_id >> 16), (char)(schema_id >> 8), (char)schema_id};
    CHECK(put_raw(head, framing, 5));
    CHECK(put_str(head, instance));
    CHECK(put_str(head, table));
    CHECK(put_str(head, shard_id));
    CHECK(put_long(head, *action_index)); /* RecordType has the actions' order */
    CHECK(put_bytes(head, PyBytes_AS_STRING(bridge_version), PyBytes_GET_SIZE(bridge_version)));
    CHECK(put_long(head, (int64_t)epoch));
    CHECK(put_long(head, (int64_t)timestamp_us));
    CHECK(put_long(head, (int64_t)row_index));

    put_padded_digits(common->seq_key, epoch, EPOCH_DIGITS);
    put_padded_digits(common->seq_key + EPOCH_DIGITS, timestamp_us, TIMESTAMP_DIGITS);
    put_padded_digits(common->seq_key + EPOCH_DIGITS + TIMESTAMP_DIGITS, row_index, ROW_DIGITS);

    CHECK(put_long(&common->tail, (int64_t)(timestamp_us / 1000))); /* record.timestamp_ms */
    CHECK(put_pk(&common->tail, primary_key));
done:
    Py_XDECREF(table);
    Py_XDECREF(action);
    Py_XDECREF(shard_id);
    Py_XDECREF(sequence);
    Py_XDECREF(primary_key);
    Py_XDECREF(epoch_obj);
    Py_XDECREF(timestamp_obj);
    Py_XDECREF(row_obj);
    return status;
}

/* Start a message in `buf`: head, op_index, seq_key, tail, row_deleted (the fields up to the envelope's own). */
static int put_envelope_start(Buf *buf, Common *common, int64_t op_index, int row_deleted) {
    int status;
    buf->len = 0;
    CHECK(put_raw(buf, common->head.data, common->head.len));
    CHECK(put_long(buf, op_index));
    put_padded_digits(common->seq_key + SEQ_KEY_LEN - OP_DIGITS, (uint64_t)op_index, OP_DIGITS);
    CHECK(put_bytes(buf, common->seq_key, SEQ_KEY_LEN));
    CHECK(put_raw(buf, common->tail.data, common->tail.len));
    CHECK(put_byte(buf, row_deleted ? 1 : 0));
done:
    return status;
}

/* The record's cells as a tuple snapshot (an allocation may run the garbage collector, and a finalizer could
 * change the list); a cells attribute that is not an exact list is not plain. */
static int cells_snapshot(PyObject *record, PyObject **out) {
    PyObject *cells_list;
    *out = NULL;
    int status = get_attr(record, s_cells, &cells_list);
    if (status < 0) {
        return status;
    }
    if (!PyList_CheckExact(cells_list)) {
        Py_DECREF(cells_list);
        return NOT_PLAIN;
    }
    *out = PyList_AsTuple(cells_list);
    Py_DECREF(cells_list);
    return *out == NULL ? ERROR : OK;
}

/* Append one finished message to `out` as bytes. */
static int emit(PyObject *out, Buf *buf) {
    PyObject *message = PyBytes_FromStringAndSize(buf->data, buf->len);
    if (message == NULL) {
        return ERROR;
    }
    int appended = PyList_Append(out, message);
    Py_DECREF(message);
    return appended < 0 ? ERROR : OK;
}

/* ==== MUTATE_LOG ======================================================================================== */

/* One MutationCell (mutate_log._mutation_cell and common.check_cell): PUT carries the tagged value, INCREMENT
 * the int64 delta as amount, deletes neither; DELETE_ONE_VERSION needs its version. */
static int put_mutation_cell(Buf *buf, PyObject *cell) {
    if (Py_TYPE(cell) != cell_type) {
        return NOT_PLAIN;
    }
    int status;
    PyObject *name = NULL, *op = NULL, *value = NULL, *version = NULL;
    CHECK(get_attr(cell, s_name, &name));
    CHECK(get_attr(cell, s_op, &op));
    CHECK(get_attr(cell, s_value, &value));
    CHECK(get_attr(cell, s_timestamp_ms, &version));
    CHECK(put_str(buf, name));
    if (op == op_put) {
        CHECK(put_long(buf, CELL_OP_PUT));
        CHECK(put_cell_value(buf, value)); /* None (a PUT without value) is not plain */
        CHECK(put_nullable_long(buf, version));
        CHECK(put_long(buf, NULLABLE_NULL));
    } else if (op == op_increment) {
        int64_t delta;
        CHECK(exact_int64(value, &delta));
        CHECK(put_long(buf, CELL_OP_INCREMENT));
        CHECK(put_long(buf, VALUE_NULL));
        CHECK(put_nullable_long(buf, version));
        CHECK(put_long(buf, NULLABLE_LONG));
        CHECK(put_long(buf, delta));
    } else if (op == op_delete_one || op == op_delete_all) {
        if (op == op_delete_one && version == Py_None) {
            status = NOT_PLAIN;
            goto done;
        }
        CHECK(put_long(buf, op == op_delete_one ? CELL_OP_DELETE_ONE_VERSION : CELL_OP_DELETE_ALL_VERSION));
        CHECK(put_long(buf, VALUE_NULL));
        CHECK(put_nullable_long(buf, version));
        CHECK(put_long(buf, NULLABLE_NULL));
    } else {
        status = NOT_PLAIN;
    }
done:
    Py_XDECREF(name);
    Py_XDECREF(op);
    Py_XDECREF(value);
    Py_XDECREF(version);
    return status;
}

/* *out = whether `cell` is an INCREMENT (the split of an UPDATE into runs); NOT_PLAIN if it is not a Cell. */
static int is_increment(PyObject *cell, int *out) {
    if (Py_TYPE(cell) != cell_type) {
        return NOT_PLAIN;
    }
    PyObject *op;
    int status = get_attr(cell, s_op, &op);
    if (status < 0) {
        return status;
    }
    *out = op == op_increment;
    Py_DECREF(op);
    return OK;
}

/* One MUTATE_LOG message: envelope start, type, replace_row, cells[first:end] (a tuple). */
static int put_mutation(Buf *buf, Common *common, int64_t op_index, int type, PyObject *cells, Py_ssize_t first,
                        Py_ssize_t end) {
    int status;
    CHECK(put_envelope_start(buf, common, op_index, type == TYPE_DELETE));
    CHECK(put_long(buf, type));
    CHECK(put_byte(buf, type == TYPE_PUT)); /* replace_row */
    if (end > first) {
        CHECK(put_long(buf, (int64_t)(end - first)));
        for (Py_ssize_t i = first; i < end; i++) {
            CHECK(put_mutation_cell(buf, PyTuple_GET_ITEM(cells, i)));
        }
    }
    CHECK(put_long(buf, 0));
done:
    return status;
}

/* The messages of `record` in op_index order (mutate_log.build_mutate_log). */
static int mutate_log_messages(PyObject *record, PyObject *instance, uint32_t schema_id, PyObject *out) {
    int status;
    int action_index = 0;
    PyObject *cells = NULL;
    Common common = {{NULL, 0, 0}, {NULL, 0, 0}, {0}};
    Buf message = {NULL, 0, 0};
    CHECK(buf_init(&message, 512));
    CHECK(put_common(&common, record, instance, schema_id, &action_index));
    if (action_index == TYPE_DELETE) { /* no cells, and they are not looked at */
        CHECK(put_mutation(&message, &common, 0, TYPE_DELETE, NULL, 0, 0));
        CHECK(emit(out, &message));
        goto done;
    }
    CHECK(cells_snapshot(record, &cells));
    Py_ssize_t n = PyTuple_GET_SIZE(cells);
    if (action_index == TYPE_PUT || n == 0) {
        CHECK(put_mutation(&message, &common, 0, action_index, cells, 0, n));
        CHECK(emit(out, &message));
        goto done;
    }
    /* UPDATE: one message per maximal run of INCREMENT cells or of other cells (mutate_log.unit_operations). */
    int64_t op_index = 0;
    Py_ssize_t first = 0;
    while (first < n) {
        int increment, next_increment;
        CHECK(is_increment(PyTuple_GET_ITEM(cells, first), &increment));
        Py_ssize_t end = first + 1;
        while (end < n) {
            CHECK(is_increment(PyTuple_GET_ITEM(cells, end), &next_increment));
            if (next_increment != increment) {
                break;
            }
            end++;
        }
        if ((uint64_t)op_index >= op_limit) { /* seq_key's op_index would overflow its padding */
            status = NOT_PLAIN;
            goto done;
        }
        CHECK(put_mutation(&message, &common, op_index, increment ? TYPE_INCREMENT : TYPE_UPDATE, cells, first, end));
        CHECK(emit(out, &message));
        op_index++;
        first = end;
    }
done:
    Py_XDECREF(cells);
    common_free(&common);
    buf_free(&message);
    return status;
}

/* ==== RECORD_IMAGE ====================================================================================== */

/* What the fold of record_image._own_cells_image looks at in one cell (new references). */
typedef struct {
    PyObject *name, *op, *value, *version;
    Py_hash_t hash;     /* of name */
    int64_t version_ms; /* when version is not None */
} CellParts;

/* record_image._own_cells_image's `held` dict: column k holds cell held[k]; columns are in the order their name
 * was first assigned (a Python dict keeps a re-assigned key where it was). `slots` is an open-addressing hash
 * table of column indexes (-1 = empty) over the names, at most half full. */
typedef struct {
    CellParts *parts;
    Py_ssize_t n_parts; /* filled so far; fold_free releases them */
    Py_ssize_t *held;
    Py_ssize_t n_held;
    Py_ssize_t *slots;
    size_t mask;
} Fold;

static void fold_free(Fold *fold) {
    for (Py_ssize_t i = 0; i < fold->n_parts; i++) {
        CellParts *cell = &fold->parts[i];
        Py_DECREF(cell->name);
        Py_DECREF(cell->op);
        Py_DECREF(cell->value);
        Py_DECREF(cell->version);
    }
    PyMem_Free(fold->parts); /* held and slots live in the same block */
    fold->parts = NULL;
    fold->n_parts = 0;
}

static int fold_init(Fold *fold, Py_ssize_t n) {
    if ((size_t)n > PY_SSIZE_T_MAX / (sizeof(CellParts) + 4 * sizeof(Py_ssize_t))) {
        PyErr_NoMemory();
        return ERROR;
    }
    size_t capacity = 8;
    while (capacity < 2 * (size_t)n) {
        capacity *= 2;
    }
    size_t parts_size = (size_t)n * sizeof(CellParts), held_size = (size_t)n * sizeof(Py_ssize_t);
    char *block = PyMem_Malloc(parts_size + held_size + capacity * sizeof(Py_ssize_t));
    if (block == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    fold->parts = (CellParts *)block;
    fold->n_parts = 0;
    fold->held = (Py_ssize_t *)(block + parts_size);
    fold->n_held = 0;
    fold->slots = (Py_ssize_t *)(block + parts_size + held_size);
    fold->mask = capacity - 1;
    for (size_t i = 0; i < capacity; i++) {
        fold->slots[i] = -1;
    }
    return OK;
}

/* Read one cell into fold->parts: a Cell with a known op, an exact str name and a version that is None or an
 * exact int64 (the fold compares versions); anything else is not plain. */
static int read_cell(Fold *fold, PyObject *cell) {
    if (Py_TYPE(cell) != cell_type) {
        return NOT_PLAIN;
    }
    CellParts *parts = &fold->parts[fold->n_parts];
    parts->name = PyObject_GetAttr(cell, s_name);
    parts->op = parts->name == NULL ? NULL : PyObject_GetAttr(cell, s_op);
    parts->value = parts->op == NULL ? NULL : PyObject_GetAttr(cell, s_value);
    parts->version = parts->value == NULL ? NULL : PyObject_GetAttr(cell, s_timestamp_ms);
    if (parts->version == NULL) {
        Py_XDECREF(parts->name);
        Py_XDECREF(parts->op);
        Py_XDECREF(parts->value);
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            return NOT_PLAIN;
        }
        return ERROR;
    }
    fold->n_parts++; /* from here on fold_free releases them */
    if (!PyUnicode_CheckExact(parts->name) ||
        (parts->op != op_put && parts->op != op_delete_one && parts->op != op_delete_all &&
         parts->op != op_increment)) {
        return NOT_PLAIN;
    }
    if (parts->version != Py_None) {
        int status = exact_int64(parts->version, &parts->version_ms);
        if (status < 0) {
            return status;
        }
    }
    parts->hash = PyObject_Hash(parts->name);
    return parts->hash == -1 && PyErr_Occurred() ? ERROR : OK;
}

/* *column = the column holding `name` (-1 if none) and *slot = where it is or would go in the hash table. */
static int find_column(Fold *fold, CellParts *cell, Py_ssize_t *column, size_t *slot) {
    size_t i = (size_t)cell->hash & fold->mask;
    while (fold->slots[i] >= 0) {
        CellParts *holder = &fold->parts[fold->held[fold->slots[i]]];
        if (holder->hash == cell->hash) {
            int equal = PyObject_RichCompareBool(holder->name, cell->name, Py_EQ); /* exact strs: no Python code */
            if (equal < 0) {
                return ERROR;
            }
            if (equal) {
                *column = fold->slots[i];
                *slot = i;
                return OK;
            }
        }
        i = (i + 1) & fold->mask;
    }
    *column = -1;
    *slot = i;
    return OK;
}

/* held[cell.name] = cell. */
static void hold(Fold *fold, Py_ssize_t column, size_t slot, Py_ssize_t cell) {
    if (column >= 0) {
        fold->held[column] = cell;
        return;
    }
    fold->held[fold->n_held] = cell;
    fold->slots[slot] = fold->n_held++;
}

/* record_image._older: both versions known and `cell`'s is the lower. */
static int older(const CellParts *cell, const CellParts *than) {
    return cell->version != Py_None && than->version != Py_None && cell->version_ms < than->version_ms;
}

static int same_version(const CellParts *a, const CellParts *b) {
    if (a->version == Py_None || b->version == Py_None) {
        return a->version == b->version;
    }
    return a->version_ms == b->version_ms;
}

/* record_image._own_cells_image over the tuple `cells`: each cell checked (common.check_cell), then folded in
 * order. An INCREMENT in a PUT record is not plain (the Python path raises). */
static int fold_cells(Fold *fold, PyObject *cells, int action_index, int include_deletes) {
    int status;
    Py_ssize_t n = PyTuple_GET_SIZE(cells);
    CHECK(fold_init(fold, n));
    for (Py_ssize_t i = 0; i < n; i++) {
        CHECK(read_cell(fold, PyTuple_GET_ITEM(cells, i)));
        CellParts *cell = &fold->parts[i];
        if ((cell->op == op_put && cell->value == Py_None) || (cell->op == op_delete_one && cell->version == Py_None)) {
            return NOT_PLAIN; /* check_cell raises */
        }
        if (cell->op == op_increment) {
            if (action_index == TYPE_PUT) {
                return NOT_PLAIN;
            }
            continue; /* only its delta is known */
        }
        if (cell->op != op_put && !include_deletes) {
            continue; /* a replaced row holds only what was put */
        }
        Py_ssize_t column;
        size_t slot;
        CHECK(find_column(fold, cell, &column, &slot));
        const CellParts *previous = column >= 0 ? &fold->parts[fold->held[column]] : NULL;
        int previous_put = previous != NULL && previous->op == op_put;
        if (cell->op == op_put) {
            if (!(previous_put && older(cell, previous))) {
                hold(fold, column, slot, i);
            }
        } else if (cell->op == op_delete_all) {
            hold(fold, column, slot, i);
        } else if (!(previous_put && !same_version(previous, cell))) { /* DELETE_ONE_VERSION */
            hold(fold, column, slot, i);
        }
    }
done:
    return status;
}

/* The columns map of a folded image (record_image._image_cell per held cell). */
static int put_folded_columns(Buf *buf, Fold *fold) {
    int status;
    if (fold->n_held > 0) {
        CHECK(put_long(buf, (int64_t)fold->n_held));
        for (Py_ssize_t k = 0; k < fold->n_held; k++) {
            CellParts *cell = &fold->parts[fold->held[k]];
            CHECK(put_str(buf, cell->name));
            if (cell->op == op_put) {
                CHECK(put_cell_value(buf, cell->value));
                CHECK(put_nullable_long(buf, cell->version));
            } else if (cell->op == op_delete_one) {
                CHECK(put_long(buf, VALUE_NULL));
                CHECK(put_nullable_long(buf, cell->version));
            } else { /* DELETE_ALL_VERSION */
                CHECK(put_long(buf, VALUE_NULL));
                CHECK(put_long(buf, NULLABLE_NULL));
            }
        }
    }
    CHECK(put_long(buf, 0));
done:
    return status;
}

/* The columns map of a row read back (record_image._row_image): an exact dict of exact str → exact 2-tuple
 * (value, version), in the dict's order; a None value is the null branch. Nothing here runs Python code or
 * allocates a tracked object, so the dict cannot change while it is walked. */
static int put_row_columns(Buf *buf, PyObject *row) {
    if (!PyDict_CheckExact(row)) {
        return NOT_PLAIN;
    }
    int status;
    Py_ssize_t n = PyDict_GET_SIZE(row), written = 0, position = 0;
    PyObject *name, *column;
    if (n > 0) {
        CHECK(put_long(buf, (int64_t)n));
        while (PyDict_Next(row, &position, &name, &column)) {
            if (!PyTuple_CheckExact(column) || PyTuple_GET_SIZE(column) != 2) {
                return NOT_PLAIN;
            }
            PyObject *value = PyTuple_GET_ITEM(column, 0);
            CHECK(put_str(buf, name));
            if (value == Py_None) {
                CHECK(put_long(buf, VALUE_NULL));
            } else {
                CHECK(put_cell_value(buf, value));
            }
            CHECK(put_nullable_long(buf, PyTuple_GET_ITEM(column, 1)));
            written++;
        }
    }
    if (written != n) {
        return NOT_PLAIN;
    }
    CHECK(put_long(buf, 0));
done:
    return status;
}

/* The messages of `record` (record_image.build_record_image): the image, then for a DELETE with tombstones a
 * None for the tombstone. */
static int record_image_messages(PyObject *record, PyObject *instance, uint32_t schema_id, PyObject *current_row,
                                 int tombstones, PyObject *out) {
    int status;
    int action_index = 0;
    PyObject *cells = NULL;
    Common common = {{NULL, 0, 0}, {NULL, 0, 0}, {0}};
    Buf message = {NULL, 0, 0};
    Fold fold = {NULL, 0, NULL, 0, NULL, 0};
    CHECK(buf_init(&message, 512));
    CHECK(put_common(&common, record, instance, schema_id, &action_index));
    CHECK(put_envelope_start(&message, &common, 0, action_index == TYPE_DELETE));
    int partial = 0;
    if (action_index == TYPE_DELETE) { /* no columns; cells are not looked at */
        CHECK(put_long(&message, 0));
    } else if (action_index == TYPE_UPDATE && current_row != Py_None) { /* cells are not looked at */
        CHECK(put_row_columns(&message, current_row));
    } else {
        partial = action_index == TYPE_UPDATE;
        CHECK(cells_snapshot(record, &cells));
        CHECK(fold_cells(&fold, cells, action_index, partial));
        CHECK(put_folded_columns(&message, &fold));
    }
    CHECK(put_byte(&message, (uint8_t)partial));
    CHECK(emit(out, &message));
    if (action_index == TYPE_DELETE && tombstones && PyList_Append(out, Py_None) < 0) {
        status = ERROR;
    }
done:
    fold_free(&fold);
    Py_XDECREF(cells);
    common_free(&common);
    buf_free(&message);
    return status;
}

/* ==== keys ============================================================================================== */

/* The canonical message key (cdcbridge.formats.keys.encode_key) of a plain primary key: `[v1,v2,...]` with exact
 * int64 ints in decimal and exact strs that JSON writes unescaped ('"', '\\' and U+0000-U+001F are escaped, so a
 * str holding one is not plain) as "...". Bytes values, other types and lone surrogates are not plain. */
static int put_key(Buf *buf, PyObject *primary_key) {
    PyObject *columns;
    int status = pk_columns(primary_key, &columns);
    if (status < 0) {
        return status;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    CHECK(put_byte(buf, '['));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *column = PyTuple_GET_ITEM(columns, i);
        if (i > 0) {
            CHECK(put_byte(buf, ','));
        }
        PyObject *value = PyTuple_GET_ITEM(column, 1);
        if (PyLong_CheckExact(value)) {
            int64_t number;
            char digits[24];
            CHECK(exact_int64(value, &number));
            int written = snprintf(digits, sizeof digits, "%lld", (long long)number);
            CHECK(put_raw(buf, digits, written));
        } else if (PyUnicode_CheckExact(value)) {
            Py_ssize_t size;
            const char *utf8 = PyUnicode_AsUTF8AndSize(value, &size);
            if (utf8 == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                    status = ERROR;
                    goto done;
                }
                PyErr_Clear();
                status = NOT_PLAIN;
                goto done;
            }
            for (Py_ssize_t k = 0; k < size; k++) {
                unsigned char c = (unsigned char)utf8[k];
                if (c < 0x20 || c == '"' || c == '\\') {
                    status = NOT_PLAIN;
                    goto done;
                }
            }
            CHECK(put_byte(buf, '"'));
            CHECK(put_raw(buf, utf8, size));
            CHECK(put_byte(buf, '"'));
        } else {
            status = NOT_PLAIN;
            goto done;
        }
    }
    CHECK(put_byte(buf, ']'));
done:
    Py_DECREF(columns);
    return status;
}

/* ==== a page of records ================================================================================= */

/* One format of a table as encode_into() takes it: (kind 0 = MUTATE_LOG / 1 = RECORD_IMAGE, instance, schema_id,
 * tombstones, topic). */
typedef struct {
    int kind;
    PyObject *instance; /* borrowed from the plan tuple */
    uint32_t schema_id;
    int tombstones;
    PyObject *topic; /* borrowed */
} PlanEntry;

#define MAX_FORMATS 4

static int read_plan(PyObject *plan, PlanEntry *entries, Py_ssize_t *count) {
    if (!PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) == 0 || PyTuple_GET_SIZE(plan) > MAX_FORMATS) {
        PyErr_SetString(PyExc_ValueError, "plan must be a tuple of 1 to 4 (kind, instance, schema_id, tombstones, topic)");
        return -1;
    }
    *count = PyTuple_GET_SIZE(plan);
    for (Py_ssize_t i = 0; i < *count; i++) {
        PyObject *entry = PyTuple_GET_ITEM(plan, i);
        int64_t kind, schema_id;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5 ||
            exact_int64(PyTuple_GET_ITEM(entry, 0), &kind) != OK || (kind != 0 && kind != 1) ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 1)) ||
            exact_int64(PyTuple_GET_ITEM(entry, 2), &schema_id) != OK || schema_id < 0 || schema_id > 0xFFFFFFFFLL ||
            !PyBool_Check(PyTuple_GET_ITEM(entry, 3)) || !PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 4))) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError,
                                "plan entries are (kind 0|1, instance str, schema_id uint32, tombstones bool, topic str)");
            }
            return -1;
        }
        entries[i].kind = (int)kind;
        entries[i].instance = PyTuple_GET_ITEM(entry, 1);
        entries[i].schema_id = (uint32_t)schema_id;
        entries[i].tombstones = PyTuple_GET_ITEM(entry, 3) == Py_True;
        entries[i].topic = PyTuple_GET_ITEM(entry, 4);
    }
    return 0;
}

/* Encode one record into the page lists; NOT_PLAIN leaves the lists untouched. */
static int encode_record_into(PyObject *record, PlanEntry *plan, Py_ssize_t formats, PyObject *rows,
                              PyObject *shard_id, int64_t start_us, PyObject **lists, PyObject *zero) {
    int status = OK;
    PyObject *sequence = NULL, *timestamp = NULL, *record_shard = NULL, *primary_key = NULL, *key = NULL;
    PyObject *current_row = Py_None, *end = NULL;
    PyObject *values[MAX_FORMATS] = {NULL};
    Buf key_buf = {NULL, 0, 0};
    if (Py_TYPE(record) != record_type) {
        return NOT_PLAIN;
    }
    CHECK(get_attr(record, s_sequence, &sequence));
    if (start_us >= 0) { /* records before the snapshot start are the caller's to skip */
        int64_t timestamp_us;
        CHECK(get_attr(sequence, s_timestamp_us, &timestamp));
        CHECK(exact_int64(timestamp, &timestamp_us));
        if (timestamp_us < start_us) {
            status = NOT_PLAIN;
            goto done;
        }
    }
    CHECK(get_attr(record, s_shard_id, &record_shard));
    if (PyUnicode_CheckExact(record_shard) && PyUnicode_GET_LENGTH(record_shard) == 0) {
        if (PyObject_SetAttr(record, s_shard_id, shard_id) < 0) { /* iterators are opaque: the caller knows it */
            status = ERROR;
            goto done;
        }
    }
    if (rows != Py_None) {
        PyObject *id = PyLong_FromVoidPtr(record);
        if (id == NULL) {
            status = ERROR;
            goto done;
        }
        PyObject *found = PyDict_GetItemWithError(rows, id); /* borrowed */
        Py_DECREF(id);
        if (found == NULL && PyErr_Occurred()) {
            status = ERROR;
            goto done;
        }
        if (found != NULL) {
            current_row = found;
        }
    }
    CHECK(get_attr(record, s_primary_key, &primary_key));
    CHECK(buf_init(&key_buf, 64));
    CHECK(put_key(&key_buf, primary_key));
    for (Py_ssize_t f = 0; f < formats; f++) {
        values[f] = PyList_New(0);
        if (values[f] == NULL) {
            status = ERROR;
            goto done;
        }
        if (plan[f].kind == 0) {
            CHECK(mutate_log_messages(record, plan[f].instance, plan[f].schema_id, values[f]));
        } else {
            CHECK(record_image_messages(record, plan[f].instance, plan[f].schema_id, current_row, plan[f].tombstones,
                                        values[f]));
        }
    }
    key = PyBytes_FromStringAndSize(key_buf.data, key_buf.len);
    if (key == NULL || PyList_Append(lists[0], sequence) < 0 || PyList_Append(lists[1], zero) < 0) {
        status = ERROR;
        goto done;
    }
    for (Py_ssize_t f = 0; f < formats; f++) {
        Py_ssize_t n = PyList_GET_SIZE(values[f]);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyList_Append(lists[3], plan[f].topic) < 0 || PyList_Append(lists[4], key) < 0 ||
                PyList_Append(lists[5], PyList_GET_ITEM(values[f], i)) < 0) {
                status = ERROR;
                goto done;
            }
        }
    }
    end = PyLong_FromSsize_t(PyList_GET_SIZE(lists[3]));
    if (end == NULL || PyList_Append(lists[2], end) < 0) {
        status = ERROR;
    }
done:
    Py_XDECREF(sequence);
    Py_XDECREF(timestamp);
    Py_XDECREF(record_shard);
    Py_XDECREF(primary_key);
    Py_XDECREF(key);
    Py_XDECREF(end);
    for (Py_ssize_t f = 0; f < formats; f++) {
        Py_XDECREF(values[f]);
    }
    buf_free(&key_buf);
    return status;
}

/* ==== Python entry points =============================================================================== */

/* Checks shared by both encoders: 1 = go on (*schema_id set), 0 = not plain, -1 = exception set. */
static int check_call(PyObject *record, PyObject *schema_id_obj, uint32_t *schema_id) {
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "call configure() before encoding");
        return -1;
    }
    int64_t value;
    if (Py_TYPE(record) != record_type || exact_int64(schema_id_obj, &value) != OK || value < 0 ||
        value > 0xFFFFFFFFLL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    *schema_id = (uint32_t)value;
    return 1;
}

/* `out` when status is OK, else None (not plain) or NULL (exception). */
static PyObject *finish(int status, PyObject *out) {
    if (status == OK) {
        return out;
    }
    Py_DECREF(out);
    if (status == ERROR) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_encode_mutate_log(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_mutate_log(record, instance, schema_id) takes 3 arguments");
        return NULL;
    }
    uint32_t schema_id;
    int go_on = check_call(args[0], args[2], &schema_id);
    if (go_on <= 0) {
        return go_on < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    return finish(mutate_log_messages(args[0], args[1], schema_id, out), out);
}

static PyObject *py_encode_record_image(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_record_image(record, instance, schema_id, current_row, tombstones) takes 5 arguments");
        return NULL;
    }
    uint32_t schema_id;
    int go_on = check_call(args[0], args[2], &schema_id);
    if (go_on <= 0) {
        return go_on < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (args[4] != Py_True && args[4] != Py_False) { /* tombstones: a bool, or the Python path decides */
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    return finish(record_image_messages(args[0], args[1], schema_id, args[3], args[4] == Py_True, out), out);
}

static PyObject *py_record_key(PyObject *module, PyObject *record) {
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "call configure() before encoding");
        return NULL;
    }
    if (Py_TYPE(record) != record_type) {
        Py_RETURN_NONE;
    }
    PyObject *primary_key;
    int status = get_attr(record, s_primary_key, &primary_key);
    if (status < 0) {
        return status == ERROR ? NULL : Py_NewRef(Py_None);
    }
    Buf buf = {NULL, 0, 0};
    status = buf_init(&buf, 64);
    if (status == OK) {
        status = put_key(&buf, primary_key);
    }
    Py_DECREF(primary_key);
    PyObject *key = status == OK ? PyBytes_FromStringAndSize(buf.data, buf.len) : NULL;
    buf_free(&buf);
    if (status == NOT_PLAIN) {
        Py_RETURN_NONE;
    }
    return key;
}

static PyObject *py_encode_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_into(records, start, stop, plan, rows, shard_id, start_us, page_lists) takes 8 "
                        "arguments");
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "call configure() before encoding");
        return NULL;
    }
    PyObject *records = args[0], *rows = args[4], *shard_id = args[5], *page = args[7];
    int64_t start, stop, start_us;
    PlanEntry plan[MAX_FORMATS];
    Py_ssize_t formats;
    if (!PyList_CheckExact(records) || exact_int64(args[1], &start) != OK || exact_int64(args[2], &stop) != OK ||
        exact_int64(args[6], &start_us) != OK || !PyUnicode_CheckExact(shard_id) ||
        (rows != Py_None && !PyDict_CheckExact(rows)) || !PyTuple_Check(page) || PyTuple_GET_SIZE(page) != 6) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError,
                            "encode_into(list, int, int, plan, dict | None, str, int, (6 lists)) got other types");
        }
        return NULL;
    }
    if (read_plan(args[3], plan, &formats) < 0) {
        return NULL;
    }
    PyObject *lists[6];
    for (int i = 0; i < 6; i++) {
        lists[i] = PyTuple_GET_ITEM(page, i);
        if (!PyList_CheckExact(lists[i])) {
            PyErr_SetString(PyExc_TypeError, "page_lists must be 6 lists");
            return NULL;
        }
    }
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL) {
        return NULL;
    }
    Py_ssize_t index = start < 0 ? 0 : (Py_ssize_t)start;
    for (; index < stop && index < PyList_GET_SIZE(records); index++) {
        PyObject *record = Py_NewRef(PyList_GET_ITEM(records, index));
        int status = encode_record_into(record, plan, formats, rows, shard_id, start_us, lists, zero);
        Py_DECREF(record);
        if (status == ERROR) {
            Py_DECREF(zero);
            return NULL;
        }
        if (status == NOT_PLAIN) {
            break;
        }
    }
    Py_DECREF(zero);
    return PyLong_FromSsize_t(index);
}

/* ---- configuration ------------------------------------------------------------------------------------ */

static int limit_from(PyObject *number, uint64_t *out) {
    *out = (uint64_t)PyLong_AsUnsignedLongLong(number);
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *py_configure(PyObject *module, PyObject *args) {
    PyObject *record, *cell, *sequence, *actions, *ops, *version, *limits;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!UO!:configure", &PyType_Type, &record, &PyType_Type, &cell, &PyType_Type,
                          &sequence, &PyTuple_Type, &actions, &PyTuple_Type, &ops, &version, &PyTuple_Type, &limits)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(actions) != 3 || PyTuple_GET_SIZE(ops) != 4 || PyTuple_GET_SIZE(limits) != 4) {
        PyErr_SetString(PyExc_ValueError, "configure needs 3 RecordActions, 4 CellOps and 4 seq limits");
        return NULL;
    }
    uint64_t limit_values[4];
    for (int i = 0; i < 4; i++) {
        if (limit_from(PyTuple_GET_ITEM(limits, i), &limit_values[i]) < 0) {
            return NULL;
        }
    }
    PyObject *version_utf8 = PyUnicode_AsUTF8String(version);
    if (version_utf8 == NULL) {
        return NULL;
    }
    configured = 0;
    Py_XSETREF(bridge_version, version_utf8);
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(record));
    Py_XSETREF(cell_type, (PyTypeObject *)Py_NewRef(cell));
    Py_XSETREF(sequence_type, (PyTypeObject *)Py_NewRef(sequence));
    Py_XSETREF(action_put, Py_NewRef(PyTuple_GET_ITEM(actions, 0)));
    Py_XSETREF(action_update, Py_NewRef(PyTuple_GET_ITEM(actions, 1)));
    Py_XSETREF(action_delete, Py_NewRef(PyTuple_GET_ITEM(actions, 2)));
    Py_XSETREF(op_put, Py_NewRef(PyTuple_GET_ITEM(ops, 0)));
    Py_XSETREF(op_delete_one, Py_NewRef(PyTuple_GET_ITEM(ops, 1)));
    Py_XSETREF(op_delete_all, Py_NewRef(PyTuple_GET_ITEM(ops, 2)));
    Py_XSETREF(op_increment, Py_NewRef(PyTuple_GET_ITEM(ops, 3)));
    epoch_limit = limit_values[0];
    timestamp_limit = limit_values[1];
    row_limit = limit_values[2];
    op_limit = limit_values[3];
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(ChangeRecord, Cell, Sequence, (3 RecordActions PUT, UPDATE, DELETE), "
     "(4 CellOps PUT, DELETE_ONE_VERSION, DELETE_ALL_VERSION, INCREMENT), bridge_version, "
     "(epoch, timestamp_us, row_index, op_index exclusive limits))."},
    {"encode_mutate_log", (PyCFunction)(void (*)(void))py_encode_mutate_log, METH_FASTCALL,
     "encode_mutate_log(record, instance, schema_id) -> list of Confluent-framed MUTATE_LOG values, or None if not "
     "plain."},
    {"encode_record_image", (PyCFunction)(void (*)(void))py_encode_record_image, METH_FASTCALL,
     "encode_record_image(record, instance, schema_id, current_row, tombstones) -> list of Confluent-framed "
     "RECORD_IMAGE values (None for a tombstone), or None if not plain."},
    {"record_key", py_record_key, METH_O,
     "record_key(record) -> the canonical key bytes of keys.record_key, or None if the primary key is not plain."},
    {"encode_into", (PyCFunction)(void (*)(void))py_encode_into, METH_FASTCALL,
     "encode_into(records, start, stop, plan, rows, shard_id, start_us, (sequences, first_subs, ends, topics, keys, "
     "values)) -> index of the first record in [start, stop) it leaves to the caller. Appends each handled record's "
     "sequence, first sub-sequence 0 and end index, and each of its messages' topic, key and value (formats in plan "
     "order); sets an empty record.shard_id to shard_id. A record before start_us (>= 0), or not plain in its key "
     "or any format, stops it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_envelope_speedups", "C encoders of MUTATE_LOG and RECORD_IMAGE messages.", -1, methods,
    NULL, NULL, NULL, NULL,
};

static int intern(PyObject **slot, const char *text) {
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__envelope_speedups(void) {
    if (intern(&s_table, "table") < 0 || intern(&s_action, "action") < 0 ||
        intern(&s_primary_key, "primary_key") < 0 || intern(&s_cells, "cells") < 0 ||
        intern(&s_sequence, "sequence") < 0 || intern(&s_shard_id, "shard_id") < 0 || intern(&s_name, "name") < 0 ||
        intern(&s_op, "op") < 0 || intern(&s_value, "value") < 0 || intern(&s_timestamp_ms, "timestamp_ms") < 0 ||
        intern(&s_epoch, "epoch") < 0 || intern(&s_timestamp_us, "timestamp_us") < 0 ||
        intern(&s_row_index, "row_index") < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
