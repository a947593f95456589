/* Two loops over llama.cpp's C API that cost too much through ctypes (app/engine/llama/native.py).
 *
 * setuptools builds this file as an optional extension (pyproject.toml), but it is a plain shared
 * library loaded with ctypes: it uses no Python API (so it needs no Python headers) and calls
 * llama.cpp only through the function pointers it is given (so it links against nothing). */

#include <stdbool.h>
#include <stdint.h>

/* ---- log lines ------------------------------------------------------------------------------
 * llama.cpp calls its log callback once per line, a few thousand times while a model loads. A
 * Python callback takes the GIL for each line, and while the worker imports its HTTP side beside
 * the load, each of those waits for the importing thread to let it go. This filter passes on only
 * the lines at or above a level (those Python would log) and drops the rest without the GIL. */

typedef void (*vl_log_callback)(int level, const char *text, void *user_data);

enum { GGML_LOG_LEVEL_CONT = 5 }; /* ggml: the continuation of the previous line */

static vl_log_callback forward_to;
static int lowest_forwarded;
static int previous_forwarded; /* a CONT line goes where its line went */

void vl_log_forward(vl_log_callback callback, int lowest_level) {
    forward_to = callback;
    lowest_forwarded = lowest_level;
}

void vl_log_filter(int level, const char *text, void *user_data) {
    int forward = level == GGML_LOG_LEVEL_CONT ? previous_forwarded : level >= lowest_forwarded;
    if (level != GGML_LOG_LEVEL_CONT) {
        previous_forwarded = forward;
    }
    if (forward && forward_to != 0) {
        forward_to(level, text, user_data);
    }
}

/* ---- token scans ------------------------------------------------------------------------------
 * The ids among 0..n_tokens-1 for which predicate(vocab, id) holds (llama_vocab_is_eog, say): one
 * ctypes call per token is tens of milliseconds for a 50k vocabulary, a C loop well under one. At
 * most capacity ids are written to out; the count found is returned. */

typedef bool (*vl_token_predicate)(const void *vocab, int32_t token);

int32_t vl_tokens_where(vl_token_predicate predicate, const void *vocab, int32_t n_tokens, int32_t *out,
                        int32_t capacity) {
    int32_t found = 0;
    for (int32_t token = 0; token < n_tokens; token++) {
        if (predicate(vocab, token)) {
            if (found < capacity) {
                out[found] = token;
            }
            found++;
        }
    }
    return found;
}
