//! The GGUF block kernels on AVX-512: 16 codes at a time, the
//! [`ggml_kernels!`](super::ggml) bodies over the AVX-512 lane primitives.

use super::avx512::*;

ggml_kernels!("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c");
