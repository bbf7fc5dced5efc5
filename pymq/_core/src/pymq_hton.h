/* Big-endian loads and stores for RocketMQ's on-disk format (Java ByteBuffer order).
 * All accesses go through memcpy, so unaligned positions are fine and carry no UB. */
#ifndef PYMQ_HTON_H
#define PYMQ_HTON_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PYMQ_BE32(x) (x)
#define PYMQ_BE64(x) (x)
#define PYMQ_BE16(x) (x)
#else
#define PYMQ_BE32(x) __builtin_bswap32(x)
#define PYMQ_BE64(x) __builtin_bswap64(x)
#define PYMQ_BE16(x) __builtin_bswap16(x)
#endif

static inline void pymq_put_i16(char *p, int16_t v) { uint16_t x = PYMQ_BE16((uint16_t)v); memcpy(p, &x, 2); }
static inline void pymq_put_i32(char *p, int32_t v) { uint32_t x = PYMQ_BE32((uint32_t)v); memcpy(p, &x, 4); }
static inline void pymq_put_i64(char *p, int64_t v) { uint64_t x = PYMQ_BE64((uint64_t)v); memcpy(p, &x, 8); }
static inline int16_t pymq_get_i16(const char *p) { uint16_t x; memcpy(&x, p, 2); return (int16_t)PYMQ_BE16(x); }
static inline int32_t pymq_get_i32(const char *p) { uint32_t x; memcpy(&x, p, 4); return (int32_t)PYMQ_BE32(x); }
static inline int64_t pymq_get_i64(const char *p) { uint64_t x; memcpy(&x, p, 8); return (int64_t)PYMQ_BE64(x); }

#endif
