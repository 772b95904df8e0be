/* The C ABI (kiln.h) from a C program, linked against libkiln.so only: opening models, reading
 * their inputs and outputs, running with copied and borrowed buffers, and every kind of bad
 * argument returning a clear status with the process healthy.
 * Usage: kiln_capi_c_test MODELS_DIR (the directory make_models.py and `kiln compile` fill). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/kiln.h"

static char g_models[1024];

static const char* model_path(const char* name) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/%s", g_models, name);
  return path;
}

static KilnSession* open_model(const char* name) {
  KilnSession* s = NULL;
  KilnStatus st = kiln_session_open(model_path(name), NULL, &s);
  if (st != KILN_OK) {
    fprintf(stderr, "cannot open %s: %s\n", name, kiln_last_error_message());
    exit(1);
  }
  return s;
}

static void test_library(void) {
  CHECK(strlen(kiln_version()) > 0);
  CHECK(kiln_api_version() == KILN_API_VERSION);
  CHECK(strcmp(kiln_status_name(KILN_NOT_FOUND), "NotFound") == 0);
  CHECK(strcmp(kiln_status_name((KilnStatus)42), "Unknown") == 0);
  CHECK(strcmp(kiln_dtype_name(KILN_DTYPE_FLOAT32), "float") == 0);
  CHECK(strcmp(kiln_dtype_name((KilnDataType)-3), "undefined") == 0);
  CHECK(kiln_dtype_size(KILN_DTYPE_INT64) == 8);
  CHECK(kiln_dtype_size(KILN_DTYPE_BOOL) == 1);
  CHECK(kiln_dtype_size(KILN_DTYPE_STRING) == 0);
}

static void test_options(void) {
  KilnSessionOptions* o = NULL;
  CHECK_STATUS(kiln_options_create(NULL), KILN_INVALID_ARGUMENT, "'out' is NULL");
  CHECK(kiln_options_create(&o) == KILN_OK && o != NULL);
  CHECK(kiln_options_set_threads(o, 2) == KILN_OK);
  CHECK_STATUS(kiln_options_set_threads(o, -1), KILN_INVALID_ARGUMENT, "got -1");
  CHECK_STATUS(kiln_options_set_threads(NULL, 1), KILN_INVALID_ARGUMENT, "'options' is NULL");
  CHECK_STATUS(kiln_options_set_device(o, NULL), KILN_INVALID_ARGUMENT, "'device' is NULL");
  CHECK_STATUS(kiln_options_set_config(o, NULL, "v"), KILN_INVALID_ARGUMENT, "'key' is NULL");
  CHECK_STATUS(kiln_options_set_config(o, "", "v"), KILN_INVALID_ARGUMENT, "key is empty");
  CHECK(kiln_options_set_config(o, "some.key", "1") == KILN_OK);
  CHECK(kiln_options_set_optimize(o, 0) == KILN_OK);

  /* A device this build does not know is refused at open, naming it and the known ones. */
  CHECK(kiln_options_set_device(o, "tpu") == KILN_OK);
  KilnSession* s = (KilnSession*)0x1;
  CHECK_STATUS(kiln_session_open(model_path("relu.onnx"), o, &s), KILN_UNSUPPORTED,
               "unknown device 'tpu': this build knows cpu, gpu");
  CHECK(s == NULL);
  kiln_options_destroy(o);
  kiln_options_destroy(NULL);
}

static void test_open_errors(void) {
  KilnSession* s = NULL;
  CHECK_STATUS(kiln_session_open(NULL, NULL, &s), KILN_INVALID_ARGUMENT, "'path' is NULL");
  CHECK_STATUS(kiln_session_open(model_path("relu.onnx"), NULL, NULL), KILN_INVALID_ARGUMENT,
               "'out' is NULL");
  CHECK_STATUS(kiln_session_open(model_path("missing.onnx"), NULL, &s), KILN_NOT_FOUND,
               "missing.onnx");
  CHECK(s == NULL);
  const char garbage[] = "this is not a model";
  CHECK(kiln_session_open_from_memory(garbage, sizeof garbage, NULL, &s) != KILN_OK);
  CHECK(s == NULL);
  CHECK(strlen(kiln_last_error_message()) > 0);
  CHECK_STATUS(kiln_session_open_from_memory(NULL, 3, NULL, &s), KILN_INVALID_ARGUMENT,
               "'data' is NULL");
  kiln_session_destroy(NULL);
}

static void test_io_info(void) {
  KilnSession* s = open_model("basic.onnx");
  size_t n = 0;
  CHECK(kiln_session_input_count(s, &n) == KILN_OK && n == 4);
  CHECK(kiln_session_output_count(s, &n) == KILN_OK && n == 5);
  const char* name = NULL;
  CHECK(kiln_session_io_name(s, KILN_IO_INPUT, 0, &name) == KILN_OK && strcmp(name, "x") == 0);
  CHECK(kiln_session_io_name(s, KILN_IO_OUTPUT, 3, &name) == KILN_OK && strcmp(name, "s_id") == 0);
  CHECK_STATUS(kiln_session_io_name(s, KILN_IO_INPUT, 4, &name), KILN_INVALID_ARGUMENT,
               "input index 4 is out of range");
  CHECK_STATUS(kiln_session_io_name(s, (KilnIo)7, 0, &name), KILN_INVALID_ARGUMENT, "got 7");
  CHECK_STATUS(kiln_session_io_name(NULL, KILN_IO_INPUT, 0, &name), KILN_INVALID_ARGUMENT,
               "'session' is NULL");

  KilnTypeKind kind;
  KilnDataType dtype;
  CHECK(kiln_session_io_type(s, KILN_IO_INPUT, 2, &kind, &dtype) == KILN_OK);
  CHECK(kind == KILN_TYPE_TENSOR && dtype == KILN_DTYPE_STRING);
  CHECK(kiln_session_io_type(s, KILN_IO_OUTPUT, 4, NULL, &dtype) == KILN_OK);
  CHECK(dtype == KILN_DTYPE_BOOL);

  int64_t rank = 0;
  int64_t dims[4] = {0, 0, 0, 0};
  CHECK(kiln_session_io_rank(s, KILN_IO_INPUT, 0, &rank) == KILN_OK && rank == 2);
  CHECK(kiln_session_io_dims(s, KILN_IO_INPUT, 0, dims, 4) == KILN_OK);
  CHECK(dims[0] == -1 && dims[1] == 3);
  CHECK_STATUS(kiln_session_io_dims(s, KILN_IO_INPUT, 0, dims, 1), KILN_INVALID_ARGUMENT,
               "capacity 1 is less than the rank 2");
  KilnDim d;
  CHECK(kiln_session_io_dim(s, KILN_IO_INPUT, 0, 0, &d) == KILN_OK);
  CHECK(d.value == -1 && strcmp(d.symbol, "batch") == 0 && d.min == 0 && d.max == INT64_MAX);
  CHECK(kiln_session_io_dim(s, KILN_IO_INPUT, 0, 1, &d) == KILN_OK);
  CHECK(d.value == 3 && strcmp(d.symbol, "") == 0 && d.min == 3 && d.max == 3);
  CHECK_STATUS(kiln_session_io_dim(s, KILN_IO_INPUT, 0, 2, &d), KILN_INVALID_ARGUMENT,
               "axis 2 is out of range");
  kiln_session_destroy(s);
}

/* Feeds for basic.onnx; x borrowed or copied. */
typedef struct Feeds {
  float x[6];
  int64_t n[2];
  uint8_t b[2];
  KilnValue* values[4];
} Feeds;

static const char* kBasicInputs[4] = {"x", "n", "s", "b"};

static void make_feeds(Feeds* f, KilnMemoryMode x_mode) {
  for (int i = 0; i < 6; ++i) f->x[i] = (float)i - 2.5f;
  f->n[0] = 7;
  f->n[1] = -40;
  f->b[0] = 1;
  f->b[1] = 0;
  const int64_t x_dims[2] = {2, 3};
  const int64_t two = 2;
  const char* strings[2] = {"kiln", "h\xc3\xa9llo"};
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, x_dims, 2, f->x, sizeof f->x, x_mode,
                                 &f->values[0]) == KILN_OK);
  CHECK(kiln_value_create_tensor(KILN_DTYPE_INT64, &two, 1, f->n, sizeof f->n, KILN_MEMORY_COPY,
                                 &f->values[1]) == KILN_OK);
  CHECK(kiln_value_create_string_tensor(&two, 1, strings, NULL, &f->values[2]) == KILN_OK);
  CHECK(kiln_value_create_tensor(KILN_DTYPE_BOOL, &two, 1, f->b, sizeof f->b, KILN_MEMORY_COPY,
                                 &f->values[3]) == KILN_OK);
}

static void free_values(KilnValue** values, size_t n) {
  for (size_t i = 0; i < n; ++i) kiln_value_destroy(values[i]);
}

static void test_run(KilnMemoryMode x_mode) {
  KilnSession* s = open_model("basic.onnx");
  Feeds f;
  make_feeds(&f, x_mode);
  KilnValue* out[5];
  CHECK(kiln_session_run(s, kBasicInputs, (const KilnValue* const*)f.values, 4, NULL, 5, out) ==
        KILN_OK);

  KilnDataType dtype;
  size_t rank = 0;
  int64_t dims[2];
  const void* data = NULL;
  size_t bytes = 0;
  CHECK(kiln_value_dtype(out[0], &dtype) == KILN_OK && dtype == KILN_DTYPE_FLOAT32);
  CHECK(kiln_value_rank(out[0], &rank) == KILN_OK && rank == 2);
  CHECK(kiln_value_dims(out[0], dims, 2) == KILN_OK && dims[0] == 2 && dims[1] == 3);
  CHECK(kiln_value_data(out[0], &data, &bytes) == KILN_OK && bytes == 6 * sizeof(float));
  for (int i = 0; i < 6; ++i) CHECK(((const float*)data)[i] == fmaxf(0.0f, f.x[i]));

  /* x_id hands x back: with a borrowed x it must be a copy, never the caller's buffer. */
  CHECK(kiln_value_data(out[1], &data, NULL) == KILN_OK);
  if (x_mode == KILN_MEMORY_BORROW) CHECK(data != (const void*)f.x);
  CHECK(memcmp(data, f.x, sizeof f.x) == 0);

  CHECK(kiln_value_data(out[2], &data, NULL) == KILN_OK);
  CHECK(((const int64_t*)data)[0] == 14 && ((const int64_t*)data)[1] == -80);

  const char* str = NULL;
  size_t len = 0;
  CHECK(kiln_value_string(out[3], 1, &str, &len) == KILN_OK);
  CHECK(len == 6 && memcmp(str, "h\xc3\xa9llo", 6) == 0);
  CHECK_STATUS(kiln_value_string(out[3], 2, &str, &len), KILN_INVALID_ARGUMENT, "index 2");
  CHECK_STATUS(kiln_value_data(out[3], &data, NULL), KILN_INVALID_ARGUMENT, "kiln_value_string");

  CHECK(kiln_value_data(out[4], &data, NULL) == KILN_OK);
  CHECK(((const uint8_t*)data)[0] == 0 && ((const uint8_t*)data)[1] == 1);

  /* Outputs outlive the inputs and the caller's buffers. */
  free_values(f.values, 4);
  memset(f.x, 0, sizeof f.x);
  CHECK(kiln_value_data(out[1], &data, NULL) == KILN_OK && ((const float*)data)[5] == 2.5f);
  free_values(out, 5);

  /* Asking for outputs by name, in another order. */
  make_feeds(&f, x_mode);
  const char* names[2] = {"n2", "y"};
  KilnValue* two[2];
  CHECK(kiln_session_run(s, kBasicInputs, (const KilnValue* const*)f.values, 4, names, 2, two) ==
        KILN_OK);
  CHECK(kiln_value_dtype(two[0], &dtype) == KILN_OK && dtype == KILN_DTYPE_INT64);
  CHECK(kiln_value_dtype(two[1], &dtype) == KILN_OK && dtype == KILN_DTYPE_FLOAT32);
  free_values(two, 2);
  free_values(f.values, 4);
  kiln_session_destroy(s);
}

static void all_null(KilnValue** out, size_t n) {
  for (size_t i = 0; i < n; ++i) CHECK(out[i] == NULL);
}

static void test_run_errors(void) {
  KilnSession* s = open_model("basic.onnx");
  Feeds f;
  make_feeds(&f, KILN_MEMORY_COPY);
  const KilnValue* const* in = (const KilnValue* const*)f.values;
  KilnValue* out[5];

  CHECK_STATUS(kiln_session_run(NULL, kBasicInputs, in, 4, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "'session' is NULL");
  CHECK_STATUS(kiln_session_run(s, NULL, in, 4, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "input_names and inputs must not be NULL");
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, in, 4, NULL, 5, NULL), KILN_INVALID_ARGUMENT,
               "outputs must not be NULL");
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, in, 4, NULL, 3, out), KILN_INVALID_ARGUMENT,
               "output count 5, got 3");

  /* A missing input, an unknown one, one given twice, a NULL name or value. */
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, in, 3, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "'b' was not given");
  all_null(out, 5);
  const char* unknown[4] = {"x", "n", "s", "bogus"};
  CHECK_STATUS(kiln_session_run(s, unknown, in, 4, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "no input named 'bogus'");
  const char* twice[4] = {"x", "n", "x", "b"};
  CHECK_STATUS(kiln_session_run(s, twice, in, 4, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "'x' is given twice");
  const char* null_name[4] = {"x", NULL, "s", "b"};
  CHECK_STATUS(kiln_session_run(s, null_name, in, 4, NULL, 5, out), KILN_INVALID_ARGUMENT,
               "input_names[1] is NULL");
  const KilnValue* null_value[4] = {f.values[0], f.values[1], NULL, f.values[3]};
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, null_value, 4, NULL, 5, out),
               KILN_INVALID_ARGUMENT, "inputs[2] (for input 's') is NULL");

  /* An unknown output name. */
  const char* bad_out[1] = {"nope"};
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, in, 4, bad_out, 1, out), KILN_NOT_FOUND,
               "no output named 'nope'");
  CHECK(out[0] == NULL);

  /* Wrong element type and wrong shape for x. */
  double xd[6] = {0};
  const int64_t x_dims[2] = {2, 3};
  const int64_t bad_dims[2] = {3, 2};
  KilnValue* wrong = NULL;
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT64, x_dims, 2, xd, sizeof xd, KILN_MEMORY_COPY,
                                 &wrong) == KILN_OK);
  const KilnValue* wrong_type[4] = {wrong, f.values[1], f.values[2], f.values[3]};
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, wrong_type, 4, NULL, 5, out),
               KILN_INVALID_ARGUMENT, "expected element type float, got double");
  kiln_value_destroy(wrong);
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, bad_dims, 2, f.x, sizeof f.x, KILN_MEMORY_COPY,
                                 &wrong) == KILN_OK);
  const KilnValue* wrong_shape[4] = {wrong, f.values[1], f.values[2], f.values[3]};
  CHECK_STATUS(kiln_session_run(s, kBasicInputs, wrong_shape, 4, NULL, 5, out),
               KILN_INVALID_ARGUMENT, "input 'x': expected shape");
  kiln_value_destroy(wrong);
  all_null(out, 5);

  /* The session still runs after every refusal. */
  CHECK(kiln_session_run(s, kBasicInputs, in, 4, NULL, 5, out) == KILN_OK);
  free_values(out, 5);
  free_values(f.values, 4);
  kiln_session_destroy(s);
}

static void test_value_errors(void) {
  KilnValue* v = (KilnValue*)0x1;
  float data[6] = {0};
  const int64_t dims[2] = {2, 3};
  const int64_t negative[2] = {2, -3};
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, data, 20, KILN_MEMORY_COPY, &v),
      KILN_INVALID_ARGUMENT, "data_size is 20 bytes but float[2,3] needs 24");
  CHECK(v == NULL);
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, negative, 2, data, 24, KILN_MEMORY_COPY, &v),
      KILN_INVALID_ARGUMENT, "dim 1 is -3");
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, NULL, 2, data, 24, KILN_MEMORY_COPY, &v),
      KILN_INVALID_ARGUMENT, "'dims' is NULL");
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, NULL, 24, KILN_MEMORY_COPY, &v),
      KILN_INVALID_ARGUMENT, "'data' is NULL");
  CHECK_STATUS(kiln_value_create_tensor((KilnDataType)99, dims, 2, data, 24, KILN_MEMORY_COPY, &v),
               KILN_INVALID_ARGUMENT, "99 is not a KilnDataType");
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_COMPLEX64, dims, 2, data, 24, KILN_MEMORY_COPY, &v),
      KILN_UNSUPPORTED, "complex64");
  CHECK_STATUS(kiln_value_create_tensor(KILN_DTYPE_STRING, dims, 2, data, 24, KILN_MEMORY_COPY, &v),
               KILN_INVALID_ARGUMENT, "kiln_value_create_string_tensor");
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, data, 24, (KilnMemoryMode)5, &v),
      KILN_INVALID_ARGUMENT, "mode must be");
  CHECK_STATUS(
      kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, data, 24, KILN_MEMORY_COPY, NULL),
      KILN_INVALID_ARGUMENT, "'out' is NULL");
  /* A misaligned borrowed buffer, and a bool byte that is not 0 or 1. */
  const int64_t one = 1;
  CHECK_STATUS(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, &one, 1, (const char*)data + 1, 4,
                                        KILN_MEMORY_BORROW, &v),
               KILN_INVALID_ARGUMENT, "not aligned");
  const uint8_t bools[2] = {1, 2};
  const int64_t two = 2;
  CHECK_STATUS(kiln_value_create_tensor(KILN_DTYPE_BOOL, &two, 1, bools, 2, KILN_MEMORY_COPY, &v),
               KILN_INVALID_ARGUMENT, "bool element 1 is 2");
  const char* strings[2] = {"a", NULL};
  CHECK_STATUS(kiln_value_create_string_tensor(&two, 1, strings, NULL, &v), KILN_INVALID_ARGUMENT,
               "strings[1] is NULL");

  /* An empty tensor needs no data. */
  const int64_t empty[2] = {0, 3};
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, empty, 2, NULL, 0, KILN_MEMORY_BORROW, &v) ==
        KILN_OK);
  int64_t numel = -1;
  CHECK(kiln_value_numel(v, &numel) == KILN_OK && numel == 0);
  /* Tensor accessors on a non-tensor, sequence accessors on a tensor. */
  size_t len = 0;
  CHECK_STATUS(kiln_value_sequence_length(v, &len), KILN_INVALID_ARGUMENT, "not a sequence");
  CHECK_STATUS(kiln_value_dims(v, NULL, 2), KILN_INVALID_ARGUMENT, "'dims' is NULL");
  CHECK_STATUS(kiln_value_numel(NULL, &numel), KILN_INVALID_ARGUMENT, "'value' is NULL");
  KilnValue* seq = NULL;
  const KilnValue* items[1] = {v};
  CHECK(kiln_value_create_sequence(items, 1, &seq) == KILN_OK);
  CHECK_STATUS(kiln_value_numel(seq, &numel), KILN_INVALID_ARGUMENT, "not a tensor");
  kiln_value_destroy(seq);
  kiln_value_destroy(v);
  kiln_value_destroy(NULL);
}

static void test_engine_and_memory(void) {
  /* relu.kiln was compiled with x:1..4x3: the range is declared and enforced. */
  KilnSession* s = open_model("relu.kiln");
  KilnDim d;
  CHECK(kiln_session_io_dim(s, KILN_IO_INPUT, 0, 0, &d) == KILN_OK);
  CHECK(d.value == -1 && d.min == 1 && d.max == 4);
  float x[15] = {0};
  x[0] = -1.0f;
  x[1] = 3.0f;
  const int64_t dims[2] = {5, 3};
  KilnValue* in = NULL;
  KilnValue* out = NULL;
  const char* names[1] = {"x"};
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, dims, 2, x, sizeof x, KILN_MEMORY_BORROW,
                                 &in) == KILN_OK);
  CHECK_STATUS(kiln_session_run(s, names, (const KilnValue* const*)&in, 1, NULL, 1, &out),
               KILN_INVALID_ARGUMENT, "outside the declared range");
  CHECK(out == NULL);
  kiln_value_destroy(in);
  kiln_session_destroy(s);

  /* The same model from memory, with profiling on. */
  FILE* file = fopen(model_path("relu.onnx"), "rb");
  CHECK(file != NULL);
  if (!file) return;
  char bytes[4096];
  size_t size = fread(bytes, 1, sizeof bytes, file);
  fclose(file);
  KilnSessionOptions* o = NULL;
  CHECK(kiln_options_create(&o) == KILN_OK);
  CHECK(kiln_options_set_profiling(o, 1) == KILN_OK);
  CHECK(kiln_session_open_from_memory(bytes, size, o, &s) == KILN_OK);
  kiln_options_destroy(o);
  const int64_t small[2] = {1, 3};
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, small, 2, x, 3 * sizeof(float),
                                 KILN_MEMORY_COPY, &in) == KILN_OK);
  CHECK(kiln_session_run(s, names, (const KilnValue* const*)&in, 1, NULL, 1, &out) == KILN_OK);
  const void* data = NULL;
  CHECK(kiln_value_data(out, &data, NULL) == KILN_OK);
  CHECK(((const float*)data)[0] == 0.0f && ((const float*)data)[1] == 3.0f);
  KilnProfile* p = NULL;
  size_t count = 0;
  const char* op = NULL;
  double us = -1;
  CHECK(kiln_session_profile(s, &p) == KILN_OK);
  CHECK(kiln_profile_count(p, &count) == KILN_OK && count == 1);
  CHECK(kiln_profile_entry(p, 0, NULL, &op, &us) == KILN_OK);
  CHECK(strcmp(op, "Relu") == 0 && us >= 0);
  CHECK_STATUS(kiln_profile_entry(p, 1, NULL, &op, &us), KILN_INVALID_ARGUMENT, "index 1");
  kiln_profile_destroy(p);
  kiln_value_destroy(out);
  kiln_value_destroy(in);
  kiln_session_destroy(s);
}

static void test_sequence_output(void) {
  KilnSession* s = open_model("seq.onnx");
  KilnTypeKind kind;
  CHECK(kiln_session_io_type(s, KILN_IO_OUTPUT, 0, &kind, NULL) == KILN_OK);
  CHECK(kind == KILN_TYPE_SEQUENCE);
  float x[4] = {1, 2, 3, 4};
  const int64_t four = 4;
  KilnValue* in = NULL;
  KilnValue* out = NULL;
  const char* names[1] = {"x"};
  CHECK(kiln_value_create_tensor(KILN_DTYPE_FLOAT32, &four, 1, x, sizeof x, KILN_MEMORY_BORROW,
                                 &in) == KILN_OK);
  CHECK(kiln_session_run(s, names, (const KilnValue* const*)&in, 1, NULL, 1, &out) == KILN_OK);
  kiln_value_destroy(in);
  KilnValueKind vk;
  size_t len = 0;
  CHECK(kiln_value_kind(out, &vk) == KILN_OK && vk == KILN_VALUE_SEQUENCE);
  CHECK(kiln_value_sequence_length(out, &len) == KILN_OK && len == 4);
  KilnValue* item = NULL;
  const void* data = NULL;
  CHECK(kiln_value_sequence_item(out, 2, &item) == KILN_OK);
  CHECK(kiln_value_data(item, &data, NULL) == KILN_OK && ((const float*)data)[0] == 3.0f);
  kiln_value_destroy(item);
  CHECK_STATUS(kiln_value_sequence_item(out, 4, &item), KILN_INVALID_ARGUMENT, "index 4");
  CHECK(item == NULL);
  kiln_value_destroy(out);
  kiln_session_destroy(s);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODELS_DIR\n", argv[0]);
    return 2;
  }
  snprintf(g_models, sizeof g_models, "%s", argv[1]);
  test_library();
  test_options();
  test_open_errors();
  test_io_info();
  test_run(KILN_MEMORY_COPY);
  test_run(KILN_MEMORY_BORROW);
  test_run_errors();
  test_value_errors();
  test_engine_and_memory();
  test_sequence_output();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
