/* kiln_compile (kiln.h, "Compiler") from a C program linked against libkiln.so only: the engine
 * it writes is byte for byte the one `kiln compile` wrote with the same options, calibration
 * sets and the message callback work, and bad arguments return a clear status.
 * Usage: kiln_capi_compile_test MODELS_DIR (relu.kiln there is `kiln compile relu.onnx
 * --shape-range x:1..4x3`, written at build time). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/kiln.h"

static char g_models[1024];

static const char* path_in(const char* name, char* buf, size_t size) {
  snprintf(buf, size, "%s/%s", g_models, name);
  return buf;
}

/* The file's bytes (malloc'd) and size; NULL when it cannot be read. */
static unsigned char* read_all(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* data = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

static int files_equal(const char* a, const char* b) {
  size_t na = 0, nb = 0;
  unsigned char* da = read_all(a, &na);
  unsigned char* db = read_all(b, &nb);
  int same = da && db && na == nb && na > 0 && memcmp(da, db, na) == 0;
  free(da);
  free(db);
  return same;
}

struct Seen {
  int reports;
  int gate_pass;
};

static void on_message(void* user, KilnMessageKind kind, const char* text) {
  struct Seen* seen = user;
  if (kind == KILN_MESSAGE_REPORT) ++seen->reports;
  if (strstr(text, "precision gate: PASS")) seen->gate_pass = 1;
}

static void test_same_engine_as_the_cli(void) {
  char model[1200], cli[1200], out[1200];
  path_in("relu.onnx", model, sizeof model);
  path_in("relu.kiln", cli, sizeof cli);
  path_in("relu_c.kiln", out, sizeof out);
  KilnCompileOptions* o = NULL;
  CHECK(kiln_compile_options_create(&o) == KILN_OK);
  CHECK(kiln_compile_options_add_shape(o, "x:1..4x3") == KILN_OK);
  struct Seen seen = {0, 0};
  CHECK(kiln_compile_options_set_message_callback(o, on_message, &seen) == KILN_OK);
  KilnCompileResult* r = NULL;
  CHECK(kiln_compile(model, out, o, &r) == KILN_OK);
  CHECK(r != NULL);
  CHECK(files_equal(cli, out));
  const char* path = NULL;
  CHECK(kiln_compile_result_engine_path(r, &path) == KILN_OK && strcmp(path, out) == 0);
  const char* report = NULL;
  CHECK(kiln_compile_result_report(r, &report) == KILN_OK);
  CHECK(strstr(report, "nodes: 1 -> 1") != NULL);
  CHECK(strstr(report, "precision gate: PASS on 2 input sets") != NULL);
  int ran = 0, passed = 0;
  const char* failure = NULL;
  CHECK(kiln_compile_result_gate(r, &ran, &passed, &failure) == KILN_OK);
  CHECK(ran == 1 && passed == 1 && strcmp(failure, "") == 0);
  size_t fallbacks = 99;
  double share = -1;
  CHECK(kiln_compile_result_fallbacks(r, &fallbacks, &share) == KILN_OK);
  CHECK(fallbacks == 0 && share == 0.0);
  uint64_t bytes = 0;
  double ms = -1;
  CHECK(kiln_compile_result_stats(r, &bytes, &ms) == KILN_OK && bytes > 0 && ms >= 0);
  CHECK(seen.reports >= 5 && seen.gate_pass);
  kiln_compile_result_destroy(r);
  kiln_compile_options_destroy(o);

  /* The engine opens and runs. */
  KilnSession* s = NULL;
  CHECK(kiln_session_open(out, NULL, &s) == KILN_OK);
  kiln_session_destroy(s);
}

static void test_calibration_sets(void) {
  char model[1200], out[1200];
  path_in("relu.onnx", model, sizeof model);
  path_in("relu_calibrated.kiln", out, sizeof out);
  float x[6] = {-1, 2, -3, 4, -5, 6};
  int64_t dims[2] = {2, 3};
  KilnValue* v = NULL;
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, x, sizeof x, KILN_MEMORY_BORROW,
                                 &v) == KILN_OK);
  const char* names[1] = {"x"};
  const KilnValue* values[1] = {v};
  KilnCompileOptions* o = NULL;
  CHECK(kiln_compile_options_create(&o) == KILN_OK);
  CHECK(kiln_compile_options_add_calibration_set(o, names, values, 1) == KILN_OK);
  CHECK(kiln_compile_options_add_calibration_set(o, names, values, 1) == KILN_OK);
  kiln_value_destroy(v); /* the options hold their own copy */
  KilnCompileResult* r = NULL;
  CHECK(kiln_compile(model, out, o, &r) == KILN_OK);
  const char* report = "";
  CHECK(kiln_compile_result_report(r, &report) == KILN_OK);
  CHECK(strstr(report, "precision gate: PASS on 2 calibration input sets") != NULL);
  kiln_compile_result_destroy(r);

  /* A set naming an input the model lacks. */
  const char* wrong[1] = {"nope"};
  KilnValue* w = NULL;
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, x, sizeof x, KILN_MEMORY_COPY, &w) ==
        KILN_OK);
  const KilnValue* wrong_values[1] = {w};
  KilnCompileOptions* bad = NULL;
  CHECK(kiln_compile_options_create(&bad) == KILN_OK);
  CHECK(kiln_compile_options_add_calibration_set(bad, wrong, wrong_values, 1) == KILN_OK);
  CHECK_STATUS(kiln_compile(model, out, bad, NULL), KILN_NOT_FOUND,
               "the model has no input named 'nope'");
  kiln_value_destroy(w);
  kiln_compile_options_destroy(bad);
  kiln_compile_options_destroy(o);
}

static void test_errors(void) {
  char model[1200], out[1200], missing[1200];
  path_in("relu.onnx", model, sizeof model);
  path_in("relu_err.kiln", out, sizeof out);
  path_in("no_such_model.onnx", missing, sizeof missing);
  CHECK_STATUS(kiln_compile(missing, out, NULL, NULL), KILN_NOT_FOUND, "no_such_model.onnx");
  CHECK_STATUS(kiln_compile(NULL, out, NULL, NULL), KILN_INVALID_ARGUMENT, "model_path");
  KilnCompileResult* r = (KilnCompileResult*)&g_models; /* overwritten with NULL on failure */
  CHECK(kiln_compile(missing, out, NULL, &r) == KILN_NOT_FOUND && r == NULL);

  KilnCompileOptions* o = NULL;
  CHECK(kiln_compile_options_create(&o) == KILN_OK);
  CHECK_STATUS(kiln_compile_options_add_shape(o, "x"), KILN_INVALID_ARGUMENT, "must be NAME:");
  CHECK_STATUS(kiln_compile_options_add_shape(o, "x:1..fourx3"), KILN_INVALID_ARGUMENT,
               "is not a number or MIN..MAX");
  CHECK_STATUS(kiln_compile_options_add_shape(o, "x:4..1x3"), KILN_INVALID_ARGUMENT,
               "bad dim range");
  CHECK_STATUS(kiln_compile_options_set_config(o, "optimise", "1"), KILN_INVALID_ARGUMENT,
               "did you mean 'optimize'?");
  CHECK_STATUS(kiln_compile_options_set_config(o, "seed", "-3"), KILN_INVALID_ARGUMENT, "seed");
  CHECK_STATUS(kiln_compile_options_set_config(o, "dim", "batch"), KILN_INVALID_ARGUMENT, "NAME=N");
  CHECK_STATUS(kiln_compile_options_set_verify_timeout(o, -1), KILN_INVALID_ARGUMENT, ">= 0");
  CHECK_STATUS(kiln_compile_options_set_threads(o, -2), KILN_INVALID_ARGUMENT, "threads");
  CHECK_STATUS(kiln_compile_options_add_shape(NULL, "x:1x3"), KILN_INVALID_ARGUMENT, "options");
  /* A dim the model does not have, found once the model is read. */
  CHECK(kiln_compile_options_set_config(o, "dim", "batc=2") == KILN_OK);
  CHECK_STATUS(kiln_compile(model, out, o, NULL), KILN_INVALID_ARGUMENT, "did you mean 'batch'?");
  kiln_compile_options_destroy(o);

  /* An engine is not a model to compile. */
  char engine[1200];
  path_in("relu.kiln", engine, sizeof engine);
  CHECK_STATUS(kiln_compile(engine, out, NULL, NULL), KILN_INVALID_ARGUMENT,
               "already a compiled Kiln engine");
  CHECK_STATUS(kiln_compile_result_report(NULL, NULL), KILN_INVALID_ARGUMENT, "result");
  kiln_compile_result_destroy(NULL);
  kiln_compile_options_destroy(NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODELS_DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_models, sizeof g_models, "%s", argv[1]);
  test_same_engine_as_the_cli();
  test_calibration_sets();
  test_errors();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
