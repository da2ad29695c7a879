/*
 * Optional C accelerator for the PlainBuffer reader (cdcbridge.tablestore.plainbuffer.reader).
 *
 * It mirrors reader.parse_row / parse_rows / parse_single_row check for check, in the same order and with the
 * same messages and offsets, so both paths give identical rows and identical PlainBufferErrors (the unit tests
 * compare them). It also builds ChangeRecords for cdcbridge.tablestore.records, whose classes it is handed by
 * configure_records(). Pure Python remains the reference and the fallback when this module is not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HEADER 0x75
#define TAG_ROW_PK 0x01
#define TAG_ROW_DATA 0x02
#define TAG_CELL 0x03
#define TAG_CELL_NAME 0x04
#define TAG_CELL_VALUE 0x05
#define TAG_CELL_TYPE 0x06
#define TAG_CELL_TIMESTAMP 0x07
#define TAG_DELETE_ROW_MARKER 0x08
#define TAG_ROW_CHECKSUM 0x09
#define TAG_CELL_CHECKSUM 0x0A
#define TAG_EXTENSION 0x0B
#define TAG_SEQ_INFO 0x0C
#define TAG_SEQ_INFO_EPOCH 0x0D
#define TAG_SEQ_INFO_TS 0x0E
#define TAG_SEQ_INFO_ROW_INDEX 0x0F
#define CELL_DELETE_ALL_VERSION 0x01
#define CELL_DELETE_ONE_VERSION 0x03
#define CELL_INCREMENT 0x04
#define VT_INTEGER 0x00
#define VT_DOUBLE 0x01
#define VT_BOOLEAN 0x02
#define VT_STRING 0x03
#define VT_BLOB 0x07
#define VT_INF_MIN 0x09
#define VT_INF_MAX 0x0A
#define VT_AUTO_INCREMENT 0x0B
#define SEQ_INFO_SIZE 19

/* Outcomes of parse_row besides 0 (success). */
#define ERR_SET (-1)       /* a PlainBufferError (or MemoryError) is set */
#define ERR_TRUNCATED (-2) /* the Python reader would raise IndexError/struct.error here */
#define ERR_UTF8 (-3)      /* a UnicodeDecodeError is set */

static uint8_t crc_table[256];

/* Set by configure(). */
static PyObject *PlainBufferError = NULL;
static PyObject *sentinel_inf_min = NULL;
static PyObject *sentinel_inf_max = NULL;
static PyObject *sentinel_auto_increment = NULL;
static PyObject *sentinel_type = NULL;

/* How to build one of the change-model classes. With `descriptors` (the slot member descriptors of a plain
 * slotted dataclass, in field order, vetted by records.py) the instance is allocated and its slots are set
 * directly, which skips the Python-level __init__ (most of the cost of a record); without, the class is called. */
#define MAX_FIELDS 8
typedef struct {
    PyObject *cls;
    PyObject *descriptors[MAX_FIELDS];
    Py_ssize_t n_fields;
    int direct;
} Layout;

/* Set by configure_records(). */
static Layout cell_layout, record_layout, sequence_layout;
static int records_configured = 0;
static PyObject *op_put = NULL, *op_delete_one = NULL, *op_delete_all = NULL, *op_increment = NULL;
static PyObject *actions[4] = {NULL, NULL, NULL, NULL};

static const char *TAG_NAMES[16] = {
    NULL,
    "TAG_ROW_PK",
    "TAG_ROW_DATA",
    "TAG_CELL",
    "TAG_CELL_NAME",
    "TAG_CELL_VALUE",
    "TAG_CELL_TYPE",
    "TAG_CELL_TIMESTAMP",
    "TAG_DELETE_ROW_MARKER",
    "TAG_ROW_CHECKSUM",
    "TAG_CELL_CHECKSUM",
    "TAG_EXTENSION",
    "TAG_SEQ_INFO",
    "TAG_SEQ_INFO_EPOCH",
    "TAG_SEQ_INFO_TS",
    "TAG_SEQ_INFO_ROW_INDEX",
};

typedef struct {
    char text[32];
} TagName;

static TagName tag_name(uint8_t tag) {
    TagName out;
    if (tag >= 1 && tag <= 15) {
        snprintf(out.text, sizeof(out.text), "%s", TAG_NAMES[tag]);
    } else {
        snprintf(out.text, sizeof(out.text), "unknown tag 0x%02x", tag);
    }
    return out;
}

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t rd_u64(const uint8_t *p) {
    return (uint64_t)rd_u32(p) | ((uint64_t)rd_u32(p + 4) << 32);
}

static int64_t rd_i64(const uint8_t *p) {
    uint64_t bits = rd_u64(p);
    int64_t value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static double rd_f64(const uint8_t *p) {
    uint64_t bits = rd_u64(p);
    double value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static uint8_t crc_update(uint8_t crc, const uint8_t *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        crc = crc_table[crc ^ p[i]];
    }
    return crc;
}

/* Raise PlainBufferError(reason, offset); reason is built like PyUnicode_FromFormat. Always returns ERR_SET. */
static int raise_error(Py_ssize_t offset, const char *format, ...) {
    va_list vargs;
    va_start(vargs, format);
    PyObject *reason = PyUnicode_FromFormatV(format, vargs);
    va_end(vargs);
    if (reason == NULL) {
        return ERR_SET;
    }
    /* A negative offset means "not about a byte position" (record-level checks), as None in Python. */
    PyObject *exc = offset < 0 ? PyObject_CallFunction(PlainBufferError, "NO", reason, Py_None)
                               : PyObject_CallFunction(PlainBufferError, "Nn", reason, offset);
    if (exc != NULL) {
        PyErr_SetObject(PlainBufferError, exc);
        Py_DECREF(exc);
    }
    return ERR_SET;
}

static int value_error(uint8_t vt, uint32_t vlen, Py_ssize_t offset, int in_pk) {
    char hex[8];
    snprintf(hex, sizeof(hex), "0x%02x", vt);
    int known = vt == VT_INTEGER || vt == VT_DOUBLE || vt == VT_BOOLEAN || vt == VT_STRING || vt == VT_BLOB ||
                vt == VT_INF_MIN || vt == VT_INF_MAX || vt == VT_AUTO_INCREMENT;
    if (!known) {
        return raise_error(offset, "unknown value type %s", hex);
    }
    if (!in_pk && (vt == VT_INF_MIN || vt == VT_INF_MAX || vt == VT_AUTO_INCREMENT)) {
        PyObject *sentinel = vt == VT_INF_MIN ? sentinel_inf_min : vt == VT_INF_MAX ? sentinel_inf_max
                                                                                      : sentinel_auto_increment;
        return raise_error(offset, "%R (value type %s) is only valid in a primary key", sentinel, hex);
    }
    return raise_error(offset, "value of type %s has inconsistent length %lu", hex, (unsigned long)vlen);
}

#define TRUNCATED()              \
    do {                         \
        status = ERR_TRUNCATED;  \
        goto fail;               \
    } while (0)
#define NEED(index_exclusive)            \
    do {                                 \
        if ((index_exclusive) > end) {   \
            TRUNCATED();                 \
        }                                \
    } while (0)
#define FAIL(expr)       \
    do {                 \
        status = (expr); \
        goto fail;       \
    } while (0)

/* TAG_EXTENSION at pos; mirrors reader._parse_extension. *sequence is a new reference or NULL (none found). */
static int parse_extension(const uint8_t *d, Py_ssize_t end, Py_ssize_t pos, PyObject **sequence,
                           Py_ssize_t *out_pos) {
    int status = 0;
    *sequence = NULL;
    NEED(pos + 5);
    Py_ssize_t ext_start = pos + 5;
    Py_ssize_t ext_end = ext_start + (Py_ssize_t)rd_u32(d + pos + 1);
    if (ext_end > end) {
        FAIL(raise_error(pos + 1, "extension runs past the end of the data (truncated)"));
    }
    Py_ssize_t sub = ext_start;
    while (sub < ext_end) {
        uint8_t sub_tag = d[sub];
        if (sub + 5 > ext_end) {
            FAIL(raise_error(sub, "extension sub-tag %s has no room for its length", tag_name(sub_tag).text));
        }
        Py_ssize_t payload = sub + 5;
        Py_ssize_t payload_end = payload + (Py_ssize_t)rd_u32(d + sub + 1);
        if (payload_end > ext_end) {
            FAIL(raise_error(sub, "extension sub-tag %s runs past the end of the extension", tag_name(sub_tag).text));
        }
        if (sub_tag == TAG_SEQ_INFO) {
            if (payload_end - payload < SEQ_INFO_SIZE) {
                FAIL(raise_error(sub, "TAG_SEQ_INFO is %zd bytes, expected %d", payload_end - payload, SEQ_INFO_SIZE));
            }
            static const int offsets[3] = {0, 5, 14};
            static const uint8_t wanted[3] = {TAG_SEQ_INFO_EPOCH, TAG_SEQ_INFO_TS, TAG_SEQ_INFO_ROW_INDEX};
            for (int i = 0; i < 3; i++) {
                uint8_t found = d[payload + offsets[i]];
                if (found != wanted[i]) {
                    FAIL(raise_error(payload + offsets[i], "expected %s, found %s", tag_name(wanted[i]).text,
                                     tag_name(found).text));
                }
            }
            PyObject *seq = Py_BuildValue("(kLk)", (unsigned long)rd_u32(d + payload + 1),
                                          (long long)rd_i64(d + payload + 6), (unsigned long)rd_u32(d + payload + 15));
            if (seq == NULL) {
                FAIL(ERR_SET);
            }
            Py_XSETREF(*sequence, seq);
        }
        sub = payload_end;
    }
    *out_pos = ext_end;
    return 0;
fail:
    Py_CLEAR(*sequence);
    return status;
}

/* The parsed parts of one row; all references owned. */
typedef struct {
    PyObject *primary_key; /* list of (name, value) */
    PyObject *cells;       /* list of (name, value, cell_type, timestamp) */
    int delete_marker;
    PyObject *sequence; /* tuple or NULL */
} Row;

static void row_clear(Row *row) {
    Py_CLEAR(row->primary_key);
    Py_CLEAR(row->cells);
    Py_CLEAR(row->sequence);
}

static PyObject *row_to_tuple(Row *row) {
    PyObject *sequence = row->sequence ? row->sequence : Py_None;
    return Py_BuildValue("(OOOO)", row->primary_key, row->cells, row->delete_marker ? Py_True : Py_False, sequence);
}

/* Mirrors reader.parse_row. On success fills *row and *out_pos and returns 0. */
static int parse_row(const uint8_t *d, Py_ssize_t end, Py_ssize_t pos, int check_crc, Row *row, Py_ssize_t *out_pos) {
    int status = 0;
    PyObject *name = NULL, *value = NULL, *item = NULL;
    row->primary_key = NULL;
    row->cells = NULL;
    row->sequence = NULL;
    row->delete_marker = 0;

    NEED(pos + 1);
    if (d[pos] != TAG_ROW_PK) {
        FAIL(raise_error(pos, "expected TAG_ROW_PK, found %s", tag_name(d[pos]).text));
    }
    pos += 1;
    row->primary_key = PyList_New(0);
    row->cells = PyList_New(0);
    if (row->primary_key == NULL || row->cells == NULL) {
        FAIL(ERR_SET);
    }
    int in_pk = 1;
    uint8_t row_crc = 0;
    uint8_t tag;
    for (;;) {
        NEED(pos + 1);
        tag = d[pos];
        if (tag != TAG_CELL) {
            if (tag == TAG_ROW_DATA && in_pk) {
                in_pk = 0;
                pos += 1;
                continue;
            }
            break;
        }
        Py_ssize_t cell_start = pos;
        NEED(pos + 2);
        if (d[pos + 1] != TAG_CELL_NAME) {
            FAIL(raise_error(pos + 1, "expected TAG_CELL_NAME after TAG_CELL, found %s", tag_name(d[pos + 1]).text));
        }
        NEED(pos + 6);
        Py_ssize_t name_start = pos + 6;
        Py_ssize_t name_end = name_start + (Py_ssize_t)rd_u32(d + pos + 2);
        if (name_end > end) {
            FAIL(raise_error(pos + 2, "cell name runs past the end of the data (truncated)"));
        }
        name = PyUnicode_DecodeUTF8((const char *)d + name_start, name_end - name_start, NULL);
        if (name == NULL) {
            FAIL(PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? ERR_UTF8 : ERR_SET);
        }
        pos = name_end;
        NEED(pos + 1);
        tag = d[pos];
        Py_ssize_t value_start = 0;
        uint32_t vlen = 0;
        if (tag == TAG_CELL_VALUE) {
            NEED(pos + 6);
            vlen = rd_u32(d + pos + 1);
            uint8_t vt = d[pos + 5];
            value_start = pos + 5;
            pos = value_start + (Py_ssize_t)vlen;
            if (pos > end) {
                FAIL(raise_error(value_start - 4, "cell value runs past the end of the data (truncated)"));
            }
            if (vt == VT_INTEGER && vlen == 9) {
                value = PyLong_FromLongLong((long long)rd_i64(d + value_start + 1));
            } else if ((vt == VT_STRING || vt == VT_BLOB) && vlen >= 5 && rd_u32(d + value_start + 1) == vlen - 5) {
                if (vt == VT_STRING) {
                    value = PyUnicode_DecodeUTF8((const char *)d + value_start + 5, (Py_ssize_t)vlen - 5, NULL);
                    if (value == NULL) {
                        FAIL(PyErr_ExceptionMatches(PyExc_UnicodeDecodeError) ? ERR_UTF8 : ERR_SET);
                    }
                } else {
                    value = PyBytes_FromStringAndSize((const char *)d + value_start + 5, (Py_ssize_t)vlen - 5);
                }
            } else if (vt == VT_DOUBLE && vlen == 9) {
                value = PyFloat_FromDouble(rd_f64(d + value_start + 1));
            } else if (vt == VT_BOOLEAN && vlen == 2) {
                uint8_t flag = d[value_start + 1];
                if (flag > 1) {
                    FAIL(raise_error(value_start + 1, "BOOLEAN value byte is %d, expected 0 or 1", (int)flag));
                }
                value = flag ? Py_True : Py_False;
                Py_INCREF(value);
            } else if ((vt == VT_INF_MIN || vt == VT_INF_MAX || vt == VT_AUTO_INCREMENT) && vlen == 1 && in_pk) {
                value = vt == VT_INF_MIN ? sentinel_inf_min : vt == VT_INF_MAX ? sentinel_inf_max
                                                                                : sentinel_auto_increment;
                Py_INCREF(value);
            } else {
                FAIL(value_error(vt, vlen, value_start, in_pk));
            }
            if (value == NULL) {
                FAIL(ERR_SET);
            }
            NEED(pos + 1);
            tag = d[pos];
        }
        int cell_type = -1;
        if (tag == TAG_CELL_TYPE) {
            NEED(pos + 2);
            cell_type = d[pos + 1];
            if (cell_type != CELL_DELETE_ALL_VERSION && cell_type != CELL_DELETE_ONE_VERSION &&
                cell_type != CELL_INCREMENT) {
                char hex[8];
                snprintf(hex, sizeof(hex), "0x%02x", cell_type);
                FAIL(raise_error(pos + 1, "unknown cell type %s in cell %R", hex, name));
            }
            pos += 2;
            NEED(pos + 1);
            tag = d[pos];
        }
        int has_timestamp = 0;
        int64_t timestamp = 0;
        if (tag == TAG_CELL_TIMESTAMP) {
            NEED(pos + 9);
            timestamp = rd_i64(d + pos + 1);
            has_timestamp = 1;
            pos += 9;
            NEED(pos + 1);
            tag = d[pos];
        }
        if (tag != TAG_CELL_CHECKSUM) {
            FAIL(raise_error(pos, "expected TAG_CELL_CHECKSUM in cell %R, found %s", name, tag_name(tag).text));
        }
        NEED(pos + 2);
        if (check_crc) {
            uint8_t crc = crc_update(0, d + name_start, name_end - name_start);
            if (value_start) {
                crc = crc_update(crc, d + value_start, (Py_ssize_t)vlen);
            }
            if (has_timestamp) {
                crc = crc_update(crc, d + pos - 8, 8);
            }
            if (cell_type >= 0) {
                crc = crc_table[crc ^ (uint8_t)cell_type];
            }
            uint8_t stored = d[pos + 1];
            if (crc != stored) {
                char hex[64];
                snprintf(hex, sizeof(hex), "expected 0x%02x (stored), actual 0x%02x (computed)", stored, crc);
                FAIL(raise_error(pos + 1, "cell checksum mismatch in cell %R: %s", name, hex));
            }
            row_crc = crc_table[row_crc ^ crc];
        }
        pos += 2;
        if (in_pk) {
            if (value == NULL || cell_type >= 0 || has_timestamp) {
                FAIL(raise_error(cell_start, "primary-key cell %R must have a value and no cell type or timestamp",
                                 name));
            }
            item = PyTuple_Pack(2, name, value);
            if (item == NULL || PyList_Append(row->primary_key, item) < 0) {
                FAIL(ERR_SET);
            }
        } else {
            PyObject *type_obj = cell_type >= 0 ? PyLong_FromLong(cell_type) : Py_NewRef(Py_None);
            PyObject *ts_obj = has_timestamp ? PyLong_FromLongLong((long long)timestamp) : Py_NewRef(Py_None);
            if (type_obj == NULL || ts_obj == NULL) {
                Py_XDECREF(type_obj);
                Py_XDECREF(ts_obj);
                FAIL(ERR_SET);
            }
            item = PyTuple_New(4);
            if (item == NULL) {
                Py_DECREF(type_obj);
                Py_DECREF(ts_obj);
                FAIL(ERR_SET);
            }
            PyTuple_SET_ITEM(item, 0, Py_NewRef(name));
            PyTuple_SET_ITEM(item, 1, value ? Py_NewRef(value) : Py_NewRef(Py_None));
            PyTuple_SET_ITEM(item, 2, type_obj);
            PyTuple_SET_ITEM(item, 3, ts_obj);
            if (PyList_Append(row->cells, item) < 0) {
                FAIL(ERR_SET);
            }
        }
        Py_CLEAR(item);
        Py_CLEAR(name);
        Py_CLEAR(value);
    }

    row->delete_marker = tag == TAG_DELETE_ROW_MARKER;
    if (row->delete_marker) {
        pos += 1;
        NEED(pos + 1);
        tag = d[pos];
    }
    if (tag == TAG_EXTENSION) {
        status = parse_extension(d, end, pos, &row->sequence, &pos);
        if (status != 0) {
            goto fail;
        }
        NEED(pos + 1);
        tag = d[pos];
    }
    if (tag != TAG_ROW_CHECKSUM) {
        FAIL(raise_error(pos, "expected TAG_ROW_CHECKSUM, found %s", tag_name(tag).text));
    }
    NEED(pos + 2);
    uint8_t stored = d[pos + 1];
    if (check_crc) {
        row_crc = crc_table[row_crc ^ (uint8_t)row->delete_marker];
        if (row_crc != stored) {
            char hex[64];
            snprintf(hex, sizeof(hex), "expected 0x%02x (stored), actual 0x%02x (computed)", stored, row_crc);
            FAIL(raise_error(pos + 1, "row checksum mismatch: %s", hex));
        }
    }
    *out_pos = pos + 2;
    return 0;
fail:
    Py_XDECREF(name);
    Py_XDECREF(value);
    Py_XDECREF(item);
    row_clear(row);
    return status;
}

/* Turn ERR_TRUNCATED / ERR_UTF8 into the PlainBufferError the Python reader raises for them. */
static void translate_failure(int status, Py_ssize_t length, Py_ssize_t row_start) {
    if (status == ERR_TRUNCATED) {
        raise_error(length, "data ends inside the row that starts at offset %zd (truncated)", row_start);
    } else if (status == ERR_UTF8) {
        PyObject *type, *exc, *traceback;
        PyErr_Fetch(&type, &exc, &traceback);
        PyErr_NormalizeException(&type, &exc, &traceback);
        PyObject *reason = exc ? PyUnicodeDecodeError_GetReason(exc) : NULL;
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(traceback);
        if (reason == NULL) {
            return;
        }
        raise_error(row_start, "a cell name or STRING value in the row at offset %zd is not valid UTF-8 (%U)", row_start,
                    reason);
        Py_DECREF(reason);
    }
}

static int check_header(const uint8_t *d, Py_ssize_t length) {
    if (length < 4) {
        return raise_error(0, "data is %zd bytes, too short for the 4-byte header (truncated)", length);
    }
    uint32_t header = rd_u32(d);
    if (header != HEADER) {
        char hex[64];
        snprintf(hex, sizeof(hex), "bad header 0x%08lx, expected 0x%08x", (unsigned long)header, HEADER);
        return raise_error(0, "%s", hex);
    }
    return 0;
}

static int ensure_configured(void) {
    if (PlainBufferError == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure() was not called (import via the reader module)");
        return -1;
    }
    return 0;
}

/* Parse exactly one row; fills *row. Returns 0 or -1 (error set). */
static int single_row(const uint8_t *d, Py_ssize_t length, int check_crc, Row *row) {
    if (check_header(d, length) != 0) {
        return -1;
    }
    Py_ssize_t pos = 0;
    int status = parse_row(d, length, 4, check_crc, row, &pos);
    if (status != 0) {
        translate_failure(status, length, 4);
        return -1;
    }
    if (pos != length) {
        raise_error(pos, "expected exactly one row, but %zd more bytes follow it", length - pos);
        row_clear(row);
        return -1;
    }
    return 0;
}

static PyObject *py_parse_single_row(PyObject *module, PyObject *args) {
    Py_buffer view;
    int check_crc = 1;
    if (ensure_configured() < 0 || !PyArg_ParseTuple(args, "y*|p:parse_single_row", &view, &check_crc)) {
        return NULL;
    }
    Row row;
    PyObject *result = NULL;
    if (single_row((const uint8_t *)view.buf, view.len, check_crc, &row) == 0) {
        result = row_to_tuple(&row);
        row_clear(&row);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_parse_rows(PyObject *module, PyObject *args) {
    Py_buffer view;
    int check_crc = 1;
    if (ensure_configured() < 0 || !PyArg_ParseTuple(args, "y*|p:parse_rows", &view, &check_crc)) {
        return NULL;
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t length = view.len;
    PyObject *rows = PyList_New(0);
    if (rows == NULL) {
        goto fail;
    }
    if (length == 0) {
        PyBuffer_Release(&view);
        return rows;
    }
    if (check_header(d, length) != 0) {
        goto fail;
    }
    Py_ssize_t pos = 4;
    while (pos < length) {
        Row row;
        Py_ssize_t start = pos;
        int status = parse_row(d, length, pos, check_crc, &row, &pos);
        if (status != 0) {
            translate_failure(status, length, start);
            goto fail;
        }
        PyObject *item = row_to_tuple(&row);
        row_clear(&row);
        if (item == NULL || PyList_Append(rows, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
    }
    PyBuffer_Release(&view);
    return rows;
fail:
    Py_XDECREF(rows);
    PyBuffer_Release(&view);
    return NULL;
}

/* Stream records: mirrors records.decode_stream_record (without the error context, which the caller adds). */

/* An instance of layout->cls from its field values in order; n_values may omit trailing defaulted fields
 * only when calling the class (direct construction needs them all). */
static PyObject *construct(Layout *layout, PyObject *const *values, Py_ssize_t n_values) {
    if (!layout->direct) {
        return PyObject_Vectorcall(layout->cls, values, n_values, NULL);
    }
    PyTypeObject *type = (PyTypeObject *)layout->cls;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < layout->n_fields; i++) {
        PyObject *descriptor = layout->descriptors[i];
        if (Py_TYPE(descriptor)->tp_descr_set(descriptor, obj, values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *make_cell(PyObject *name, PyObject *op, PyObject *value, PyObject *timestamp) {
    PyObject *args[4] = {name, op, value, timestamp};
    return construct(&cell_layout, args, 4);
}

static PyObject *py_decode_stream_record(PyObject *module, PyObject *args) {
    Py_buffer view;
    PyObject *action_obj, *table, *shard_id;
    int check_crc = 1;
    if (ensure_configured() < 0) {
        return NULL;
    }
    if (!records_configured) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure_records() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*OOOp:decode_stream_record", &view, &action_obj, &table, &shard_id, &check_crc)) {
        return NULL;
    }
    long action_type = PyLong_Check(action_obj) ? PyLong_AsLong(action_obj) : -1;
    if (action_type == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* out of range for a C long: simply not a known action */
    }
    Row row = {NULL, NULL, 0, NULL};
    PyObject *cells = NULL, *sequence = NULL, *result = NULL;
    if (action_type < 1 || action_type > 3) {
        raise_error(-1, "unknown stream action type %R; expected 1 (PUT_ROW), 2 or 3", action_obj);
        goto done;
    }
    if (single_row((const uint8_t *)view.buf, view.len, check_crc, &row) != 0) {
        goto done;
    }
    if (row.sequence == NULL) {
        raise_error(-1, "stream record has no sequence extension (TAG_EXTENSION/TAG_SEQ_INFO)");
        goto done;
    }
    Py_ssize_t pk_count = PyList_GET_SIZE(row.primary_key);
    for (Py_ssize_t i = 0; i < pk_count; i++) {
        PyObject *pair = PyList_GET_ITEM(row.primary_key, i);
        PyObject *pk_value = PyTuple_GET_ITEM(pair, 1);
        if ((PyObject *)Py_TYPE(pk_value) == sentinel_type) {
            raise_error(-1, "primary-key column %R of a stream record holds %R", PyTuple_GET_ITEM(pair, 0), pk_value);
            goto done;
        }
    }
    Py_ssize_t count = PyList_GET_SIZE(row.cells);
    cells = PyList_New(count);
    if (cells == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *raw = PyList_GET_ITEM(row.cells, i);
        PyObject *name = PyTuple_GET_ITEM(raw, 0);
        PyObject *value = PyTuple_GET_ITEM(raw, 1);
        PyObject *type_obj = PyTuple_GET_ITEM(raw, 2);
        PyObject *timestamp = PyTuple_GET_ITEM(raw, 3);
        PyObject *cell = NULL;
        if (type_obj == Py_None) {
            if (value == Py_None) {
                raise_error(-1, "put cell %R has no value", name);
                goto done;
            }
            cell = make_cell(name, op_put, value, timestamp);
        } else {
            long cell_type = PyLong_AsLong(type_obj);
            if (cell_type == CELL_DELETE_ONE_VERSION) {
                if (timestamp == Py_None) {
                    raise_error(-1, "DELETE_ONE_VERSION cell %R has no timestamp (the version to delete)", name);
                    goto done;
                }
                cell = make_cell(name, op_delete_one, Py_None, timestamp);
            } else if (cell_type == CELL_DELETE_ALL_VERSION) {
                cell = make_cell(name, op_delete_all, Py_None, timestamp);
            } else {
                /* The reader admits only the three known cell types, so this is CELL_INCREMENT. */
                if (!PyLong_CheckExact(value)) {
                    raise_error(-1, "INCREMENT cell %R must carry an INTEGER delta, found %R", name, value);
                    goto done;
                }
                cell = make_cell(name, op_increment, value, timestamp);
            }
        }
        if (cell == NULL) {
            goto done;
        }
        PyList_SET_ITEM(cells, i, cell);
    }
    sequence = construct(&sequence_layout, &PyTuple_GET_ITEM(row.sequence, 0), 3);
    if (sequence == NULL) {
        goto done;
    }
    if (record_layout.direct) {
        PyObject *extra = PyDict_New(); /* ChangeRecord.extra's default_factory */
        if (extra == NULL) {
            goto done;
        }
        PyObject *record_args[7] = {table, actions[action_type], row.primary_key, cells, sequence, shard_id, extra};
        result = construct(&record_layout, record_args, 7);
        Py_DECREF(extra);
    } else {
        PyObject *record_args[6] = {table, actions[action_type], row.primary_key, cells, sequence, shard_id};
        result = construct(&record_layout, record_args, 6);
    }
done:
    Py_XDECREF(cells);
    Py_XDECREF(sequence);
    row_clear(&row);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_configure(PyObject *module, PyObject *args) {
    PyObject *error, *inf_min, *inf_max, *auto_increment;
    if (!PyArg_ParseTuple(args, "OOOO:configure", &error, &inf_min, &inf_max, &auto_increment)) {
        return NULL;
    }
    Py_XSETREF(PlainBufferError, Py_NewRef(error));
    Py_XSETREF(sentinel_inf_min, Py_NewRef(inf_min));
    Py_XSETREF(sentinel_inf_max, Py_NewRef(inf_max));
    Py_XSETREF(sentinel_auto_increment, Py_NewRef(auto_increment));
    Py_XSETREF(sentinel_type, Py_NewRef((PyObject *)Py_TYPE(inf_min)));
    Py_RETURN_NONE;
}

static void layout_clear(Layout *layout) {
    Py_CLEAR(layout->cls);
    for (Py_ssize_t i = 0; i < MAX_FIELDS; i++) {
        Py_CLEAR(layout->descriptors[i]);
    }
    layout->n_fields = 0;
    layout->direct = 0;
}

/* `spec` is (cls, descriptors) with descriptors a tuple of member descriptors, or None to call the class. */
static int layout_set(Layout *layout, PyObject *spec, Py_ssize_t n_fields) {
    PyObject *cls, *descriptors;
    if (!PyArg_ParseTuple(spec, "OO:layout", &cls, &descriptors)) {
        return -1;
    }
    if (descriptors != Py_None) {
        if (!PyType_Check(cls) || !PyTuple_Check(descriptors) || PyTuple_GET_SIZE(descriptors) != n_fields) {
            PyErr_Format(PyExc_ValueError, "layout of %R needs a class and %zd slot descriptors", cls, n_fields);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n_fields; i++) {
            PyObject *descriptor = PyTuple_GET_ITEM(descriptors, i);
            if (Py_TYPE(descriptor)->tp_descr_set == NULL) {
                PyErr_Format(PyExc_ValueError, "%R is not a settable slot descriptor", descriptor);
                return -1;
            }
        }
    }
    layout_clear(layout);
    layout->cls = Py_NewRef(cls);
    if (descriptors != Py_None) {
        for (Py_ssize_t i = 0; i < n_fields; i++) {
            layout->descriptors[i] = Py_NewRef(PyTuple_GET_ITEM(descriptors, i));
        }
        layout->n_fields = n_fields;
        layout->direct = 1;
    }
    return 0;
}

static PyObject *py_configure_records(PyObject *module, PyObject *args) {
    PyObject *cell, *record, *sequence, *put, *delete_one, *delete_all, *increment, *put_action, *update_action,
        *delete_action;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOOOO:configure_records", &PyTuple_Type, &cell, &PyTuple_Type, &record,
                          &PyTuple_Type, &sequence, &put, &delete_one, &delete_all, &increment, &put_action,
                          &update_action, &delete_action)) {
        return NULL;
    }
    if (layout_set(&cell_layout, cell, 4) < 0 || layout_set(&record_layout, record, 7) < 0 ||
        layout_set(&sequence_layout, sequence, 3) < 0) {
        records_configured = 0;
        return NULL;
    }
    Py_XSETREF(op_put, Py_NewRef(put));
    Py_XSETREF(op_delete_one, Py_NewRef(delete_one));
    Py_XSETREF(op_delete_all, Py_NewRef(delete_all));
    Py_XSETREF(op_increment, Py_NewRef(increment));
    Py_XSETREF(actions[1], Py_NewRef(put_action));
    Py_XSETREF(actions[2], Py_NewRef(update_action));
    Py_XSETREF(actions[3], Py_NewRef(delete_action));
    records_configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(PlainBufferError, INF_MIN, INF_MAX, AUTO_INCREMENT): objects the parser returns and raises."},
    {"configure_records", py_configure_records, METH_VARARGS,
     "configure_records((Cell, descriptors|None), (ChangeRecord, ...), (Sequence, ...), 4 CellOps, 3 RecordActions)."},
    {"parse_rows", py_parse_rows, METH_VARARGS, "parse_rows(data, check_crc=True) -> list of raw rows."},
    {"parse_single_row", py_parse_single_row, METH_VARARGS, "parse_single_row(data, check_crc=True) -> raw row."},
    {"decode_stream_record", py_decode_stream_record, METH_VARARGS,
     "decode_stream_record(data, action_type, table, shard_id, check_crc) -> ChangeRecord."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_speedups", "C accelerator for the PlainBuffer reader.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    for (int byte = 0; byte < 256; byte++) {
        uint8_t crc = (uint8_t)byte;
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc & 0x80) ? (uint8_t)((crc << 1) ^ 0x07) : (uint8_t)(crc << 1);
        }
        crc_table[byte] = crc;
    }
    return PyModule_Create(&module_def);
}
