/* The checks of the C ABI's C test programs: each counts a pass or prints what failed, with the
 * thread's last error message, and the program exits non-zero when any failed. */
#ifndef KILN_TESTS_CAPI_CHECK_H_
#define KILN_TESTS_CAPI_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "kiln/kiln.h"

static int g_failed = 0;
static int g_passed = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (cond) {                                                                                \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kiln_last_error_message());                                                      \
    }                                                                                          \
  } while (0)

/* The call returned `status` and the thread's message mentions `needle`. */
#define CHECK_STATUS(call, status, needle)                                                         \
  do {                                                                                             \
    KilnStatus got_ = (call);                                                                      \
    const char* msg_ = kiln_last_error_message();                                                  \
    if (got_ == (status) && strstr(msg_, (needle)) != NULL) {                                      \
      ++g_passed;                                                                                  \
    } else {                                                                                       \
      ++g_failed;                                                                                  \
      fprintf(stderr, "%s:%d: %s returned %s (\"%s\"), expected %s mentioning \"%s\"\n", __FILE__, \
              __LINE__, #call, kiln_status_name(got_), msg_, kiln_status_name(status), (needle));  \
    }                                                                                              \
  } while (0)

#endif /* KILN_TESTS_CAPI_CHECK_H_ */
