/* A vectorizable e^x for x <= 0, and the sigmoid from it, shared by the C kernels. */
#ifndef TANDEM_FASTMATH_H
#define TANDEM_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* e^x for x <= 0 (softmax weights) without libm calls, so the loops vectorize:
 * e^x = 2^n * e^f with n = round(x / ln 2) and |f| <= ln 2 / 2, e^f by its Taylor
 * polynomial to degree 7 (truncation error < 6e-9, below fp32 rounding). */
static inline float exp_nonpositive(float x)
{
    x = x < -87.0f ? -87.0f : x; /* keeps 2^n a normal float; e^-87 is 0 in practice */
    const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float f = x - n * 0.693147180559945309f;
    float p = 1.0f / 5040.0f;
    p = p * f + 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* 1 / (1 + e^-x), from e^-|x| (never above 1: no overflow for any x) */
static inline float sigmoid(float x)
{
    const float e = exp_nonpositive(x >= 0.0f ? -x : x);
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

#endif
