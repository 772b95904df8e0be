// TfIdfVectorizer (opset 9): counts the pool's n-grams (with skips) in each input row and
// weights the counts (TF, IDF, TFIDF).
#include <algorithm>
#include <map>

#include "ops/op_utils.hpp"
#include "ops/registry.hpp"
#include "ops/scratch_guard.hpp"

namespace kiln::ops {
namespace {

// The attributes, validated: ngrams of the pool mapped to their output column.
template <typename Key>
struct NgramPool {
  std::map<std::vector<Key>, int64_t> column;  // n-gram -> output column
  int64_t output_size = 0;
};

int64_t output_size(const AttrReader& ctx) {
  const std::vector<int64_t> idx = ctx.attr_ints("ngram_indexes");
  ctx.check(!idx.empty(), "ngram_indexes must not be empty");
  for (int64_t v : idx)
    ctx.check(v >= 0 && v < (int64_t{1} << 40), "ngram_indexes holds out-of-range index {}", v);
  return *std::max_element(idx.begin(), idx.end()) + 1;
}

template <typename Key>
NgramPool<Key> build_pool(const AttrReader& ctx, const std::vector<Key>& pool, int64_t min_n,
                          int64_t max_n) {
  NgramPool<Key> p;
  p.output_size = output_size(ctx);
  const std::vector<int64_t> idx = ctx.attr_ints("ngram_indexes");
  const std::vector<int64_t> counts = ctx.attr_ints("ngram_counts");
  const int64_t total = static_cast<int64_t>(pool.size());
  int64_t id = 0;  // n-grams are numbered across all sizes in pool order
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1;
    const int64_t begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    ctx.check(begin >= 0 && begin <= end && end <= total,
              "ngram_counts {} does not describe the pool of {} items", dims_to_string(counts),
              total);
    ctx.check((end - begin) % n == 0, "the pool holds {} items of {}-grams, not a multiple of {}",
              end - begin, n, n);
    for (int64_t s = begin; s < end; s += n, ++id) {
      if (n < min_n || n > max_n) continue;
      ctx.check(id < static_cast<int64_t>(idx.size()), "ngram_indexes has no entry for n-gram {}",
                id);
      p.column[std::vector<Key>(pool.begin() + s, pool.begin() + s + n)] =
          idx[static_cast<size_t>(id)];
    }
  }
  return p;
}

template <typename Key>
std::vector<int64_t> count_ngrams(const KernelContext& ctx, const std::vector<Key>& x, int64_t rows,
                                  int64_t cols) {
  const int64_t min_n = ctx.attr_int("min_gram_length");
  const int64_t max_n = ctx.attr_int("max_gram_length");
  const int64_t max_skip = ctx.attr_int("max_skip_count");
  ctx.check(min_n >= 1 && min_n <= max_n, "gram lengths must satisfy 1 <= min ({}) <= max ({})",
            min_n, max_n);
  ctx.check(max_skip >= 0, "max_skip_count must be >= 0, got {}", max_skip);
  std::vector<Key> pool;
  if constexpr (std::is_same_v<Key, std::string>) {
    pool = ctx.attr_strings("pool_strings");
  } else {
    pool = ctx.attr_ints("pool_int64s");
  }
  const NgramPool<Key> p = build_pool(ctx, pool, min_n, max_n);
  check_scratch(ctx, {rows, p.output_size});
  std::vector<int64_t> freq(static_cast<size_t>(rows * p.output_size), 0);
  std::vector<Key> gram;
  for (int64_t r = 0; r < rows; ++r) {
    const Key* row = x.data() + r * cols;
    for (int64_t start = 0; start < cols; ++start) {
      for (int64_t n = min_n; n <= max_n; ++n) {
        // A unigram does not depend on the skip, so it is counted once.
        const int64_t skips = n == 1 ? 0 : max_skip;
        for (int64_t skip = 0; skip <= skips; ++skip) {
          const int64_t step = skip + 1;
          if (start + (n - 1) * step >= cols) break;
          gram.clear();
          for (int64_t k = 0; k < n; ++k) gram.push_back(row[start + k * step]);
          auto it = p.column.find(gram);
          if (it != p.column.end()) ++freq[static_cast<size_t>(r * p.output_size + it->second)];
        }
      }
    }
  }
  return freq;
}

void tfidf(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.check(x.rank() <= 2, "input must be 1-D [C] or 2-D [N, C], got {}", x.describe());
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
  const int64_t cols = x.rank() == 0 ? 1 : x.dims().back();
  const bool has_strings = ctx.has_attr("pool_strings"), has_ints = ctx.has_attr("pool_int64s");
  ctx.check(has_strings != has_ints, "exactly one of pool_strings and pool_int64s must be set");
  std::vector<int64_t> freq;
  if (x.dtype() == DataType::String) {
    ctx.check(has_strings, "a string input needs pool_strings");
    freq = count_ngrams<std::string>(
        ctx,
        std::vector<std::string>(x.values<std::string>().begin(), x.values<std::string>().end()),
        rows, cols);
  } else if (x.dtype() == DataType::Int32 || x.dtype() == DataType::Int64) {
    ctx.check(has_ints, "an integer input needs pool_int64s");
    freq = count_ngrams<int64_t>(ctx, x.to_int64_vector(), rows, cols);
  } else {
    ctx.fail("input must be string, int32 or int64, got {}", dtype_name(x.dtype()));
  }
  const int64_t width = output_size(ctx);
  const std::string mode = ctx.attr_string("mode");
  const std::vector<float> w = ctx.attr_floats("weights", {});
  ctx.check(w.empty() || static_cast<int64_t>(w.size()) >= width,
            "weights has {} entries for {} output columns", w.size(), width);
  std::vector<int64_t> dims =
      x.rank() == 2 ? std::vector<int64_t>{rows, width} : std::vector<int64_t>{width};
  Tensor out(DataType::Float32, dims);
  float* y = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const int64_t i = r * width + c;
      const float f = static_cast<float>(freq[static_cast<size_t>(i)]);
      const float wc = w.empty() ? 1.0f : w[static_cast<size_t>(c)];
      if (mode == "TF") {
        y[i] = f;
      } else if (mode == "IDF") {
        y[i] = f > 0 ? wc : 0.0f;
      } else if (mode == "TFIDF") {
        y[i] = wc * f;
      } else {
        ctx.fail("unknown mode '{}' (TF, IDF or TFIDF)", mode);
      }
    }
  ctx.set_output(0, std::move(out));
}

void infer_tfidf(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> shape;
  if (x && x->kind == TypeInfo::Kind::Tensor && x->shape && x->shape->rank() <= 2) {
    const Dim width(output_size(ctx));
    shape = x->shape->rank() == 2 ? Shape({(*x->shape)[0], width}) : Shape({width});
  }
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Float32, shape));
}

KILN_REGISTER_OP({.op_type = "TfIdfVectorizer", .kernel = tfidf, .infer = infer_tfidf});

}  // namespace
}  // namespace kiln::ops
