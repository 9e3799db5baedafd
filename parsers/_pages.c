/* The cells of SQLite table leaf pages decoded into integer columns, one pass in C.
 *
 * The compiled half of parsers/sqlite_pages.py (which documents the file format it follows and
 * decodes the same pages in numpy where this module is not built). One call decodes a chunk of
 * leaf pages: for each row of the wanted columns its integer value and value kind, where a
 * text column's text lies and the first row of the chunk holding the same text (texts repeat:
 * each distinct one is then decoded once), and the rowids of the rows that spill onto overflow
 * pages. It
 * writes into the caller's arrays and holds no Python object while it runs (the GIL is
 * released), so threads decode chunks side by side.
 *
 * Every read is bounded by the record's own page: a damaged cell is refused with the reason,
 * never read past.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What Python sees in sqlite_pages: the value kinds and the leaf page type. */
enum { KIND_INTEGER = 0, KIND_NULL = 1, KIND_OTHER = 2, KIND_TEXT = 3 };
#define LEAF_TABLE_PAGE 0x0D
/* A table leaf's cell holds at most usable - 35 payload bytes on its page (file format 1.6). */
#define LOCAL_PAYLOAD_RESERVE 35

/* One SQLite varint at p, read no further than end: its length in bytes (0 when it runs past
 * end) and its value in *value. */
static int read_varint(const uint8_t *p, const uint8_t *end, uint64_t *value)
{
    uint64_t acc = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end)
            return 0;
        acc = (acc << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *value = acc;
            return i + 1;
        }
    }
    if (p + 8 >= end)
        return 0;
    *value = (acc << 8) | p[8]; /* the ninth byte gives all eight bits */
    return 9;
}

/* Content size in bytes of a serial type. */
static uint64_t type_size(uint64_t type)
{
    static const uint8_t sizes[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};
    return type >= 12 ? (type - 12) / 2 : sizes[type];
}

/* Value kind of a serial type. */
static int8_t type_kind(uint64_t type)
{
    if (type == 0)
        return KIND_NULL;
    if ((type >= 1 && type <= 6) || type == 8 || type == 9)
        return KIND_INTEGER;
    if (type >= 13 && type % 2 == 1)
        return KIND_TEXT;
    return KIND_OTHER;
}

/* The integer of a serial type at p (big-endian, sign-extended; 0 and 1 for the constants 8
 * and 9; 0 for a type that holds no integer). */
static int64_t type_integer(uint64_t type, const uint8_t *p)
{
    if (type == 9)
        return 1;
    if (type < 1 || type > 6)
        return 0;
    uint64_t size = type_size(type);
    uint64_t acc = 0;
    for (uint64_t i = 0; i < size; i++)
        acc = (acc << 8) | p[i];
    int shift = (int)(64 - 8 * size);
    return shift == 64 ? 0 : (int64_t)(acc << shift) >> shift;
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* The caller's arrays, one per wanted column (text positions only for text columns). */
typedef struct {
    Py_ssize_t columns; /* columns read from each record: the largest wanted one, plus one */
    Py_ssize_t wanted;
    int *slot_of;       /* per column: its place among the wanted ones, or -1 */
    int64_t **values;
    int8_t **kinds;
    int64_t **text_pos;   /* NULL for a column whose texts are not asked for */
    int64_t **text_size;
    int64_t **text_first; /* the first row holding the same text, -1 for a row of no text */
    Py_ssize_t capacity;  /* rows each output array holds */
    int64_t *spilled;
} Outputs;

/* Decode ``count`` pages of ``page_size`` bytes at ``buf``; the row and spill counts in *rows
 * and *spills; NULL, or the reason the pages cannot be decoded. */
static const char *decode_pages(const uint8_t *buf, Py_ssize_t count, Py_ssize_t page_size,
                                Py_ssize_t usable, const Outputs *out, Py_ssize_t *rows,
                                Py_ssize_t *spills)
{
    Py_ssize_t row = 0, spilled = 0;
    for (Py_ssize_t page = 0; page < count; page++) {
        const uint8_t *base = buf + page * page_size, *page_end = base + page_size;
        if (base[0] != LEAF_TABLE_PAGE)
            return "a leaf of the table is not a table leaf page";
        uint16_t cells = be16(base + 3);
        if (8 + 2 * (Py_ssize_t)cells > page_size)
            return "a cell pointer lies outside its page";
        for (uint16_t cell = 0; cell < cells; cell++) {
            uint16_t offset = be16(base + 8 + 2 * cell);
            if (offset < 8 || offset >= page_size)
                return "a cell pointer lies outside its page";
            const uint8_t *p = base + offset;
            uint64_t payload, rowid, header_len;
            int n1 = read_varint(p, page_end, &payload);
            int n2 = n1 ? read_varint(p + n1, page_end, &rowid) : 0;
            if (!n2)
                return "a record runs past its page";
            if (payload > (uint64_t)(usable - LOCAL_PAYLOAD_RESERVE)) {
                if (spilled >= out->capacity)
                    return "more cells than the pages count";
                out->spilled[spilled++] = (int64_t)rowid;
                continue;
            }
            const uint8_t *start = p + n1 + n2;
            if (payload > (uint64_t)(page_end - start))
                return "a record runs past its page";
            const uint8_t *record_end = start + payload;
            int n3 = read_varint(start, record_end, &header_len);
            if (!n3 || header_len < (uint64_t)n3 || header_len > payload)
                return "a record runs past its page";
            if (row >= out->capacity)
                return "more cells than the pages count";
            const uint8_t *type_at = start + n3, *header_end = start + header_len;
            const uint8_t *body = header_end;
            for (Py_ssize_t column = 0; column < out->columns; column++) {
                uint64_t type = 0; /* a column the record lacks is NULL */
                if (type_at < header_end) {
                    int n = read_varint(type_at, header_end, &type);
                    if (!n)
                        return "a record runs past its page";
                    type_at += n;
                }
                uint64_t size = type_size(type);
                if (size > (uint64_t)(record_end - body))
                    return "a record runs past its page";
                int slot = out->slot_of[column];
                if (slot >= 0) {
                    out->kinds[slot][row] = type_kind(type);
                    out->values[slot][row] = type_integer(type, body);
                    if (out->text_pos[slot]) {
                        out->text_pos[slot][row] = body - buf;
                        out->text_size[slot][row] = (int64_t)size;
                    }
                }
                body += size;
            }
            row++;
        }
    }
    *rows = row;
    *spills = spilled;
    return NULL;
}

/* FNV-1a over ``size`` bytes at p: the hash that finds rows of the same text. */
static uint64_t fnv1a(const uint8_t *p, int64_t size)
{
    uint64_t hash = 14695981039346656037ULL;
    for (int64_t i = 0; i < size; i++)
        hash = (hash ^ p[i]) * 1099511628211ULL;
    return hash;
}

/* For each of ``rows`` rows whose kind is text, the first row with the same bytes (an open
 * addressing table of row numbers, every match checked byte by byte); -1 for the others. 0,
 * or -1 when the table's memory cannot be had. */
static int first_of_same(const uint8_t *buf, Py_ssize_t rows, const int8_t *kinds,
                         const int64_t *pos, const int64_t *size, int64_t *first)
{
    size_t slots = 16;
    while (slots < 2 * (size_t)rows)
        slots *= 2;
    int64_t *table = malloc(slots * sizeof *table);
    if (!table)
        return -1;
    for (size_t i = 0; i < slots; i++)
        table[i] = -1;
    for (Py_ssize_t row = 0; row < rows; row++) {
        first[row] = -1;
        if (kinds[row] != KIND_TEXT)
            continue;
        size_t slot = fnv1a(buf + pos[row], size[row]) & (slots - 1);
        for (;; slot = (slot + 1) & (slots - 1)) {
            int64_t held = table[slot];
            if (held < 0) {
                table[slot] = row;
                first[row] = row;
                break;
            }
            if (size[held] == size[row] &&
                memcmp(buf + pos[held], buf + pos[row], (size_t)size[row]) == 0) {
                first[row] = held;
                break;
            }
        }
    }
    free(table);
    return 0;
}

/* Views of the arrays a call writes into, released together. */
typedef struct {
    Py_buffer views[512];
    int held;
} Views;

static void release_views(Views *views)
{
    for (int i = 0; i < views->held; i++)
        PyBuffer_Release(&views->views[i]);
    views->held = 0;
}

/* A writable view of ``array`` holding ``capacity`` items of ``itemsize`` bytes (NULL for
 * None where ``optional``); NULL with an exception set on failure. */
static void *writable(Views *views, PyObject *array, Py_ssize_t itemsize, Py_ssize_t capacity,
                      int optional, int *failed)
{
    if (optional && array == Py_None)
        return NULL;
    if (views->held >= (int)(sizeof views->views / sizeof views->views[0])) {
        PyErr_SetString(PyExc_ValueError, "too many columns");
        *failed = 1;
        return NULL;
    }
    Py_buffer *view = &views->views[views->held];
    if (PyObject_GetBuffer(array, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        *failed = 1;
        return NULL;
    }
    views->held++;
    if (view->len < itemsize * capacity) {
        PyErr_SetString(PyExc_ValueError, "an output array is too small");
        *failed = 1;
        return NULL;
    }
    return view->buf;
}

PyDoc_STRVAR(decode_doc,
"decode(pages, count, page_size, usable, wanted, values, kinds, text_pos, text_size,\n"
"       text_first, spilled)\n"
"--\n\n"
"Decode ``count`` table leaf pages of ``page_size`` bytes (``usable`` of them used) held one\n"
"after another in the buffer ``pages``: for the columns ``wanted`` (0-based positions, a\n"
"tuple), each row's integer value (int64) and value kind (int8) into the arrays ``values``\n"
"and ``kinds`` (tuples, one per wanted column); for a wanted column whose ``text_pos`` and\n"
"``text_size`` are arrays, not None, where each row's content lies in ``pages`` and its size\n"
"(int64), and into ``text_first`` the first row holding the same text (-1 for a row of no\n"
"text); and the rowids of rows that spill onto overflow pages into ``spilled``. Every array\n"
"holds as many rows as the pages have cells. Returns (rows, spilled rows); ValueError names\n"
"what is damaged.");

static PyObject *decode(PyObject *self, PyObject *args)
{
    PyObject *pages, *wanted, *values, *kinds, *text_pos, *text_size, *text_first, *spilled;
    Py_ssize_t count, page_size, usable;
    if (!PyArg_ParseTuple(args, "OnnnO!O!O!O!O!O!O", &pages, &count, &page_size, &usable,
                          &PyTuple_Type, &wanted, &PyTuple_Type, &values, &PyTuple_Type, &kinds,
                          &PyTuple_Type, &text_pos, &PyTuple_Type, &text_size, &PyTuple_Type,
                          &text_first, &spilled))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(wanted);
    if (n < 1 || PyTuple_GET_SIZE(values) != n || PyTuple_GET_SIZE(kinds) != n ||
        PyTuple_GET_SIZE(text_pos) != n || PyTuple_GET_SIZE(text_size) != n ||
        PyTuple_GET_SIZE(text_first) != n || count < 0 ||
        page_size < 512 || usable < 480 || usable > page_size) {
        PyErr_SetString(PyExc_ValueError, "inconsistent arguments");
        return NULL;
    }
    Py_buffer source;
    if (PyObject_GetBuffer(pages, &source, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Views views = {.held = 0};
    Outputs out = {.wanted = n, .columns = 0};
    PyObject *result = NULL;
    const char *damage = NULL;
    int failed = 0;
    Py_ssize_t rows = 0, spills = 0;
    out.values = calloc((size_t)n, sizeof *out.values);
    out.kinds = calloc((size_t)n, sizeof *out.kinds);
    out.text_pos = calloc((size_t)n, sizeof *out.text_pos);
    out.text_size = calloc((size_t)n, sizeof *out.text_size);
    out.text_first = calloc((size_t)n, sizeof *out.text_first);
    if (!out.values || !out.kinds || !out.text_pos || !out.text_size || !out.text_first) {
        PyErr_NoMemory();
        goto done;
    }
    if (source.len < count * page_size) {
        PyErr_SetString(PyExc_ValueError, "the buffer holds fewer pages than asked");
        goto done;
    }
    /* Every page holds at most (page_size - 8) / 2 cell pointers: the arrays hold the cells
     * the page headers count, checked as rows are written. */
    Py_ssize_t cells = 0;
    for (Py_ssize_t page = 0; page < count; page++)
        cells += be16((const uint8_t *)source.buf + page * page_size + 3);
    out.capacity = cells;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t column = PyLong_AsSsize_t(PyTuple_GET_ITEM(wanted, i));
        if (column < 0 || column >= 32768) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "a wanted column lies outside a table");
            goto done;
        }
        if (column + 1 > out.columns)
            out.columns = column + 1;
    }
    out.slot_of = malloc((size_t)out.columns * sizeof *out.slot_of);
    if (!out.slot_of) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t column = 0; column < out.columns; column++)
        out.slot_of[column] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        out.slot_of[PyLong_AsSsize_t(PyTuple_GET_ITEM(wanted, i))] = (int)i;
        out.values[i] = writable(&views, PyTuple_GET_ITEM(values, i), 8, cells, 0, &failed);
        if (!failed)
            out.kinds[i] = writable(&views, PyTuple_GET_ITEM(kinds, i), 1, cells, 0, &failed);
        if (!failed)
            out.text_pos[i] = writable(&views, PyTuple_GET_ITEM(text_pos, i), 8, cells, 1,
                                       &failed);
        if (!failed)
            out.text_size[i] = writable(&views, PyTuple_GET_ITEM(text_size, i), 8, cells, 1,
                                        &failed);
        if (!failed)
            out.text_first[i] = writable(&views, PyTuple_GET_ITEM(text_first, i), 8, cells, 1,
                                         &failed);
        if (!failed && ((out.text_pos[i] == NULL) != (out.text_size[i] == NULL) ||
                        (out.text_pos[i] == NULL) != (out.text_first[i] == NULL))) {
            PyErr_SetString(PyExc_ValueError,
                            "a text column needs its position, size and first row");
            failed = 1;
        }
        if (failed)
            goto done;
    }
    out.spilled = writable(&views, spilled, 8, cells, 0, &failed);
    if (failed)
        goto done;
    int no_memory = 0;
    Py_BEGIN_ALLOW_THREADS
    damage = decode_pages(source.buf, count, page_size, usable, &out, &rows, &spills);
    for (Py_ssize_t i = 0; !damage && !no_memory && i < n; i++)
        if (out.text_first[i])
            no_memory = first_of_same(source.buf, rows, out.kinds[i], out.text_pos[i],
                                      out.text_size[i], out.text_first[i]) < 0;
    Py_END_ALLOW_THREADS
    if (damage)
        PyErr_SetString(PyExc_ValueError, damage);
    else if (no_memory)
        PyErr_NoMemory();
    else
        result = Py_BuildValue("nn", rows, spills);
done:
    release_views(&views);
    PyBuffer_Release(&source);
    free(out.slot_of);
    free(out.values);
    free(out.kinds);
    free(out.text_pos);
    free(out.text_size);
    free(out.text_first);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pages",
    "SQLite table leaf pages decoded into integer columns (see parsers/sqlite_pages.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__pages(void) { return PyModule_Create(&module); }
