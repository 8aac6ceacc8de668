// Encoding and decoding rows of any DType, including the block-quantized ones, exactly
// as ggml lays them out (ggml-common.h) and as llama.cpp's reference quantizers
// (quantize_row_*_ref in ggml-quants.c) choose the codes, so files written with
// EncodeRow load in llama.cpp and decode there to the same values.
//
// DecodeRow is the simplest correct dequantization, element by element: the oracle the
// reference backend computes with and every fast kernel is tested against.
//
// Threading: pure functions.
#ifndef KVSERVE_MODEL_QUANT_H_
#define KVSERVE_MODEL_QUANT_H_

#include <cstdint>
#include <span>

#include "model/dtype.h"

namespace kvserve::model {

// out[i] = float(element i) of a row of out.size() elements of type `t` stored at `row`.
// Precondition: out.size() is a multiple of DTypeBlockElems(t) and `row` holds
// DTypeBytes(t, out.size()) bytes.
void DecodeRow(DType t, const uint8_t* row, std::span<float> out);

// The 6-bit scale and min of sub-block s in [0, 8) of a q4_K block's 12 scale bytes
// (ggml's get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and
// 4-7 (mins); sub-blocks 4-7 in the nibbles of bytes 8-11 plus the top 2 bits of bytes
// 0-3 (scales) and 4-7 (mins).
// (Inline: the cpu_blas kernels unpack 8 pairs per 256 weights.)
inline void Q4KScaleMin(const uint8_t* scales, int s, uint8_t* sc, uint8_t* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
  }
}

// Quant code of element j in [0, 32) of a q5_0 or q5_1 block whose qh[4] start at `qh`
// (byte 2 of a q5_0 block, byte 4 of a q5_1 block; qs[16] follow them): 0..31. Its low
// 4 bits are the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16]; its fifth
// bit is bit j of qh read as a little-endian 32-bit word.
inline int Q5Code(const uint8_t* qh, int j) {
  const uint8_t* qs = qh + 4;
  const int nibble = (qs[j % 16] >> (4 * (j / 16))) & 15;
  return nibble | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

// Quant code of element e in [0, 256) of a q4_K block: 0..15.
int Q4KQuant(const uint8_t* block, int e);

// Quant code of element e in [0, 256) of a q5_K block: 0..31. Its low 4 bits are those of
// a q4_K code (Q4KQuant's nibble, with qs at byte 48 instead of 16); its fifth bit is bit
// e / 32 of qh[e % 32] (qh at byte 16). Scales and mins as q4_K's (Q4KScaleMin at byte 4).
int Q5KQuant(const uint8_t* block, int e);

// Quant code of element e in [0, 256) of a q6_K block, minus 32: -32..31. Element
// e = 128 h + 32 k + l (h < 2, k < 4, l < 32) has its low 4 bits in
// ql[64 h + 32 (k % 2) + l] (low nibble for k < 2, high for k >= 2) and its high 2 bits
// in qh[32 h + l] (bits 2k and 2k + 1); its scale is scales[e / 16].
int Q6KQuant(const uint8_t* block, int e);

// Writes values as a row of type `t` to `out` (DTypeBytes(t, values.size()) bytes):
//   f32 as is; f16 and bf16 rounded to nearest even;
//   q8_0  per 32: d = max|x| / 127 (f16), q = round(x / d);
//   q4_0  per 32: d = -m / 8 with m the element of largest magnitude, q = min(15, x / d + 8.5);
//   q5_0  per 32: d = -m / 16 with m the element of largest magnitude,
//         q = min(31, x / d + 16.5);
//   q5_1  per 32: m = min x, d = (max x - m) / 31, q = (x - m) / d + 0.5 (truncated);
//   q4_k  per 256: eight sub-blocks of 32 with a scale and a min fitted by weighted least
//         squares (llama.cpp's make_qkx2_quants), both quantized to 6 bits;
//   q5_k  as q4_k with 5-bit quants (codes 0..31) and llama.cpp's search for them;
//   q6_k  per 256: sixteen sub-blocks of 16 with an 8-bit scale chosen by
//         make_qx_quants (rmse_type 1), quants in [-32, 31].
// Precondition: values.size() is a multiple of DTypeBlockElems(t); values are finite.
void EncodeRow(DType t, std::span<const float> values, uint8_t* out);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_QUANT_H_
