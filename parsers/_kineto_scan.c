/* A batch of Kineto trace events scanned into columns, one pass in C.
 *
 * The compiled half of parsers/kineto_columns.py's reading of a batch (msgspec decodes the batch
 * into structs where this module is not built, or where it gives a batch up). One call scans the
 * text "[event, event, ...]" that parsers/kineto_stream.py cuts at event boundaries and writes
 * one fixed-size row per event:
 *
 * - ph, cat, name, pid and tid as ids of their raw JSON token (quotes and escapes kept) in the
 *   scanner's own table, which lasts from batch to batch; each call returns the tokens it added
 *   since the last call that succeeded, which Python decodes once each;
 * - ts, dur and args' "memory bandwidth (GB/s)" as doubles (NaN for null);
 * - args' device, stream, stream_id, correlation, bytes and size, and the event's flow id, as
 *   int64 (-1 when absent or null);
 * - where the event's text lies, and where each args value read as text lies (the operator's
 *   inputs, the sync kind, the copy direction, the collective's name), for Python to take the
 *   few values it needs.
 *
 * The scan gives a batch up, returning the reason as a str, at anything outside this plain shape
 * (invalid JSON, a value of another type than the above, a key written twice, a \u escape,
 * nesting deeper than MAX_DEPTH): msgspec then decodes that batch as before, with every lenient
 * rule and error of that path. The text is only read, never past its end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Nesting the scan follows inside an event (profreport.inputs.MAX_JSON_DEPTH): deeper text is
 * left to msgspec, which raises the trace's error for it. */
#define MAX_DEPTH 64
/* Ids past this many distinct tokens would not fit the int32 columns. */
#define MAX_TOKENS 0x7FFFFFF0

/* The symbol columns, the number columns and the text columns of a row (Python's dtype in
 * parsers/kineto_columns.py follows this order). */
enum { S_PH, S_CAT, S_NAME, S_PID, S_TID, N_SYMBOLS };
enum { F_TS, F_DUR, F_BANDWIDTH, N_FLOATS };
enum { I_DEVICE, I_STREAM, I_STREAM_ID, I_CORRELATION, I_BYTES, I_SIZE, I_ID, N_INTS };
enum { T_INPUT_TYPES, T_INPUT_DIMS, T_INPUT_DIMS_2021, T_INPUT_STRIDES, T_SYNC_KIND,
       T_DIRECTION, T_KIND, T_COLLECTIVE, N_TEXTS };

typedef struct {
    int32_t symbol[N_SYMBOLS];
    int32_t pad;
    double number[N_FLOATS];
    int64_t integer[N_INTS];
    int64_t event[2];            /* the event's first byte and length */
    int64_t text[N_TEXTS][2];    /* a value's first byte and length (length 0: absent) */
    uint32_t texts;              /* bit k set when text[k] was read (the others are stale) */
} Row;

/* The tokens a missing ph/cat, name, pid/tid reads as (the struct defaults of the msgspec
 * path): interned first, so their ids are these. */
enum { TOKEN_EMPTY, TOKEN_NULL, TOKEN_MINUS_ONE };

typedef struct {
    PyObject_HEAD
    char *arena;           /* every token's bytes, one after another */
    size_t arena_used, arena_size;
    int64_t *token_at;     /* each token's offset in the arena, and one past the last */
    uint64_t *token_hash;
    Py_ssize_t tokens, tokens_size, reported;
    int32_t *slots;        /* open addressing: token id + 1, 0 for an empty slot */
    size_t slot_mask;
    char *rows;            /* the columns of the last scan, kept for the next one's */
    Py_ssize_t rows_size;
    int32_t last[N_SYMBOLS];   /* each symbol field's last token (events repeat them) */
} Scanner;

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

/* Grow the slot table to twice its size and place every token again. */
static int grow_slots(Scanner *s)
{
    size_t size = s->slot_mask ? 2 * (s->slot_mask + 1) : 1024;
    int32_t *slots = calloc(size, sizeof(int32_t));
    if (!slots)
        return -1;
    for (Py_ssize_t id = 0; id < s->tokens; id++) {
        size_t at = s->token_hash[id] & (size - 1);
        while (slots[at])
            at = (at + 1) & (size - 1);
        slots[at] = (int32_t)(id + 1);
    }
    free(s->slots);
    s->slots = slots;
    s->slot_mask = size - 1;
    return 0;
}

/* The id of the token p[0:n], added when unseen; -1 when out of memory. */
static int32_t intern(Scanner *s, const char *p, size_t n)
{
    uint64_t h = hash_bytes(p, n);
    size_t at = h & s->slot_mask;
    for (;;) {
        int32_t slot = s->slots[at];
        if (!slot)
            break;
        int32_t id = slot - 1;
        if (s->token_hash[id] == h && (size_t)(s->token_at[id + 1] - s->token_at[id]) == n
            && memcmp(s->arena + s->token_at[id], p, n) == 0)
            return id;
        at = (at + 1) & s->slot_mask;
    }
    if (s->tokens >= MAX_TOKENS)
        return -1;
    if (s->arena_used + n > s->arena_size) {
        size_t size = 2 * (s->arena_size + n);
        char *arena = realloc(s->arena, size);
        if (!arena)
            return -1;
        s->arena = arena;
        s->arena_size = size;
    }
    if (s->tokens + 2 > s->tokens_size) {
        Py_ssize_t size = 2 * s->tokens_size + 64;
        int64_t *token_at = realloc(s->token_at, size * sizeof(int64_t));
        if (!token_at)
            return -1;
        s->token_at = token_at;
        uint64_t *token_hash = realloc(s->token_hash, size * sizeof(uint64_t));
        if (!token_hash)
            return -1;
        s->token_hash = token_hash;
        s->tokens_size = size;
    }
    memcpy(s->arena + s->arena_used, p, n);
    int32_t id = (int32_t)s->tokens;
    s->token_at[id] = (int64_t)s->arena_used;
    s->arena_used += n;
    s->token_at[id + 1] = (int64_t)s->arena_used;
    s->token_hash[id] = h;
    s->tokens++;
    s->slots[at] = id + 1;
    if ((size_t)s->tokens * 2 > s->slot_mask && grow_slots(s) < 0)
        return -1;
    return id;
}

/* One scan over a batch's text. */
typedef struct {
    const char *base, *p, *end;
    const char *reason;    /* why the batch was given up */
    int out_of_memory;
} Cursor;

static int give_up(Cursor *c, const char *reason)
{
    if (!c->reason)
        c->reason = reason;
    return -1;
}

static void skip_space(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

/* The length of the UTF-8 sequence at p that Python's strict decoder accepts, 0 if none. */
static int utf8_length(const unsigned char *p, const unsigned char *end)
{
    unsigned char b = p[0];
    int n;
    uint32_t min, cp;
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2; min = 0x80; cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3; min = 0x800; cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4; min = 0x10000; cp = b & 0x07;
    } else {
        return 0;
    }
    if (end - p < n)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* A JSON string at the cursor (its opening quote): the cursor moved past its closing quote;
 * *escaped set when it holds a backslash escape. */
static int scan_string(Cursor *c, int *escaped)
{
    const unsigned char *p = (const unsigned char *)c->p + 1;
    const unsigned char *end = (const unsigned char *)c->end;
    *escaped = 0;
    for (;;) {
        /* Plain bytes (no quote, backslash, control character or byte past ASCII) sixteen or
         * eight at a time. */
#if defined(__SSE2__)
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i special = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));  /* signed: past ASCII too */
            int mask = _mm_movemask_epi8(special);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                goto special;
            }
            p += 16;
        }
#endif
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t quote = w ^ 0x2222222222222222ULL, slash = w ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t special = ((quote - 0x0101010101010101ULL) & ~quote)
                               | ((slash - 0x0101010101010101ULL) & ~slash)
                               | (w - 0x2020202020202020ULL) | w;
            if (special & 0x8080808080808080ULL)
                break;
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80)
            p++;
#if defined(__SSE2__)
    special:
#endif
        if (p >= end)
            return give_up(c, "invalid JSON: a string runs past the batch");
        if (*p == '"')
            break;
        if (*p == '\\') {
            if (p + 1 >= end)
                return give_up(c, "invalid JSON: a string runs past the batch");
            if (p[1] == 'u')
                return give_up(c, "a \\u escape in a string");
            if (!strchr("\"\\/bfnrt", p[1]) || !p[1])
                return give_up(c, "invalid JSON: an unknown escape in a string");
            *escaped = 1;
            p += 2;
        } else if (*p < 0x20) {
            return give_up(c, "invalid JSON: a control character in a string");
        } else {
            int n = utf8_length(p, end);
            if (!n)
                return give_up(c, "invalid UTF-8 in a string");
            p += n;
        }
    }
    c->p = (const char *)p + 1;
    return 0;
}

/* A JSON number at the cursor: the cursor moved past it; *integral set when it has no
 * fraction and no exponent. */
static int scan_number(Cursor *c, int *integral)
{
    const char *p = c->p, *end = c->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        return give_up(c, "invalid JSON: not a value");
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    *integral = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return give_up(c, "invalid JSON: a number without digits after its point");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *integral = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return give_up(c, "invalid JSON: a number without exponent digits");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *integral = 0;
    }
    c->p = p;
    return 0;
}

static int scan_literal(Cursor *c, const char *word, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return give_up(c, "invalid JSON: not a value");
    c->p += n;
    return 0;
}

/* The kinds of value a field is read as. */
enum { V_STRING, V_NUMBER, V_INTEGER, V_NULL, V_TRUE, V_FALSE, V_ARRAY, V_OBJECT };

static int skip_value(Cursor *c, int depth);
static int read_key(Cursor *c, const char **key, size_t *n, int *escaped);

/* Past the opening bracket of an array or object at the cursor: 0 when it closes at once
 * (the cursor past it), 1 when an item follows. */
static int open_items(Cursor *c, char close)
{
    c->p++;
    skip_space(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    return 1;
}

/* After an item of an array or object: past the comma (1) or the closing bracket (0). */
static int next_item(Cursor *c, char close)
{
    skip_space(c);
    if (c->p >= c->end)
        return give_up(c, "invalid JSON: an array or object runs past the batch");
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    if (*c->p != ',')
        return give_up(c, "invalid JSON: no comma or closing bracket after a value");
    c->p++;
    skip_space(c);
    return 1;
}

/* Skip an array or object at the cursor (its opening bracket), checking it. */
static int skip_container(Cursor *c, int depth)
{
    char close = *c->p == '[' ? ']' : '}';
    int more;
    if (depth >= MAX_DEPTH)
        return give_up(c, "nesting deeper than the scan follows");
    for (more = open_items(c, close); more > 0; more = next_item(c, close)) {
        const char *key;
        size_t n;
        int escaped;
        if (close == '}' && read_key(c, &key, &n, &escaped) < 0)
            return -1;
        if (skip_value(c, depth + 1) < 0)
            return -1;
    }
    return more;
}

/* The kind of the value at the cursor, the cursor moved past it (checked). */
static int value_kind(Cursor *c, int depth)
{
    if (c->p >= c->end)
        return give_up(c, "invalid JSON: a value runs past the batch");
    int escaped, integral;
    switch (*c->p) {
    case '"':
        return scan_string(c, &escaped) < 0 ? -1 : V_STRING;
    case '{':
        return skip_container(c, depth) < 0 ? -1 : V_OBJECT;
    case '[':
        return skip_container(c, depth) < 0 ? -1 : V_ARRAY;
    case 'n':
        return scan_literal(c, "null", 4) < 0 ? -1 : V_NULL;
    case 't':
        return scan_literal(c, "true", 4) < 0 ? -1 : V_TRUE;
    case 'f':
        return scan_literal(c, "false", 5) < 0 ? -1 : V_FALSE;
    default:
        if (scan_number(c, &integral) < 0)
            return -1;
        return integral ? V_INTEGER : V_NUMBER;
    }
}

static int skip_value(Cursor *c, int depth)
{
    return value_kind(c, depth) < 0 ? -1 : 0;
}

/* 10^0 .. 10^22: exact doubles. */
static const double POWERS[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21,
                                1e22};

/* The double nearest the JSON number p[0:n], as Python's float() reads it; -1 when it is not
 * finite. A decimal whose digits make an integer up to 2^53 and that has at most 22 digits after
 * its point is one correctly rounded quotient of two exact doubles; others go to CPython's
 * reader (correctly rounded too). */
static int read_double(Cursor *c, const char *p, size_t n, double *out)
{
    const char *q = p, *end = p + n;
    int negative = 0, digits = 0, scale = 0;
    uint64_t mantissa = 0;
    if (*q == '-') {
        negative = 1;
        q++;
    }
    for (; q < end && *q >= '0' && *q <= '9'; q++) {
        if (mantissa || *q != '0') {
            mantissa = mantissa * 10 + (uint64_t)(*q - '0');
            digits++;
        }
        if (digits > 19)
            goto slow;
    }
    if (q < end && *q == '.') {
        for (q++; q < end && *q >= '0' && *q <= '9'; q++) {
            if (mantissa || *q != '0') {
                mantissa = mantissa * 10 + (uint64_t)(*q - '0');
                digits++;
            }
            scale--;
            if (digits > 19)
                goto slow;
        }
    }
    if (q < end)  /* an exponent */
        goto slow;
    if (scale < -22 || mantissa > (1ULL << 53))
        goto slow;
    {
        double value = (double)mantissa;
        value = scale < 0 ? value / POWERS[-scale] : value;
        *out = negative ? -value : value;
        return 0;
    }
slow:
    {
        char buffer[128];
        char *copy = n < sizeof(buffer) ? buffer : PyMem_Malloc(n + 1);
        if (!copy) {
            c->out_of_memory = 1;
            return give_up(c, "out of memory");
        }
        memcpy(copy, p, n);
        copy[n] = 0;
        char *stop;
        double value = PyOS_string_to_double(copy, &stop, NULL);
        int bad = value == -1.0 && PyErr_Occurred();
        if (bad)
            PyErr_Clear();
        bad = bad || stop != copy + n || !isfinite(value);
        if (copy != buffer)
            PyMem_Free(copy);
        if (bad)
            return give_up(c, "a number no double holds");
        *out = value;
        return 0;
    }
}

/* A field read as a double (a number, NaN for null). */
static int read_float(Cursor *c, int depth, double *out)
{
    const char *start = c->p;
    int kind = value_kind(c, depth);
    if (kind < 0)
        return -1;
    if (kind == V_NULL) {
        *out = NAN;
        return 0;
    }
    if (kind != V_INTEGER && kind != V_NUMBER)
        return give_up(c, "a value that is no number where a time or bandwidth is read");
    if (kind == V_INTEGER && c->p - start > 18)
        return give_up(c, "an integer too long to read as a double here");
    return read_double(c, start, (size_t)(c->p - start), out);
}

/* The digits p[0:n] of a string id ("123", or "0x7f" as ROCm writes stream ids), as Python's
 * int(text, 0) reads them; -1 for any other text (which the caller gives up on): a leading
 * zero, a sign, a space, an underscore, another base, or more digits than surely fit. */
static int64_t string_int(const char *p, size_t n)
{
    uint64_t value = 0;
    if (n >= 3 && n <= 17 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        for (size_t i = 2; i < n; i++) {
            char d = p[i];
            int hex = d >= '0' && d <= '9' ? d - '0' : d >= 'a' && d <= 'f' ? d - 'a' + 10
                      : d >= 'A' && d <= 'F' ? d - 'A' + 10 : -1;
            if (hex < 0)
                return -1;
            value = value * 16 + (uint64_t)hex;
        }
        return (int64_t)value;
    }
    if (n < 1 || n > 18 || (p[0] == '0' && n > 1))
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        value = value * 10 + (uint64_t)(p[i] - '0');
    }
    return (int64_t)value;
}

/* A field read as an id or size: a non-negative int64 or -1 (an integer, or a string of one as
 * string_int reads it), -1 for null. *irregular set (the value -1) for any other value, which
 * the caller may give up on. */
static int read_int(Cursor *c, int depth, int64_t *out, int *irregular)
{
    const char *start = c->p;
    int kind = value_kind(c, depth);
    *irregular = 0;
    *out = -1;
    if (kind < 0)
        return -1;
    if (kind == V_NULL)
        return 0;
    size_t n = (size_t)(c->p - start);
    if (kind == V_STRING) {
        int64_t value = string_int(start + 1, n - 2);
        *irregular = value < 0;
        *out = value < 0 ? -1 : value;
        return 0;
    }
    if (kind != V_INTEGER) {
        *irregular = 1;
        return 0;
    }
    if (*start == '-') {
        if (n == 2 && (start[1] == '1' || start[1] == '0'))
            *out = start[1] == '1' ? -1 : 0;
        else
            *irregular = 1;
        return 0;
    }
    if (n > 19) {
        *irregular = 1;
        return 0;
    }
    uint64_t value = 0;
    for (size_t i = 0; i < n; i++)
        value = value * 10 + (uint64_t)(start[i] - '0');
    if (value > (uint64_t)INT64_MAX)
        *irregular = 1;
    else
        *out = (int64_t)value;
    return 0;
}

/* A symbol field: ph, cat and name hold a string or null; pid and tid an integer of at most 18
 * digits too. */
static int read_symbol(Scanner *s, Cursor *c, int depth, int field, int32_t *out)
{
    int integer_too = field == S_PID || field == S_TID;
    const char *start = c->p;
    int kind = value_kind(c, depth);
    if (kind < 0)
        return -1;
    if (kind != V_STRING && kind != V_NULL && !(integer_too && kind == V_INTEGER))
        return give_up(c, integer_too ? "a pid or tid that is no integer, string or null"
                                      : "a ph, cat or name that is no string or null");
    if (kind == V_INTEGER && c->p - start > 18)
        return give_up(c, "a pid or tid integer too long to read here");
    size_t n = (size_t)(c->p - start);
    int32_t last = s->last[field];
    if ((size_t)(s->token_at[last + 1] - s->token_at[last]) == n
        && memcmp(s->arena + s->token_at[last], start, n) == 0) {
        *out = last;
        return 0;
    }
    int32_t id = intern(s, start, n);
    if (id < 0) {
        c->out_of_memory = 1;
        return give_up(c, "out of memory");
    }
    *out = s->last[field] = id;
    return 0;
}

/* A value kept as where its text lies. */
static int read_text(Cursor *c, int depth, int64_t *out)
{
    const char *start = c->p;
    if (value_kind(c, depth) < 0)
        return -1;
    out[0] = start - c->base;
    out[1] = c->p - start;
    return 0;
}

/* The args keys read, each with its column (texts after the numbers). */
typedef struct {
    const char *key;
    size_t length;
    int kind;   /* 0 integer, 1 double, 2 text */
    int column;
} ArgKey;

#define ARG(key, kind, column) {key, sizeof(key) - 1, kind, column}
static const ArgKey ARG_KEYS[] = {
    ARG("device", 0, I_DEVICE), ARG("stream", 0, I_STREAM), ARG("stream_id", 0, I_STREAM_ID),
    ARG("correlation", 0, I_CORRELATION), ARG("bytes", 0, I_BYTES), ARG("size", 0, I_SIZE),
    ARG("memory bandwidth (GB/s)", 1, F_BANDWIDTH),
    ARG("Input type", 2, T_INPUT_TYPES), ARG("Input Dims", 2, T_INPUT_DIMS),
    ARG("Input dims", 2, T_INPUT_DIMS_2021), ARG("Input Strides", 2, T_INPUT_STRIDES),
    ARG("cuda_sync_kind", 2, T_SYNC_KIND), ARG("direction", 2, T_DIRECTION),
    ARG("kind", 2, T_KIND), ARG("Collective name", 2, T_COLLECTIVE),
};
#define N_ARG_KEYS (sizeof(ARG_KEYS) / sizeof(ARG_KEYS[0]))
/* Bit n set when some key read is n bytes long: most keys of other lengths are passed over
 * without a comparison. */
#define ARG_LENGTHS ((1u << 4) | (1u << 5) | (1u << 6) | (1u << 9) | (1u << 10) | (1u << 11) \
                     | (1u << 13) | (1u << 14) | (1u << 15) | (1u << 23))

/* A key at the cursor: where its text lies (without quotes), the cursor past its colon. */
static int read_key(Cursor *c, const char **key, size_t *n, int *escaped)
{
    if (c->p >= c->end || *c->p != '"')
        return give_up(c, "invalid JSON: an object key is no string");
    const char *start = c->p + 1;
    if (scan_string(c, escaped) < 0)
        return -1;
    *key = start;
    *n = (size_t)(c->p - 1 - start);
    skip_space(c);
    if (c->p >= c->end || *c->p != ':')
        return give_up(c, "invalid JSON: no colon after a key");
    c->p++;
    skip_space(c);
    return 0;
}

/* An event's args object (or null). */
static int scan_args(Cursor *c, Row *row)
{
    if (c->p < c->end && *c->p == 'n')
        return scan_literal(c, "null", 4);
    if (c->p >= c->end || *c->p != '{')
        return give_up(c, "args that is no object or null");
    if (!open_items(c, '}'))
        return 0;
    uint32_t seen = 0;
    for (;;) {
        const char *key;
        size_t n;
        int escaped, more;
        if (read_key(c, &key, &n, &escaped) < 0)
            return -1;
        if (escaped)
            return give_up(c, "an escape in an args key");
        size_t which = N_ARG_KEYS;
        if (n < 32 && (ARG_LENGTHS >> n) & 1)
            for (which = 0; which < N_ARG_KEYS; which++)
                if (ARG_KEYS[which].length == n && memcmp(key, ARG_KEYS[which].key, n) == 0)
                    break;
        if (which == N_ARG_KEYS) {
            if (skip_value(c, 2) < 0)
                return -1;
        } else {
            const ArgKey *arg = &ARG_KEYS[which];
            int irregular;
            if (seen & (1u << which))
                return give_up(c, "an args key written twice");
            seen |= 1u << which;
            if (arg->kind == 0) {
                if (read_int(c, 2, &row->integer[arg->column], &irregular) < 0)
                    return -1;
                if (irregular)
                    return give_up(c, "an args id or size that is no plain int64");
            } else if (arg->kind == 1) {
                if (read_float(c, 2, &row->number[arg->column]) < 0)
                    return -1;
            } else {
                if (read_text(c, 2, row->text[arg->column]) < 0)
                    return -1;
                row->texts |= 1u << arg->column;
            }
        }
        if ((more = next_item(c, '}')) <= 0)
            return more;
    }
}

/* The event keys read, by field number: the symbols (S_PH...S_TID), then ts, dur, id, args. */
static const struct {
    const char *key;
    size_t length;
} EVENT_KEYS[] = {{"ph", 2}, {"cat", 3}, {"name", 4}, {"pid", 3}, {"tid", 3}, {"ts", 2},
                  {"dur", 3}, {"id", 2}, {"args", 4}};
#define N_EVENT_KEYS ((int)(sizeof(EVENT_KEYS) / sizeof(EVENT_KEYS[0])))

/* One event object at the cursor into row. */
static int scan_event(Scanner *s, Cursor *c, Row *row)
{
    row->texts = 0;
    row->symbol[S_PH] = row->symbol[S_CAT] = TOKEN_EMPTY;
    row->symbol[S_NAME] = TOKEN_NULL;
    row->symbol[S_PID] = row->symbol[S_TID] = TOKEN_MINUS_ONE;
    row->number[F_TS] = row->number[F_DUR] = NAN;
    row->number[F_BANDWIDTH] = -1.0;
    for (int i = 0; i < N_INTS; i++)
        row->integer[i] = -1;
    if (c->p >= c->end || *c->p != '{')
        return give_up(c, "an element of traceEvents that is no object");
    row->event[0] = c->p - c->base;
    unsigned seen = 0;
    int id_irregular = 0;
    const char *phase = NULL;
    size_t phase_n = 0;
    for (int more = open_items(c, '}'); more; ) {
        const char *key;
        size_t n;
        int escaped, field = -1;
        if (read_key(c, &key, &n, &escaped) < 0)
            return -1;
        if (escaped)
            return give_up(c, "an escape in an event key");
        for (int k = 0; k < N_EVENT_KEYS; k++)
            if (EVENT_KEYS[k].length == n && memcmp(key, EVENT_KEYS[k].key, n) == 0) {
                field = k;
                break;
            }
        if (field >= 0) {
            if (seen & (1u << field))
                return give_up(c, "an event key written twice");
            seen |= 1u << field;
        }
        if (field == 0)
            phase = c->p;
        int failed;
        if (field >= 0 && field <= 4)
            failed = read_symbol(s, c, 1, field, &row->symbol[field]);
        else if (field == 5 || field == 6)
            failed = read_float(c, 1, &row->number[field == 5 ? F_TS : F_DUR]);
        else if (field == 7)
            failed = read_int(c, 1, &row->integer[I_ID], &id_irregular);
        else if (field == 8)
            failed = scan_args(c, row);
        else
            failed = skip_value(c, 1);
        if (failed < 0)
            return -1;
        if (field == 0)
            phase_n = (size_t)(c->p - phase);
        if ((more = next_item(c, '}')) < 0)
            return -1;
    }
    /* Only a flow's id is read (a flow event of another id goes the msgspec way). */
    if (id_irregular && phase_n == 3 && memcmp(phase, "\"f\"", 3) == 0)
        return give_up(c, "a flow id that is no plain int64");
    row->event[1] = (c->p - c->base) - row->event[0];
    return 0;
}

/* The rows written so far, held as columns (each column's values one after another, the
 * columns one after another in the order of COLUMN_WIDTHS), room for size rows. */
typedef struct {
    char *buf;
    Py_ssize_t count, size;
} Rows;

/* The bytes of one value of each column: ts, dur, bandwidth; the ints; the event's (first
 * byte, length); each text field's (first byte, length); the symbols. */
#define N_COLUMNS (N_FLOATS + N_INTS + 1 + N_TEXTS + N_SYMBOLS)
static const size_t COLUMN_WIDTHS[N_COLUMNS] = {
    8, 8, 8,  8, 8, 8, 8, 8, 8, 8,  16,  16, 16, 16, 16, 16, 16, 16, 16,  4, 4, 4, 4, 4};

/* Copy the first count rows of columns laid out for room rows into columns laid out for
 * room_to rows. */
static void copy_columns(char *to, Py_ssize_t room_to, const char *from, Py_ssize_t room,
                         Py_ssize_t count)
{
    for (int k = 0; k < N_COLUMNS; k++) {
        memcpy(to, from, (size_t)count * COLUMN_WIDTHS[k]);
        to += (size_t)room_to * COLUMN_WIDTHS[k];
        from += (size_t)room * COLUMN_WIDTHS[k];
    }
}

/* Append row to the columns (grown as needed); -1 when out of memory. */
static int store_row(Rows *r, const Row *row)
{
    if (r->count == r->size) {
        Py_ssize_t size = r->size ? 2 * r->size : 4096;
        size_t bytes = 0;
        for (int k = 0; k < N_COLUMNS; k++)
            bytes += COLUMN_WIDTHS[k] * (size_t)size;
        char *buf = PyMem_Malloc(bytes);
        if (!buf)
            return -1;
        if (r->buf)
            copy_columns(buf, size, r->buf, r->size, r->count);
        PyMem_Free(r->buf);
        r->buf = buf;
        r->size = size;
    }
    Py_ssize_t i = r->count++, room = r->size;
    double *number = (double *)r->buf;
    for (int k = 0; k < N_FLOATS; k++)
        number[k * room + i] = row->number[k];
    int64_t *integer = (int64_t *)(number + N_FLOATS * room);
    for (int k = 0; k < N_INTS; k++)
        integer[k * room + i] = row->integer[k];
    int64_t *event = integer + N_INTS * room;
    event[2 * i] = row->event[0];
    event[2 * i + 1] = row->event[1];
    int64_t *text = event + 2 * room;
    for (int k = 0; k < N_TEXTS; k++) {
        int read = (row->texts >> k) & 1;
        text[2 * (k * room + i)] = read ? row->text[k][0] : 0;
        text[2 * (k * room + i) + 1] = read ? row->text[k][1] : 0;
    }
    int32_t *symbol = (int32_t *)(text + 2 * N_TEXTS * room);
    for (int k = 0; k < N_SYMBOLS; k++)
        symbol[k * room + i] = row->symbol[k];
    return 0;
}

/* Scan the JSON array "[event, ...]" in c's text into rows. */
static int scan_array(Scanner *s, Cursor *c, Rows *rows)
{
    skip_space(c);
    if (c->p >= c->end || *c->p != '[')
        return give_up(c, "invalid JSON: the batch is no array");
    int more;
    for (more = open_items(c, ']'); more > 0; more = next_item(c, ']')) {
        Row row;
        if (scan_event(s, c, &row) < 0)
            return -1;
        if (store_row(rows, &row) < 0) {
            c->out_of_memory = 1;
            return give_up(c, "out of memory");
        }
    }
    if (more < 0)
        return -1;
    skip_space(c);
    if (c->p != c->end)
        return give_up(c, "invalid JSON: text after the batch's array");
    return 0;
}

/* The rows' columns, one after another with no room between them: ts, dur, bandwidth
 * (doubles); device, stream, stream_id, correlation, bytes, size, id (int64); where each event
 * lies (int64 pairs); where each text field lies (int64 pairs, one column per field); ph, cat,
 * name, pid, tid (int32). */
static PyObject *columns_of(const Rows *rows)
{
    Py_ssize_t size = 0;
    for (int k = 0; k < N_COLUMNS; k++)
        size += (Py_ssize_t)COLUMN_WIDTHS[k] * rows->count;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out && rows->count)
        copy_columns(PyBytes_AS_STRING(out), rows->count, rows->buf, rows->size, rows->count);
    return out;
}

PyDoc_STRVAR(scan_doc,
"scan(text) -> (rows, count, tokens) | str\n\n"
"Scan the JSON array of events ``text`` (a bytes-like object) into ``count`` rows (bytes\n"
"holding their columns one after another) and the raw tokens added to the table since the\n"
"last scan that succeeded (a list of bytes; ids continue from there); or the reason the batch\n"
"was given up (a str).");

static PyObject *scanner_scan(Scanner *self, PyObject *arg)
{
    Py_buffer text;
    if (!self->slots) {
        PyErr_SetString(PyExc_ValueError, "the scanner was not initialised");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &text, PyBUF_SIMPLE) < 0)
        return NULL;
    Cursor c = {text.buf, text.buf, (const char *)text.buf + text.len, NULL, 0};
    Rows rows = {self->rows, 0, self->rows_size};
    PyObject *result = NULL;
    int failed = scan_array(self, &c, &rows);
    if (failed < 0 && c.out_of_memory) {
        PyErr_NoMemory();
    } else if (failed < 0) {
        result = PyUnicode_FromString(c.reason);
    } else {
        PyObject *tokens = PyList_New(self->tokens - self->reported);
        PyObject *out = columns_of(&rows);
        for (Py_ssize_t id = self->reported; tokens && id < self->tokens; id++) {
            PyObject *token = PyBytes_FromStringAndSize(
                self->arena + self->token_at[id], self->token_at[id + 1] - self->token_at[id]);
            if (!token) {
                Py_CLEAR(tokens);
                break;
            }
            PyList_SET_ITEM(tokens, id - self->reported, token);
        }
        if (tokens && out) {
            result = Py_BuildValue("(NnN)", out, rows.count, tokens);
            self->reported = self->tokens;
        } else {
            Py_XDECREF(tokens);
            Py_XDECREF(out);
        }
    }
    self->rows = rows.buf;
    self->rows_size = rows.size;
    PyBuffer_Release(&text);
    return result;
}

static int scanner_init(Scanner *self, PyObject *args, PyObject *kwargs)
{
    if (!PyArg_ParseTuple(args, ":Scanner"))
        return -1;
    if (self->slots)
        return 0;
    if (grow_slots(self) < 0 || intern(self, "\"\"", 2) != TOKEN_EMPTY
        || intern(self, "null", 4) != TOKEN_NULL || intern(self, "-1", 2) != TOKEN_MINUS_ONE) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void scanner_dealloc(Scanner *self)
{
    free(self->arena);
    free(self->token_at);
    free(self->token_hash);
    free(self->slots);
    PyMem_Free(self->rows);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_O, scan_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profreport.parsers._kineto_scan.Scanner",
    .tp_doc = PyDoc_STR("Scanner()\n\nScans batches of Kineto events into rows; its table of "
                        "raw tokens lasts from batch to batch."),
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)scanner_init,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto_scan",
    "Kineto event batches scanned into rows (see parsers/kineto_columns.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__kineto_scan(void)
{
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
