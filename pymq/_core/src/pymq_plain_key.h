/* Plain keys: the str keys put_bodies writes as they are, told apart in one pass.
 *
 * put_bodies(keys=[...]) writes each key as its record's KEYS value, as Message(keys=k)
 * does. Most keys are plain: an exact str, compact ASCII (its UTF-8 bytes are the str's
 * own data, no encoding), not empty, without a space (Message splits a str on spaces) and
 * without the property separators \x01 / \x02 (which make a value invalid). For such a key
 * put_bodies needs only its bytes: pymq_plain_key_len takes the object apart (no call into
 * CPython), pymq_plain_copy copies the bytes eight at a time while it checks them. Any
 * other key (and a plain-looking one whose bytes hold a space or a byte below 3) goes
 * put_bodies' general path, which gives the same records and errors as Message(keys=).
 */
#ifndef PYMQ_PLAIN_KEY_H
#define PYMQ_PLAIN_KEY_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PYMQ_KEY_ONES  0x0101010101010101ULL
#define PYMQ_KEY_HIGHS 0x8080808080808080ULL

/* The length of o if it is an exact, compact ASCII str that is not empty (its bytes at
 * pymq_plain_key_data(o)), else -1. */
static inline Py_ssize_t pymq_plain_key_len(PyObject *o)
{
    if (!PyUnicode_CheckExact(o) || !PyUnicode_IS_COMPACT_ASCII(o))
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(o);
    return n > 0 ? n : -1;
}

static inline const char *pymq_plain_key_data(PyObject *o)
{
    return (const char *)PyUnicode_DATA(o);
}

/* Ask for the cache lines of the key object o (its header and, for a short key, its bytes)
 * a few keys ahead of their use: the keys of a batch are separate objects, usually made
 * one after another but seldom still in the cache when the batch is put. */
static inline void pymq_plain_key_prefetch(PyObject *o)
{
    __builtin_prefetch((const char *)o, 0, 3);
    __builtin_prefetch((const char *)o + 63, 0, 3);
}

/* Nonzero if some byte of w is below 3 (\x00, \x01, \x02) or a space; every byte of w is
 * below 0x80 (ASCII), so no subtraction borrows unless some byte is below what it subtracts:
 * the test is exact, not only a hint. */
static inline uint64_t pymq_key_word_bad(uint64_t w)
{
    uint64_t spaces = w ^ (0x20 * PYMQ_KEY_ONES);
    return ((w - 3 * PYMQ_KEY_ONES) | (spaces - PYMQ_KEY_ONES)) & PYMQ_KEY_HIGHS;
}

/* Copy the n ASCII bytes at src (n > 0) to dst, which has room for n bytes; returns 0 if
 * none is below 3 or a space (the key is plain), else nonzero (what dst holds then is of no
 * use). \x00 counts as bad too: such a key is rare and the general path handles it. */
static inline int pymq_plain_copy(char *dst, const char *src, Py_ssize_t n)
{
    uint64_t w, bad = 0;
    Py_ssize_t i;
    if (n < 8) {
        unsigned char c, b = 0;
        for (i = 0; i < n; i++) {
            c = (unsigned char)src[i];
            b |= (unsigned char)((c < 3) | (c == ' '));
            dst[i] = (char)c;
        }
        return b;
    }
    for (i = 0; i + 8 <= n; i += 8) {
        memcpy(&w, src + i, 8);
        bad |= pymq_key_word_bad(w);
        memcpy(dst + i, &w, 8);
    }
    if (i < n) {                    /* the last 8 bytes, overlapping the ones done */
        memcpy(&w, src + n - 8, 8);
        bad |= pymq_key_word_bad(w);
        memcpy(dst + n - 8, &w, 8);
    }
    return bad != 0;
}

/* memcpy of n bytes (n >= 0) for the short values of keys: 8-byte moves from 8 bytes up to
 * 32, never touching a byte outside [dst, dst + n) nor [src, src + n). */
static inline void pymq_copy_short(char *dst, const char *src, Py_ssize_t n)
{
    uint64_t a, b, c, d;
    if (n < 8 || n > 32) {
        memcpy(dst, src, (size_t)n);
        return;
    }
    memcpy(&a, src, 8);
    memcpy(&d, src + n - 8, 8);
    if (n > 16) {
        memcpy(&b, src + 8, 8);
        memcpy(&c, src + n - 16, 8);
        memcpy(dst + 8, &b, 8);
        memcpy(dst + n - 16, &c, 8);
    }
    memcpy(dst, &a, 8);
    memcpy(dst + n - 8, &d, 8);
}

#endif
