//! What an opened FP8 checkpoint holds per quantized weight once
//! `--dequantize` wraps it: the records the wrapper keeps beside the inner
//! source's own listing (benches/scale/README.md, "Memory, the fan-out and
//! the local limit": at DeepSeek-V3's 92k tensors they were most of a
//! process's heap after planning).
//!
//! Print the figure with `cargo test --test memory records -- --nocapture`.

use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::Dtype as St;
use safetensors_stream::convert::{open_inputs, ConvertOptions};
use safetensors_stream::{Dtype, SourceOptions};

use crate::alloc::{live, serial};

/// Quantized weights in the synthetic file.
const WEIGHTS: usize = 4000;

/// Bytes the wrapper may hold per weight, above the plain source's own:
/// measured 166 (the listed tensor's `TensorMeta` with its name and
/// shape, the weight's entry of its two tensors' indices); it was 433
/// with an `Arc<Kind>` of two `TensorAt`s a weight, 840 when each record
/// copied its tensors' names and shapes, the entry the weight's name, and
/// every `Kind` took the size of its largest variant.
const PER_WEIGHT: usize = 200;

/// DeepSeek-V3's names and layout: an E4M3 weight and its F32
/// `weight_scale_inv` of 128x128 blocks, per expert projection.
fn write_fp8(path: &Path) {
    write_fp8_weights(path, WEIGHTS);
}

/// [`write_fp8`] with `weights` weights.
fn write_fp8_weights(path: &Path, weights: usize) {
    let codes = vec![0x38u8; 16 * 16];
    let scale = 1.0f32.to_le_bytes();
    let mut views = Vec::with_capacity(2 * weights);
    for i in 0..weights {
        let prefix = format!("model.layers.{}.mlp.experts.{}.down_proj", i / 256, i % 256);
        views.push((
            format!("{prefix}.weight"),
            TensorView::new(St::F8_E4M3, vec![16, 16], &codes).unwrap(),
        ));
        views.push((
            format!("{prefix}.weight_scale_inv"),
            TensorView::new(St::F32, vec![1, 1], &scale).unwrap(),
        ));
    }
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Live heap bytes held by the opened sources of `input`.
fn held(input: &Path, dequantize: bool) -> usize {
    let mut options = ConvertOptions::default();
    if dequantize {
        options.source = SourceOptions::default().dequantize(Some(Dtype::BF16));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = live();
    let sources = rt
        .block_on(open_inputs(&[input.to_path_buf()], &options))
        .unwrap();
    let held = live() - before;
    assert_eq!(sources.len(), 1);
    let listed = sources[0].tensors().len();
    assert_eq!(listed, if dequantize { WEIGHTS } else { 2 * WEIGHTS });
    held
}

#[test]
fn the_quantized_fp8_wrapper_holds_a_few_hundred_bytes_per_weight() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("fp8.safetensors");
    write_fp8(&input);
    let plain = held(&input, false);
    let wrapped = held(&input, true);
    let per_weight = wrapped.saturating_sub(plain) / WEIGHTS;
    println!(
        "{WEIGHTS} FP8 weights: plain source {} B a weight, the wrapper {per_weight} B more",
        plain / WEIGHTS
    );
    assert!(per_weight < PER_WEIGHT, "{per_weight} B a weight");
}

/// Bytes a dequantized weight may add to a conversion's heap peak: its
/// records (listing, wrapper, plan entry), measured 844 with the copy's
/// jobs built 2,048 at a time; 1,605 when 16,384 were built at once (each
/// holds its weight's reader, opened: 7.4 MB of the scale benchmark's
/// S3 -> S3 peak at DeepSeek-V3's 46k weights). Measured 871 once FP8
/// weights are kept as indices (`Entry::Fp8`): the peak is then while the
/// weights are recognised (each `Kind` with its tensors' names and shapes,
/// given back as the wrapper is built), not while copying.
const PEAK_PER_WEIGHT: usize = 950;

/// The heap peak of dequantizing `weights` FP8 weights into one file.
fn conversion_peak(dir: &Path, weights: usize) -> usize {
    let input = dir.join(format!("fp8-{weights}.safetensors"));
    write_fp8_weights(&input, weights);
    let out = dir.join(format!("out-{weights}.safetensors"));
    crate::quantized::dequantize_peak(&input, &out)
}

#[test]
fn a_conversion_holds_its_copy_jobs_a_window_at_a_time() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    // Two sizes: the buffers, the same for both, cancel out.
    let (small, large) = (4_000, 24_000);
    let a = conversion_peak(tmp.path(), small);
    let b = conversion_peak(tmp.path(), large);
    let per_weight = b.saturating_sub(a) / (large - small);
    println!("dequantizing FP8: {per_weight} B a weight at the peak ({a} B at {small}, {b} B at {large})");
    assert!(per_weight < PEAK_PER_WEIGHT, "{per_weight} B a weight");
}
