//! Flax names to PyTorch names, as transformers 4.x's cross-loading made
//! them (`modeling_flax_pytorch_utils.py`,
//! `load_flax_weights_in_pytorch_model`), from a `flax_model.msgpack`
//! tensor's name (its keys joined with `.`).
//!
//! A leading `params` or `batch_stats` collection is dropped; then the
//! last key: `kernel` becomes `weight`, transposed (`.T`, every axis
//! reversed; a 4-d convolution kernel permuted (3, 2, 0, 1)),
//! `scale` and `embedding` become `weight`, a key containing `mean` becomes
//! `running_mean` and one containing `var` `running_var` (batch norm).
//! bfloat16 weights are written as they are: transformers cast them to
//! float32 first, which `from_pretrained` does on loading, exactly.

use super::tf::Layout;

/// The PyTorch name of the Flax tensor `name` of `rank` dimensions, and
/// how its bytes are laid out relative to PyTorch's.
pub(crate) fn pt_name(name: &str, rank: usize) -> (String, Layout) {
    let mut keys: Vec<&str> = name.split('.').collect();
    if keys.len() > 1 && matches!(keys[0], "params" | "batch_stats") {
        keys.remove(0);
    }
    let last = keys.last().copied().unwrap_or_default();
    let (renamed, layout) = match last {
        "kernel" if rank == 4 => ("weight", Layout::Conv2d),
        "kernel" => ("weight", Layout::Reversed),
        "scale" | "embedding" => ("weight", Layout::Same),
        l if l.contains("mean") => ("running_mean", Layout::Same),
        l if l.contains("var") => ("running_var", Layout::Same),
        l => (l, Layout::Same),
    };
    if let Some(l) = keys.last_mut() {
        *l = renamed;
    }
    (keys.join("."), layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_rules_name_flax_weights() {
        for (name, rank, want, layout) in [
            (
                "bert.encoder.layer.0.attention.self.query.kernel",
                2,
                "bert.encoder.layer.0.attention.self.query.weight",
                Layout::Reversed,
            ),
            (
                "params.Dense_0.kernel",
                2,
                "Dense_0.weight",
                Layout::Reversed,
            ),
            (
                "embeddings.word_embeddings.embedding",
                2,
                "embeddings.word_embeddings.weight",
                Layout::Same,
            ),
            (
                "embeddings.LayerNorm.scale",
                1,
                "embeddings.LayerNorm.weight",
                Layout::Same,
            ),
            (
                "embeddings.LayerNorm.bias",
                1,
                "embeddings.LayerNorm.bias",
                Layout::Same,
            ),
            ("batch_stats.bn.mean", 1, "bn.running_mean", Layout::Same),
            ("batch_stats.bn.var", 1, "bn.running_var", Layout::Same),
            ("conv.kernel", 4, "conv.weight", Layout::Conv2d),
        ] {
            assert_eq!(pt_name(name, rank), (want.to_string(), layout), "{name}");
        }
    }
}
