#include "compiler/int4_weights.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {
namespace {

struct BlockGrid {
  float scale = 1.f;
  float zero_point = 8.f;
  int code(double v) const {
    if (scale == 0.f) return static_cast<int>(zero_point);
    const double q = std::nearbyint(v / scale) + zero_point;
    return static_cast<int>(std::clamp(q, 0.0, 15.0));
  }
  double value(int code) const { return (static_cast<float>(code) - zero_point) * scale; }
};

// The grid of one block's values (the file comment says which).
template <typename Get>
BlockGrid grid_of(Get&& at, int64_t len, bool symmetric) {
  BlockGrid g;
  if (symmetric) {
    double extreme = 0;
    for (int64_t r = 0; r < len; ++r) {
      if (std::fabs(at(r)) > std::fabs(extreme)) extreme = at(r);
    }
    g.scale = static_cast<float>(extreme / -8.0);
    g.zero_point = 8.f;
    return g;
  }
  double lo = 0, hi = 0;
  for (int64_t r = 0; r < len; ++r) {
    lo = std::min(lo, at(r));
    hi = std::max(hi, at(r));
  }
  g.scale = hi > lo ? static_cast<float>((hi - lo) / 15.0) : 1.f;
  g.zero_point = static_cast<float>(std::clamp(std::nearbyint(-lo / g.scale), 0.0, 15.0));
  return g;
}

Int4Weight empty_weight(int64_t k, int64_t n, const Int4Params& p) {
  Int4Weight q;
  q.k = k;
  q.n = n;
  q.blocks = (k + p.block_size - 1) / p.block_size;
  q.blob = p.block_size / 2;
  q.codes.assign(static_cast<size_t>(n * q.blocks * q.blob), 0);
  q.scales.assign(static_cast<size_t>(n * q.blocks), 0.f);
  if (!p.symmetric) q.zero_points.assign(static_cast<size_t>(n * ((q.blocks + 1) / 2)), 0);
  return q;
}

void set_grid(Int4Weight& q, int64_t c, int64_t j, const BlockGrid& g) {
  q.scales[static_cast<size_t>(c * q.blocks + j)] = g.scale;
  if (q.zero_points.empty()) return;
  const int zp = static_cast<int>(g.zero_point);
  q.zero_points[static_cast<size_t>(c * ((q.blocks + 1) / 2) + j / 2)] |=
      static_cast<uint8_t>(zp << ((j & 1) * 4));
}

void set_code(Int4Weight& q, int64_t c, int64_t row, int64_t block_size, int code) {
  const int64_t j = row / block_size, r = row % block_size;
  q.codes[static_cast<size_t>((c * q.blocks + j) * q.blob + r / 2)] |=
      static_cast<uint8_t>(code << ((r & 1) * 4));
}

// In-place Cholesky of the lower triangle of row-major `a` (K x K): a = L L^T, L in the lower
// triangle. False when `a` is not positive definite.
bool cholesky(std::vector<double>& a, int64_t k) {
  for (int64_t i = 0; i < k; ++i) {
    double* ri = a.data() + i * k;
    for (int64_t j = 0; j <= i; ++j) {
      const double* rj = a.data() + j * k;
      double s = ri[j];
      for (int64_t p = 0; p < j; ++p) s -= ri[p] * rj[p];
      if (j == i) {
        if (!(s > 0)) return false;
        ri[i] = std::sqrt(s);
      } else {
        ri[j] = s / rj[j];
      }
    }
  }
  return true;
}

// The upper Cholesky factor U of H^-1 (H^-1 = U^T U) from the lower factor L of H, row-major;
// GPTQ reads row i of U when it spreads column i's error.
std::vector<double> inverse_upper_factor(const std::vector<double>& l, int64_t k) {
  // mt = (L^-1)^T, upper: row j of it is column j of L^-1, so every sum below runs over
  // contiguous rows.
  std::vector<double> mt(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    const double* li = l.data() + i * k;
    mt[static_cast<size_t>(i * k + i)] = 1.0 / li[i];
    for (int64_t j = 0; j < i; ++j) {
      const double* mj = mt.data() + j * k;
      double s = 0;
      for (int64_t p = j; p < i; ++p) s += li[p] * mj[p];
      mt[static_cast<size_t>(j * k + i)] = -s / li[i];
    }
  }
  // H^-1 = (L^-1)^T L^-1: element (a, b) is the dot of rows a and b of mt from max(a, b) on.
  std::vector<double> hinv(static_cast<size_t>(k * k), 0.0);
  for (int64_t a = 0; a < k; ++a) {
    const double* ma = mt.data() + a * k;
    for (int64_t b = 0; b <= a; ++b) {
      const double* mb = mt.data() + b * k;
      double s = 0;
      for (int64_t p = a; p < k; ++p) s += ma[p] * mb[p];
      hinv[static_cast<size_t>(a * k + b)] = s;
    }
  }
  if (!cholesky(hinv, k)) return {};
  std::vector<double> u(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      u[static_cast<size_t>(j * k + i)] = hinv[static_cast<size_t>(i * k + j)];
    }
  }
  return u;
}

}  // namespace

Int4Weight quantize_int4_rtn(const float* w, int64_t k, int64_t n, const Int4Params& p) {
  Int4Weight q = empty_weight(k, n, p);
  const int64_t bs = p.block_size;
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t j = 0; j < q.blocks; ++j) {
      const int64_t row0 = j * bs, len = std::min(bs, k - row0);
      auto at = [&](int64_t r) { return static_cast<double>(w[(row0 + r) * n + c]); };
      const BlockGrid g = grid_of(at, len, p.symmetric);
      set_grid(q, c, j, g);
      for (int64_t r = 0; r < len; ++r) set_code(q, c, row0 + r, bs, g.code(at(r)));
    }
  }
  return q;
}

void add_to_gram(std::vector<double>& gram, const float* x, int64_t rows, int64_t k) {
  std::vector<double> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    bool finite = true;
    for (int64_t i = 0; i < k; ++i) {
      row[static_cast<size_t>(i)] = xr[i];
      finite = finite && std::isfinite(xr[i]);
    }
    if (!finite) continue;  // one overflowed activation would poison every column's weighting
    for (int64_t i = 0; i < k; ++i) {
      const double xi = row[static_cast<size_t>(i)];
      if (xi == 0) continue;
      double* g = gram.data() + i * k;
      for (int64_t j = 0; j <= i; ++j) g[j] += xi * row[static_cast<size_t>(j)];
    }
  }
}

std::string quantize_int4_gptq(const float* w, int64_t k, int64_t n, const Int4Params& p,
                               const std::vector<double>& gram, double damp, Int4Weight& out) {
  // Inputs that were always 0 carry no information: their weights are quantized as 0 and H gets
  // a unit diagonal there so it stays invertible.
  std::vector<double> h = gram;
  std::vector<bool> dead(static_cast<size_t>(k), false);
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) {
    double& d = h[static_cast<size_t>(i * k + i)];
    if (d <= 0) {
      dead[static_cast<size_t>(i)] = true;
      d = 1;
    }
    mean_diag += d / static_cast<double>(k);
  }
  std::vector<double> u;
  for (int attempt = 0; attempt < 3 && u.empty(); ++attempt) {
    std::vector<double> l = h;
    const double add = damp * std::pow(10.0, attempt) * mean_diag;
    for (int64_t i = 0; i < k; ++i) l[static_cast<size_t>(i * k + i)] += add;
    if (cholesky(l, k)) u = inverse_upper_factor(l, k);
  }
  if (u.empty()) return "the inputs' Gram matrix is not positive definite";

  std::vector<double> wk(static_cast<size_t>(k * n));  // the weight being updated, [K, N]
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      wk[static_cast<size_t>(i * n + c)] = dead[static_cast<size_t>(i)] ? 0.0 : w[i * n + c];
    }
  }
  out = empty_weight(k, n, p);
  const int64_t bs = p.block_size;
  std::vector<BlockGrid> grids(static_cast<size_t>(n));
  std::vector<double> err(static_cast<size_t>(n));
  for (int64_t i = 0; i < k; ++i) {
    if (i % bs == 0) {
      const int64_t len = std::min(bs, k - i);
      for (int64_t c = 0; c < n; ++c) {
        auto at = [&](int64_t r) { return wk[static_cast<size_t>((i + r) * n + c)]; };
        grids[static_cast<size_t>(c)] = grid_of(at, len, p.symmetric);
        set_grid(out, c, i / bs, grids[static_cast<size_t>(c)]);
      }
    }
    const double* ui = u.data() + i * k;
    double* wi = wk.data() + i * n;
    for (int64_t c = 0; c < n; ++c) {
      const BlockGrid& g = grids[static_cast<size_t>(c)];
      const int code = g.code(wi[c]);
      set_code(out, c, i, bs, code);
      err[static_cast<size_t>(c)] = (wi[c] - g.value(code)) / ui[i];
    }
    for (int64_t j = i + 1; j < k; ++j) {
      const double f = ui[j];
      double* wj = wk.data() + j * n;
      for (int64_t c = 0; c < n; ++c) wj[c] -= f * err[static_cast<size_t>(c)];
    }
  }
  return "";
}

}  // namespace kiln::compiler
