#pragma once
// The attention kernel's softmax over one row of scores: p = softmax(s * scale + mask), in place,
// with the scale and the additive mask applied on the way (no separate pass or oneDNN post-op).
// oneDNN 2.6's softmax primitive took about 0.7 ns a score on BERT-base's 12 x 128 x 128 rows
// (140 us a layer on this host); this loop takes about half that.
#include <cstdint>

namespace kiln::backends::cpu {

// `mask` is null (no mask), one value per score (`mask_step` 1) or one value for the whole row
// (`mask_step` 0). A row whose every term is -inf comes out NaN (0 / 0), as the reference
// computes it; so does a row holding a NaN. With `bf16_out`, the probabilities are written there
// rounded to bfloat16 (to nearest even) instead, and `row` is left holding scratch.
void scaled_masked_softmax_row(float* row, int64_t n, float scale, const float* mask,
                               int64_t mask_step, uint16_t* bf16_out = nullptr);

}  // namespace kiln::backends::cpu
