// Symbol visibility for the cuarrow shared library.
#pragma once

#if defined(CUARROW_STATIC)
#define CUARROW_EXPORT
#elif defined(__GNUC__)
#define CUARROW_EXPORT __attribute__((visibility("default")))
#else
#define CUARROW_EXPORT
#endif
