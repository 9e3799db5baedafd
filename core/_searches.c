/* Passes over ascending int64 columns in C: the compiled half of core/searches.py.
 *
 * search() places each of a column of keys in an ascending column, as numpy.searchsorted does,
 * by galloping from the place of the key before it: keys that come in rising order (times of
 * one table asked about another's, block after block) cost a few reads each, near the last
 * place, instead of a binary search over the whole column from its middle (23 reads far apart
 * in a 10 M-row column). Keys out of order are placed too, galloping back. The result is
 * numpy.searchsorted's exactly, whatever the order of the keys.
 *
 * union_into() merges intervals given in start order into disjoint ones: two ascending runs
 * read as one sequence by start (a union so far and a table's rows, of those only the rows a
 * mask picks), in one pass with no copy of either, that carries the interval still open (its
 * start and the latest end reached) from one call to the next. The unions come out as those
 * of the numpy passes of reports/analysis/intervals.py.
 *
 * stream_free() says when the work queued ahead of each row of a GPU table on its stream had
 * ended: one pass over the table's rows in start order and the other GPU tables' rows started
 * before each, carrying each stream's latest end, as reports/analysis/gpu.py's block-wise
 * numpy pass does.
 *
 * Each call holds no Python object while it runs (the GIL is released), and reads only the
 * arrays' lengths it is given.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Whether x lies before the place of key: below it (side "left"), or not above it ("right"). */
static inline int lies_before(int64_t x, int64_t key, int right)
{
    return right ? x <= key : x < key;
}

/* The place of key in the ascending column a[0..n): the count of its values lying before the
 * key. hint is a place to start from (the previous key's): the search gallops away from it by
 * doubling steps until it passes the place, then bisects the last step. */
static Py_ssize_t place(const int64_t *a, Py_ssize_t n, int64_t key, int right, Py_ssize_t hint)
{
    Py_ssize_t low, high; /* the place lies in [low, high] */
    Py_ssize_t step = 1;
    if (hint < n && lies_before(a[hint], key, right)) {
        low = hint + 1; /* every value before low lies before the key */
        for (;;) {
            Py_ssize_t probe = low - 1 + step;
            if (probe >= n) {
                high = n;
                break;
            }
            if (!lies_before(a[probe], key, right)) {
                high = probe;
                break;
            }
            low = probe + 1;
            step <<= 1;
        }
    } else {
        high = hint; /* no value from high on lies before the key */
        for (;;) {
            Py_ssize_t probe = high - step;
            if (probe < 0) {
                low = 0;
                break;
            }
            if (lies_before(a[probe], key, right)) {
                low = probe + 1;
                break;
            }
            high = probe;
            step <<= 1;
        }
    }
    while (low < high) {
        Py_ssize_t middle = low + (high - low) / 2;
        if (lies_before(a[middle], key, right))
            low = middle + 1;
        else
            high = middle;
    }
    return low;
}

/* Whether a buffer's items are signed integers (struct format b, h, i, l or q, in native
 * order). */
static int signed_integers(const Py_buffer *view)
{
    const char *format = view->format ? view->format : "B";
    if (*format == '@' || *format == '=')
        format++;
    return format[0] && !format[1] && strchr("bhilq", format[0]) != NULL;
}

/* A C-contiguous buffer of 8-byte signed integers, its length in items in *count; 0 on failure
 * (an exception set). */
static int eight_byte_items(PyObject *array, Py_buffer *view, int writable, Py_ssize_t *count)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(array, view, flags) < 0)
        return 0;
    if (view->itemsize != 8 || view->len % 8 || !signed_integers(view)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "expected a contiguous array of 8-byte signed integers");
        return 0;
    }
    *count = view->len / 8;
    return 1;
}

PyDoc_STRVAR(search_doc,
"search(column, keys, out, right)\n\n"
"Write into out (intp, as long as keys) the place of each of keys (int64) in column (int64,\n"
"ascending): numpy.searchsorted(column, keys, side='right' if right else 'left').");

static PyObject *search(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *column_obj, *keys_obj, *out_obj;
    int right;
    if (!PyArg_ParseTuple(args, "OOOp", &column_obj, &keys_obj, &out_obj, &right))
        return NULL;
    Py_buffer column, keys, out;
    Py_ssize_t n, count, out_count;
    if (!eight_byte_items(column_obj, &column, 0, &n))
        return NULL;
    if (!eight_byte_items(keys_obj, &keys, 0, &count)) {
        PyBuffer_Release(&column);
        return NULL;
    }
    if (!eight_byte_items(out_obj, &out, 1, &out_count)) {
        PyBuffer_Release(&column);
        PyBuffer_Release(&keys);
        return NULL;
    }
    if (out_count != count) {
        PyBuffer_Release(&column);
        PyBuffer_Release(&keys);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out is not as long as keys");
        return NULL;
    }
    const int64_t *a = column.buf;
    const int64_t *k = keys.buf;
    Py_ssize_t *found = out.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t hint = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        found[i] = hint = place(a, n, k[i], right, hint < n ? hint : n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&column);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* The union being written: the out arrays, how many intervals they hold, and the interval
 * still open (its start and the latest end reached). */
typedef struct {
    int64_t *starts, *ends;
    Py_ssize_t count;
    int64_t open_start, reach;
    int is_open;
} Union;

/* Add [start, end) to the union: it opens a new interval where it starts beyond every end
 * reached, closing the open one (written unless empty); else it may reach further. */
static inline void add_interval(Union *u, int64_t start, int64_t end)
{
    if (!u->is_open || start > u->reach) {
        if (u->is_open && u->reach > u->open_start) {
            u->starts[u->count] = u->open_start;
            u->ends[u->count++] = u->reach;
        }
        u->open_start = start;
        u->reach = end;
        u->is_open = 1;
    } else if (end > u->reach) {
        u->reach = end;
    }
}

PyDoc_STRVAR(union_into_doc,
"union_into(a_starts, a_ends, b_starts, b_ends, b_chosen, out_starts, out_ends, count,\n"
"           open_start, reach, is_open)\n\n"
"Merge two runs of intervals [start, end) (int64, each run's starts ascending and none below\n"
"the start of the interval left open by the call before), of the second only the rows\n"
"b_chosen (a bool array, or None for all) picks, into disjoint ones written into out_starts\n"
"and out_ends from position count on. The runs are read as one sequence by start (ties: a\n"
"first). An interval opens where a start lies beyond every end reached before it; it closes\n"
"when the next one opens, and is written then unless it is empty. The interval left open\n"
"(open_start, reach; is_open false before the first) is returned with the new count:\n"
"(count, open_start, reach, is_open). The out arrays must hold count + both runs' lengths.");

static PyObject *union_into(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objects[6], *chosen_obj;
    Union u;
    long long open_start, reach;
    if (!PyArg_ParseTuple(args, "OOOOOOOnLLp", &objects[0], &objects[1], &objects[2],
                          &objects[3], &chosen_obj, &objects[4], &objects[5], &u.count,
                          &open_start, &reach, &u.is_open))
        return NULL;
    Py_buffer views[7];
    Py_ssize_t sizes[6];
    int held = 0;
    for (; held < 6; held++)
        if (!eight_byte_items(objects[held], &views[held], held >= 4, &sizes[held]))
            break;
    int with_chosen = chosen_obj != Py_None;
    if (held == 6 && with_chosen) {
        if (PyObject_GetBuffer(chosen_obj, &views[6], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            with_chosen = -1;
        else if (views[6].itemsize != 1 || views[6].len != sizes[2] || !views[6].format
                 || strcmp(views[6].format, "?")) {
            PyBuffer_Release(&views[6]);
            PyErr_SetString(PyExc_ValueError, "b_chosen is not one bool per row of b");
            with_chosen = -1;
        }
    }
    int fits = held == 6 && with_chosen >= 0 && sizes[1] == sizes[0] && sizes[3] == sizes[2]
               && sizes[5] == sizes[4] && u.count >= 0 && u.count <= sizes[4]
               && sizes[0] + sizes[2] <= sizes[4] - u.count;
    if (held == 6 && with_chosen >= 0 && !fits)
        PyErr_SetString(PyExc_ValueError, "ends differ in length from starts, or out is short");
    if (!fits) {
        if (held == 6 && with_chosen == 1)
            PyBuffer_Release(&views[6]);
        while (held--)
            PyBuffer_Release(&views[held]);
        return NULL;
    }
    const int64_t *a_s = views[0].buf, *a_e = views[1].buf;
    const int64_t *b_s = views[2].buf, *b_e = views[3].buf;
    const uint8_t *chosen = with_chosen ? views[6].buf : NULL;
    Py_ssize_t a_n = sizes[0], b_n = sizes[2];
    u.starts = views[4].buf;
    u.ends = views[5].buf;
    u.open_start = open_start;
    u.reach = reach;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0, j = 0;
    for (;;) {
        while (j < b_n && chosen && !chosen[j])
            j++;
        if (i < a_n && (j >= b_n || a_s[i] <= b_s[j])) {
            add_interval(&u, a_s[i], a_e[i]);
            i++;
        } else if (j < b_n) {
            add_interval(&u, b_s[j], b_e[j]);
            j++;
        } else {
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (with_chosen)
        PyBuffer_Release(&views[6]);
    for (held = 0; held < 6; held++)
        PyBuffer_Release(&views[held]);
    return Py_BuildValue("nLLO", u.count, (long long)u.open_start, (long long)u.reach,
                         u.is_open ? Py_True : Py_False);
}

/* A column of signed integers of 1, 2, 4 or 8 bytes (the narrowest dtype ids are held in). */
typedef struct {
    const char *data;
    Py_ssize_t itemsize;
} IdColumn;

static inline int64_t id_at(const IdColumn *c, Py_ssize_t i)
{
    switch (c->itemsize) {
    case 1: return ((const int8_t *)c->data)[i];
    case 2: return ((const int16_t *)c->data)[i];
    case 4: return ((const int32_t *)c->data)[i];
    default: return ((const int64_t *)c->data)[i];
    }
}

/* One table's rows in start order: starts and ends (int64), devices and streams (ids). */
typedef struct {
    const int64_t *starts, *ends;
    IdColumn devices, streams;
    Py_ssize_t count;
} StreamRows;

/* The streams met so far: (device, stream, reach) triples in the order met, in an int64
 * array of `capacity` triples, the last one found remembered (rows come in runs per stream). */
typedef struct {
    int64_t *entries;
    Py_ssize_t used, capacity, last;
} Streams;

/* The place of stream (device, stream) among the streams met, added with no reach (INT64
 * min) when new; -1 when it is new and there is no room. */
static Py_ssize_t stream_slot(Streams *met, int64_t device, int64_t stream)
{
    int64_t *e = met->entries;
    if (met->last < met->used && e[3 * met->last] == device && e[3 * met->last + 1] == stream)
        return met->last;
    for (Py_ssize_t k = 0; k < met->used; k++)
        if (e[3 * k] == device && e[3 * k + 1] == stream)
            return met->last = k;
    if (met->used == met->capacity)
        return -1;
    e[3 * met->used] = device;
    e[3 * met->used + 1] = stream;
    e[3 * met->used + 2] = INT64_MIN;
    return met->last = met->used++;
}

/* Views of a table's four columns: 0 on failure (an exception set; views released). */
static int stream_rows(PyObject *columns, Py_buffer views[4], StreamRows *rows)
{
    PyObject *items[4];
    if (!PyArg_ParseTuple(columns, "OOOO", &items[0], &items[1], &items[2], &items[3]))
        return 0;
    Py_ssize_t sizes[4];
    int held = 0;
    for (; held < 4; held++) {
        if (held < 2) {
            if (!eight_byte_items(items[held], &views[held], 0, &sizes[held]))
                break;
            continue;
        }
        if (PyObject_GetBuffer(items[held], &views[held], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            break;
        Py_ssize_t size = views[held].itemsize;
        if ((size != 1 && size != 2 && size != 4 && size != 8) || views[held].len % size
            || !signed_integers(&views[held])) {
            PyBuffer_Release(&views[held]);
            PyErr_SetString(PyExc_TypeError, "ids are not integers of 1, 2, 4 or 8 bytes");
            break;
        }
        sizes[held] = views[held].len / size;
    }
    if (held == 4 && (sizes[1] != sizes[0] || sizes[2] != sizes[0] || sizes[3] != sizes[0])) {
        PyErr_SetString(PyExc_ValueError, "a table's columns differ in length");
    } else if (held == 4) {
        rows->starts = views[0].buf;
        rows->ends = views[1].buf;
        rows->devices = (IdColumn){views[2].buf, views[2].itemsize};
        rows->streams = (IdColumn){views[3].buf, views[3].itemsize};
        rows->count = sizes[0];
        return 1;
    }
    while (held--)
        PyBuffer_Release(&views[held]);
    return 0;
}

PyDoc_STRVAR(stream_free_doc,
"stream_free(table, positions, others, taken, streams, used, out) -> (done, used)\n\n"
"When the work ahead of each of a table's rows on its stream had all ended: the latest end of\n"
"the rows of the same device and stream read before it (the table's rows at positions, in\n"
"that order: an intp array of rows in start order) and of the other tables' rows that started\n"
"before it (INT64 min where none). table and each of others: (starts, ends, devices, streams),\n"
"the others in start order. taken (int64, one per other table) counts the rows of each taken so\n"
"far; streams (int64, capacity x 3) holds the streams met so far (device, stream, reach), used\n"
"of them. Both are carried from one call to the next and updated in place. Writes out (int64,\n"
"one per position) and returns how many positions it did, fewer than all when streams is full\n"
"(grow it and call again for the rest), and how many streams it holds.");

static PyObject *stream_free(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_obj, *positions_obj, *others_obj, *taken_obj, *streams_obj, *out_obj;
    Py_ssize_t used;
    if (!PyArg_ParseTuple(args, "O!OO!OOnO", &PyTuple_Type, &table_obj, &positions_obj,
                          &PyTuple_Type, &others_obj, &taken_obj, &streams_obj, &used, &out_obj))
        return NULL;
    Py_ssize_t other_count = PyTuple_GET_SIZE(others_obj);
    if (other_count > 4) {
        PyErr_SetString(PyExc_ValueError, "at most four other tables");
        return NULL;
    }
    Py_buffer table_views[4], other_views[4][4], positions, taken, streams, out;
    StreamRows table, others[4];
    if (!stream_rows(table_obj, table_views, &table))
        return NULL;
    Py_ssize_t ready = 0;
    for (; ready < other_count; ready++)
        if (!stream_rows(PyTuple_GET_ITEM(others_obj, ready), other_views[ready], &others[ready]))
            break;
    Py_ssize_t count = 0, taken_count = 0, capacity = 0, out_count = 0;
    int stage = 0; /* buffers held past the tables */
    if (ready == other_count) {
        if (eight_byte_items(positions_obj, &positions, 0, &count))
            stage = 1;
        if (stage == 1 && eight_byte_items(taken_obj, &taken, 1, &taken_count))
            stage = 2;
        if (stage == 2 && eight_byte_items(streams_obj, &streams, 1, &capacity))
            stage = 3;
        if (stage == 3 && eight_byte_items(out_obj, &out, 1, &out_count))
            stage = 4;
    }
    int fits = stage == 4 && taken_count == other_count && out_count == count
               && capacity % 3 == 0 && used >= 0 && used <= capacity / 3;
    if (stage == 4 && !fits)
        PyErr_SetString(PyExc_ValueError, "taken, streams or out do not fit");
    const Py_ssize_t *at = stage >= 1 ? positions.buf : NULL;
    for (Py_ssize_t i = 0; fits && i < count; i++)
        if (at[i] < 0 || at[i] >= table.count) {
            PyErr_SetString(PyExc_IndexError, "a position lies outside the table");
            fits = 0;
        }
    for (Py_ssize_t t = 0; fits && t < other_count; t++)
        if (((int64_t *)taken.buf)[t] < 0 || ((int64_t *)taken.buf)[t] > others[t].count) {
            PyErr_SetString(PyExc_ValueError, "taken lies outside its table");
            fits = 0;
        }
    Py_ssize_t done = 0;
    if (fits) {
        int64_t *taken_rows = taken.buf, *free_at = out.buf;
        Streams met = {streams.buf, used, capacity / 3, 0};
        Py_BEGIN_ALLOW_THREADS
        for (; done < count; done++) {
            Py_ssize_t row = at[done];
            int64_t start = table.starts[row];
            int full = 0;
            for (Py_ssize_t t = 0; t < other_count && !full; t++) {
                StreamRows *o = &others[t];
                for (; taken_rows[t] < o->count && o->starts[taken_rows[t]] < start;
                     taken_rows[t]++) {
                    Py_ssize_t k = taken_rows[t];
                    Py_ssize_t slot = stream_slot(&met, id_at(&o->devices, k),
                                                  id_at(&o->streams, k));
                    if (slot < 0) {
                        full = 1;
                        break;
                    }
                    if (o->ends[k] > met.entries[3 * slot + 2])
                        met.entries[3 * slot + 2] = o->ends[k];
                }
            }
            Py_ssize_t slot = full ? -1 : stream_slot(&met, id_at(&table.devices, row),
                                                      id_at(&table.streams, row));
            if (slot < 0)
                break;
            free_at[done] = met.entries[3 * slot + 2];
            if (table.ends[row] > met.entries[3 * slot + 2])
                met.entries[3 * slot + 2] = table.ends[row];
        }
        Py_END_ALLOW_THREADS
        used = met.used;
    }
    if (stage >= 4) PyBuffer_Release(&out);
    if (stage >= 3) PyBuffer_Release(&streams);
    if (stage >= 2) PyBuffer_Release(&taken);
    if (stage >= 1) PyBuffer_Release(&positions);
    for (Py_ssize_t t = 0; t < ready; t++)
        for (int c = 0; c < 4; c++)
            PyBuffer_Release(&other_views[t][c]);
    for (int c = 0; c < 4; c++)
        PyBuffer_Release(&table_views[c]);
    if (!fits)
        return NULL;
    return Py_BuildValue("nn", done, used);
}

static PyMethodDef methods[] = {
    {"search", search, METH_VARARGS, search_doc},
    {"union_into", union_into, METH_VARARGS, union_into_doc},
    {"stream_free", stream_free, METH_VARARGS, stream_free_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_searches",
    "Passes over ascending int64 columns (see core/searches.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__searches(void) { return PyModule_Create(&module); }
