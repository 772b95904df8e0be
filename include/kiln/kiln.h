/* Kiln C ABI: a stable C interface over the Kiln runtime and compiler (libkiln.so).
 *
 * Conventions
 * - Every entry point that can fail returns a KilnStatus. On failure the calling thread's last
 *   error message (kiln_last_error_message) says what went wrong, naming the tensor, file or
 *   argument; outputs are left NULL / untouched. No C++ exception crosses this boundary.
 * - Handles are opaque. Whatever a kiln_*_create / kiln_session_open / kiln_session_run call hands
 *   out, the caller releases with the matching *_destroy (which accept NULL).
 * - Strings returned by the library (names, symbols, messages) are owned by the object they were
 *   read from and stay valid as long as it does, unless a function says otherwise.
 * - Element types use ONNX's TensorProto.DataType numbering.
 * - A session may be run from several threads at once: runs overlap on up to the config entry
 *   "parallel_runs" executors (default: as many runs of the session's threads as the CPUs hold,
 *   so one at a time with one thread per core); the others wait their turn.
 */
#ifndef KILN_KILN_H_
#define KILN_KILN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when an existing declaration changes meaning; additions keep the number. */
#define KILN_API_VERSION 1

typedef enum KilnStatus {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* bad input: a null pointer, a wrong type, shape or name */
  KILN_NOT_FOUND = 2,        /* a file, an output name */
  KILN_UNSUPPORTED = 3,      /* a valid request this build cannot do (op, element type, device) */
  KILN_UNAVAILABLE = 4,      /* a resource is missing right now (memory, a device) */
  KILN_INTERNAL = 5          /* a bug in Kiln */
} KilnStatus;

typedef enum KilnDataType {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_FLOAT32 = 1,
  KILN_DTYPE_UINT8 = 2,
  KILN_DTYPE_INT8 = 3,
  KILN_DTYPE_UINT16 = 4,
  KILN_DTYPE_INT16 = 5,
  KILN_DTYPE_INT32 = 6,
  KILN_DTYPE_INT64 = 7,
  KILN_DTYPE_STRING = 8, /* only through kiln_value_create_string_tensor / kiln_value_string */
  KILN_DTYPE_BOOL = 9,   /* one byte per element, 0 or 1 */
  KILN_DTYPE_FLOAT16 = 10,
  KILN_DTYPE_FLOAT64 = 11,
  KILN_DTYPE_UINT32 = 12,
  KILN_DTYPE_UINT64 = 13,
  KILN_DTYPE_COMPLEX64 = 14,  /* declared for completeness; Unsupported */
  KILN_DTYPE_COMPLEX128 = 15, /* declared for completeness; Unsupported */
  KILN_DTYPE_BFLOAT16 = 16,
  /* The ONNX low-precision types: one byte per element in memory. */
  KILN_DTYPE_FLOAT8E4M3FN = 17,
  KILN_DTYPE_FLOAT8E4M3FNUZ = 18,
  KILN_DTYPE_FLOAT8E5M2 = 19,
  KILN_DTYPE_FLOAT8E5M2FNUZ = 20,
  KILN_DTYPE_UINT4 = 21,
  KILN_DTYPE_INT4 = 22,
  KILN_DTYPE_FLOAT4E2M1 = 23,
  KILN_DTYPE_FLOAT8E8M0 = 24,
  KILN_DTYPE_UINT2 = 25,
  KILN_DTYPE_INT2 = 26
} KilnDataType;

/* What a model input or output is declared as. */
typedef enum KilnTypeKind {
  KILN_TYPE_UNKNOWN = 0,
  KILN_TYPE_TENSOR = 1,
  KILN_TYPE_SEQUENCE = 2, /* a sequence of tensors */
  KILN_TYPE_OPTIONAL = 3
} KilnTypeKind;

/* What a value holds at run time. */
typedef enum KilnValueKind {
  KILN_VALUE_NONE = 0, /* an absent optional */
  KILN_VALUE_TENSOR = 1,
  KILN_VALUE_SEQUENCE = 2
} KilnValueKind;

typedef enum KilnIo { KILN_IO_INPUT = 0, KILN_IO_OUTPUT = 1 } KilnIo;

/* How kiln_value_create_tensor treats the caller's buffer. */
typedef enum KilnMemoryMode {
  KILN_MEMORY_COPY = 0,  /* copied at creation; the caller may free its buffer right away */
  KILN_MEMORY_BORROW = 1 /* used in place: the buffer must stay valid and unchanged until the
                            value is destroyed, and be aligned to the element size. Kiln never
                            writes into it, and outputs never alias it. */
} KilnMemoryMode;

/* One dim of a declared shape. */
typedef struct KilnDim {
  int64_t value;      /* the size when static, -1 otherwise */
  const char* symbol; /* the symbol's name ("batch") when symbolic, "" otherwise */
  int64_t min;        /* the declared range; min == max == value when static */
  int64_t max;        /* INT64_MAX when unbounded */
} KilnDim;

typedef struct KilnSessionOptions KilnSessionOptions;
typedef struct KilnSession KilnSession;
typedef struct KilnValue KilnValue;
typedef struct KilnProfile KilnProfile;
typedef struct KilnCompileOptions KilnCompileOptions;
typedef struct KilnCompileResult KilnCompileResult;

/* ---- Library ---- */

/* "0.1.0": the Kiln version this library was built from. */
KILN_API const char* kiln_version(void);
/* KILN_API_VERSION of the library (to compare with the header's at run time). */
KILN_API int kiln_api_version(void);
/* "OK", "InvalidArgument", ...; "Unknown" for a number outside KilnStatus. */
KILN_API const char* kiln_status_name(KilnStatus status);
/* The message of the most recent failing call on this thread ("" if none). Valid until the next
 * failing call on this thread. */
KILN_API const char* kiln_last_error_message(void);
/* ONNX's lower-case name of an element type ("float", "int64"); "undefined" for unknown values. */
KILN_API const char* kiln_dtype_name(KilnDataType dtype);
/* Bytes per element (1 for bool and the low-precision types); 0 for string and unknown types. */
KILN_API size_t kiln_dtype_size(KilnDataType dtype);

/* ---- Session options ---- */

KILN_API KilnStatus kiln_options_create(KilnSessionOptions** out);
KILN_API void kiln_options_destroy(KilnSessionOptions* options);
/* Intra-op threads; 0 (the default) means one per core. */
KILN_API KilnStatus kiln_options_set_threads(KilnSessionOptions* options, int threads);
/* Non-zero keeps per-node timings of the last run (kiln_session_profile). */
KILN_API KilnStatus kiln_options_set_profiling(KilnSessionOptions* options, int enable);
/* "cpu" (the default); other devices are refused at open with KILN_UNSUPPORTED in this build. */
KILN_API KilnStatus kiln_options_set_device(KilnSessionOptions* options, const char* device);
/* Non-zero (the default) optimizes an ONNX model at open; engines were optimized when compiled. */
KILN_API KilnStatus kiln_options_set_optimize(KilnSessionOptions* options, int enable);
/* A rare knob as a key/value string pair; setting a key again replaces its value. Known keys:
 * "parallel_runs" (overlapping runs of one session, 0 automatic, up to 64; CPU sessions only),
 * "executor" ("kernels" or "interpreter"). */
KILN_API KilnStatus kiln_options_set_config(KilnSessionOptions* options, const char* key,
                                            const char* value);

/* ---- Session ---- */

/* Opens a .kiln engine or an ONNX model (told apart by content). `options` may be NULL. */
KILN_API KilnStatus kiln_session_open(const char* path, const KilnSessionOptions* options,
                                      KilnSession** out);
/* Same from bytes in memory (an ONNX ModelProto or an engine); the bytes are not kept. */
KILN_API KilnStatus kiln_session_open_from_memory(const void* data, size_t size,
                                                  const KilnSessionOptions* options,
                                                  KilnSession** out);
KILN_API void kiln_session_destroy(KilnSession* session);

KILN_API KilnStatus kiln_session_input_count(const KilnSession* session, size_t* count);
KILN_API KilnStatus kiln_session_output_count(const KilnSession* session, size_t* count);
/* The name of input or output `index`. */
KILN_API KilnStatus kiln_session_io_name(const KilnSession* session, KilnIo io, size_t index,
                                         const char** name);
/* Its declared kind and element type (for sequences and optionals, that of the tensors inside;
 * KILN_DTYPE_UNDEFINED when not known). Either out pointer may be NULL. */
KILN_API KilnStatus kiln_session_io_type(const KilnSession* session, KilnIo io, size_t index,
                                         KilnTypeKind* kind, KilnDataType* dtype);
/* Its declared rank, -1 when unknown (or not a tensor). */
KILN_API KilnStatus kiln_session_io_rank(const KilnSession* session, KilnIo io, size_t index,
                                         int64_t* rank);
/* Its declared dims: -1 for a dim that is not static. `capacity` must be at least the rank. */
KILN_API KilnStatus kiln_session_io_dims(const KilnSession* session, KilnIo io, size_t index,
                                         int64_t* dims, size_t capacity);
/* One declared dim with its symbol and range. */
KILN_API KilnStatus kiln_session_io_dim(const KilnSession* session, KilnIo io, size_t index,
                                        size_t axis, KilnDim* dim);

/* Runs the model. `inputs[i]` feeds the input named `input_names[i]`; every input must be fed.
 * With `output_names` NULL, `output_count` must equal the model's output count and outputs come
 * in the model's order; otherwise `outputs[i]` receives the output named `output_names[i]`.
 * The caller destroys every value written to `outputs`. On failure all of them are NULL. */
KILN_API KilnStatus kiln_session_run(KilnSession* session, const char* const* input_names,
                                     const KilnValue* const* inputs, size_t input_count,
                                     const char* const* output_names, size_t output_count,
                                     KilnValue** outputs);

/* Per-node timings of the session's last run (enable profiling in the options first). */
KILN_API KilnStatus kiln_session_profile(const KilnSession* session, KilnProfile** out);
KILN_API void kiln_profile_destroy(KilnProfile* profile);
KILN_API KilnStatus kiln_profile_count(const KilnProfile* profile, size_t* count);
/* Entry `index`: the node's name (may be ""), its op type and its time. Any out may be NULL. */
KILN_API KilnStatus kiln_profile_entry(const KilnProfile* profile, size_t index,
                                       const char** node_name, const char** op_type,
                                       double* microseconds);

/* ---- Values ---- */

/* A tensor of a numeric or bool type over `data` (`data_size` bytes: exactly the element count
 * times kiln_dtype_size). `data` may be NULL only when the tensor has no element. */
KILN_API KilnStatus kiln_value_create_tensor(KilnDataType dtype, const int64_t* dims, size_t rank,
                                             const void* data, size_t data_size,
                                             KilnMemoryMode mode, KilnValue** out);
/* A string tensor; the strings are copied. `lengths` may be NULL for NUL-terminated strings. */
KILN_API KilnStatus kiln_value_create_string_tensor(const int64_t* dims, size_t rank,
                                                    const char* const* strings,
                                                    const size_t* lengths, KilnValue** out);
/* A sequence of the given tensors (they are shared, not copied; the caller still destroys them). */
KILN_API KilnStatus kiln_value_create_sequence(const KilnValue* const* items, size_t count,
                                               KilnValue** out);
KILN_API void kiln_value_destroy(KilnValue* value);

KILN_API KilnStatus kiln_value_kind(const KilnValue* value, KilnValueKind* kind);
/* Tensor accessors: they fail with KILN_INVALID_ARGUMENT on a value that is not a tensor. */
KILN_API KilnStatus kiln_value_dtype(const KilnValue* value, KilnDataType* dtype);
KILN_API KilnStatus kiln_value_rank(const KilnValue* value, size_t* rank);
/* `capacity` must be at least the rank. */
KILN_API KilnStatus kiln_value_dims(const KilnValue* value, int64_t* dims, size_t capacity);
KILN_API KilnStatus kiln_value_numel(const KilnValue* value, int64_t* numel);
/* The elements of a numeric or bool tensor, densely in row-major order; read-only. `size` may be
 * NULL. */
KILN_API KilnStatus kiln_value_data(const KilnValue* value, const void** data, size_t* size);
/* Element `index` of a string tensor (not NUL-terminated when it holds NULs: use `length`). */
KILN_API KilnStatus kiln_value_string(const KilnValue* value, int64_t index, const char** data,
                                      size_t* length);
/* Sequences: the item count, and item `index` as a new value the caller destroys. */
KILN_API KilnStatus kiln_value_sequence_length(const KilnValue* value, size_t* length);
KILN_API KilnStatus kiln_value_sequence_item(const KilnValue* value, size_t index,
                                             KilnValue** item);

/* ---- Compiler ---- */

/* What kiln_compile says while it works (the lines `kiln compile` prints). */
typedef enum KilnMessageKind {
  KILN_MESSAGE_REPORT = 0, /* a line of the compile report */
  KILN_MESSAGE_TRACE = 1,  /* pass traces and graph dumps ("trace_passes", "dump_after") */
  KILN_MESSAGE_NOTE = 2,   /* a remark for the operator, not part of the report */
  KILN_MESSAGE_WARNING = 3 /* an engine written despite drift ("allow_drift") */
} KilnMessageKind;

/* `text` is one or more whole lines, each ending in a newline; valid during the call only. */
typedef void (*KilnMessageCallback)(void* user_data, KilnMessageKind kind, const char* text);

KILN_API KilnStatus kiln_compile_options_create(KilnCompileOptions** out);
KILN_API void kiln_compile_options_destroy(KilnCompileOptions* options);
/* An input's dims, fixed or as ranges: "NAME:1x3x224x224" or "NAME:1..64x3x224x224" (checked
 * here). Each call adds one. */
KILN_API KilnStatus kiln_compile_options_add_shape(KilnCompileOptions* options, const char* spec);
/* Non-zero computes in float16 (docs/FP16.md); default 0. */
KILN_API KilnStatus kiln_compile_options_set_fp16(KilnCompileOptions* options, int enable);
/* Non-zero (the default) stores weights packed for this CPU's kernels; 0 leaves them plain. */
KILN_API KilnStatus kiln_compile_options_set_prepack(KilnCompileOptions* options, int enable);
/* Non-zero (the default) runs the precision gate; 0 writes the engine unchecked. */
KILN_API KilnStatus kiln_compile_options_set_verify(KilnCompileOptions* options, int enable);
/* Non-zero compares the whole shape range's top with the reference too, however costly (the
 * CLI's --verify-full); default 0. */
KILN_API KilnStatus kiln_compile_options_set_verify_full(KilnCompileOptions* options, int enable);
/* The devices the engine is made for, as sessions name them ("cpu", "gpu", "gpu,cpu"): their
 * fusions, kernel choices and memory plan, and the gate's runs; default "cpu". */
KILN_API KilnStatus kiln_compile_options_set_device(KilnCompileOptions* options,
                                                    const char* device);
/* The gate's largest relative L2 error per output, for every element type (default 1e-4, 1e-2
 * with fp16, at least 1e-3 for float16 and 1e-2 for bfloat16 outputs). */
KILN_API KilnStatus kiln_compile_options_set_max_rel_l2(KilnCompileOptions* options,
                                                        double max_rel_l2);
/* Seconds the gate may take (default 60; 0: no limit). */
KILN_API KilnStatus kiln_compile_options_set_verify_timeout(KilnCompileOptions* options,
                                                            double seconds);
/* Intra-op threads of the gate's runs; 0 (the default) means one per core. */
KILN_API KilnStatus kiln_compile_options_set_threads(KilnCompileOptions* options, int threads);
/* Adds one calibration input set: `values[i]` for the input named `names[i]` (copied; inputs a
 * set lacks get random data). The gate checks on these sets instead of generated inputs, and the
 * quantizer calibrates on them. */
KILN_API KilnStatus kiln_compile_options_add_calibration_set(KilnCompileOptions* options,
                                                             const char* const* names,
                                                             const KilnValue* const* values,
                                                             size_t count);
/* Where report lines, traces and warnings go; NULL (the default) sends them to Kiln's log
 * (warnings on stderr, the rest only with KILN_LOG=info). Called on the compiling thread. */
KILN_API KilnStatus kiln_compile_options_set_message_callback(KilnCompileOptions* options,
                                                              KilnMessageCallback callback,
                                                              void* user_data);
/* A rare knob as a key/value string pair, named as `kiln compile`'s flags (docs/API.md):
 * "optimize", "allow_drift", "fp16_io", "fp16_range_check", "trace_passes" ("0"/"1"); "target",
 * "dump_after", "calibration_dir"; "rtol", "atol", "seed" (numbers); "dim" ("NAME=N"), "input"
 * ("NAME=FILE.pb"),
 * "calibration_npz" (a numpy .npz file: one calibration input set) and "fp16_keep_op" (an op type)
 * add one each time. An unknown key is KILN_INVALID_ARGUMENT. */
KILN_API KilnStatus kiln_compile_options_set_config(KilnCompileOptions* options, const char* key,
                                                    const char* value);

/* Compiles the ONNX model at `model_path` into the engine file `output_path` (NULL: the model's
 * path with the extension .kiln), as `kiln compile` does: the same options give the same engine.
 * `options` may be NULL. An engine that fails the precision gate is not written (the status is
 * KILN_INVALID_ARGUMENT, the message names the output and the first drifting node). `result`
 * may be NULL; otherwise the caller destroys what is written there. */
KILN_API KilnStatus kiln_compile(const char* model_path, const char* output_path,
                                 const KilnCompileOptions* options, KilnCompileResult** result);
KILN_API void kiln_compile_result_destroy(KilnCompileResult* result);
/* The engine file written. */
KILN_API KilnStatus kiln_compile_result_engine_path(const KilnCompileResult* result,
                                                    const char** path);
/* The whole compile report, the text `kiln compile` prints. */
KILN_API KilnStatus kiln_compile_result_report(const KilnCompileResult* result, const char** text);
/* Whether the gate ran and passed, and why not ("" when it passed or did not run). Any out may
 * be NULL. */
KILN_API KilnStatus kiln_compile_result_gate(const KilnCompileResult* result, int* ran, int* passed,
                                             const char** failure);
/* Nodes left on reference kernels (no fast kernel) and their share of the FLOPs, 0..1. Either out
 * may be NULL. */
KILN_API KilnStatus kiln_compile_result_fallbacks(const KilnCompileResult* result, size_t* nodes,
                                                  double* flop_share);
/* The engine file's size in bytes and the compile's wall time. Either out may be NULL. */
KILN_API KilnStatus kiln_compile_result_stats(const KilnCompileResult* result,
                                              uint64_t* engine_bytes, double* milliseconds);

/* ---- Quantizer ---- */

/* `kiln quantize` (docs/QUANTIZATION.md): static INT8 into a QDQ ONNX model, dynamic INT8, or
 * INT4 weight-only (MatMulNBits). */
typedef struct KilnQuantizeOptions KilnQuantizeOptions;
typedef struct KilnQuantizeResult KilnQuantizeResult;

KILN_API KilnStatus kiln_quantize_options_create(KilnQuantizeOptions** out);
KILN_API void kiln_quantize_options_destroy(KilnQuantizeOptions* options);
/* `kiln quantize`'s flags as key/value strings: "method" ("minmax", "percentile" or "entropy"),
 * "calibration_cache" (a file path, as --calibration-cache), "metric" ("cosine", "top1",
 * "max-abs-steps" or "script:PATH"), "max_drop", "metric_timeout" (numbers),
 * "sensitivity_report" (a JSON file path),
 * "per_channel", "quantized_residuals", "dynamic", "allow_drift" ("0"/"1"); "percentile", "min_cosine", "min_top1",
 * "threads", "seed", "fallback_nodes", "max_collapsed" (numbers); "calibration_dir"; "calibration_npz" (one
 * input set per file); INT4: "int4", "symmetric" ("0"/"1"), "block_size" (16-256),
 * "int4_method" ("rtn" or "gptq"), "gptq_damp";
 * "exclude_node" and "op_type" add one each time (the first "op_type" replaces the default
 * Conv, MatMul, Gemm). An unknown key is KILN_INVALID_ARGUMENT naming the closest one. */
KILN_API KilnStatus kiln_quantize_options_set_config(KilnQuantizeOptions* options, const char* key,
                                                     const char* value);
/* Quantizes the ONNX model at `model_path` into `output_path` as `kiln quantize` does (the same
 * options write the same file). `options` may be NULL. A model that misses the gate is not
 * written (KILN_INVALID_ARGUMENT naming the output and the most drifting nodes) unless
 * "allow_drift". `result` may be NULL; otherwise the caller destroys what is written there. */
KILN_API KilnStatus kiln_quantize(const char* model_path, const char* output_path,
                                  const KilnQuantizeOptions* options, KilnQuantizeResult** result);
KILN_API void kiln_quantize_result_destroy(KilnQuantizeResult* result);
/* The report, the lines `kiln quantize` prints. */
KILN_API KilnStatus kiln_quantize_result_report(const KilnQuantizeResult* result,
                                                const char** text);
/* Whether the gate passed, why not ("" when it did), and how many nodes were quantized. Any out
 * may be NULL. */
KILN_API KilnStatus kiln_quantize_result_gate(const KilnQuantizeResult* result, int* passed,
                                              const char** failure, size_t* quantized_nodes);

/* ---- Pruner ---- */

/* `kiln prune` (docs/PRUNING.md): magnitude or 2:4 masks, or whole output channels removed. */
typedef struct KilnPruneOptions KilnPruneOptions;
typedef struct KilnPruneResult KilnPruneResult;

KILN_API KilnStatus kiln_prune_options_create(KilnPruneOptions** out);
KILN_API void kiln_prune_options_destroy(KilnPruneOptions* options);
/* `kiln prune`'s flags as key/value strings: "method" ("channels", "magnitude", "2:4"),
 * "criterion" ("l1", "l2", "bn-gamma", "contribution"); "global", "search", "allow_drift",
 * "bias_compensation", "residual_groups" ("0"/"1"); "ratio", "search_steps",
 * "channel_multiple", "min_cosine", "min_top1", "threads", "seed" (numbers); "layer_ratio"
 * ("NAME=RATIO"), "calibration_npz", "exclude_node" and "op_type" add one each time (the first
 * "op_type" replaces the default Conv, MatMul, Gemm); "calibration_dir". An unknown key is
 * KILN_INVALID_ARGUMENT naming the closest one. */
KILN_API KilnStatus kiln_prune_options_set_config(KilnPruneOptions* options, const char* key,
                                                  const char* value);
/* Prunes the ONNX model at `model_path` into `output_path` as `kiln prune` does. `options` may be
 * NULL. A model that misses the gate is not written (KILN_INVALID_ARGUMENT) unless
 * "allow_drift". `result` may be NULL; otherwise the caller destroys what is written there. */
KILN_API KilnStatus kiln_prune(const char* model_path, const char* output_path,
                               const KilnPruneOptions* options, KilnPruneResult** result);
KILN_API void kiln_prune_result_destroy(KilnPruneResult* result);
/* The report, the lines `kiln prune` prints. */
KILN_API KilnStatus kiln_prune_result_report(const KilnPruneResult* result, const char** text);
/* Whether the gate passed, why not ("" when it did), and how many layers were pruned. Any out
 * may be NULL. */
KILN_API KilnStatus kiln_prune_result_gate(const KilnPruneResult* result, int* passed,
                                           const char** failure, size_t* pruned_layers);
/* Parameters (float initializer entries) and dense FLOPs before and after. Any out may be NULL. */
KILN_API KilnStatus kiln_prune_result_sizes(const KilnPruneResult* result,
                                            int64_t* parameters_before, int64_t* parameters_after,
                                            double* flops_before, double* flops_after);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_KILN_H_ */
