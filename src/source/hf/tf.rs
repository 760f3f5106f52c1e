//! TensorFlow names to PyTorch names, as transformers 4.x's cross-loading
//! made them (`modeling_tf_pytorch_utils.py`,
//! `convert_tf_weight_name_to_pt_weight_name`), from a `tf_model.h5`
//! dataset's path.
//!
//! The path is `<layer>/<weight name>`: Keras 2's `save_weights` writes a
//! group per top-level layer holding its weights by their variable names
//! (`tf_bert_for_masked_lm/bert/embeddings/word_embeddings/weight:0`), which
//! is what transformers read back and converted. The layer is dropped,
//! then transformers' rules: `:0` removed, `a___b` is `b`, `_._` separates
//! levels (`layer_._0` is `layer.0`), the first level (the model's name)
//! is dropped, and the last is renamed (`kernel`, `embeddings`, `gamma` to
//! `weight`; `beta` to `bias`). A `kernel` is transposed (all its axes
//! reversed: a 2-d kernel, and a Conv1D's 3-d one, axes (2, 1, 0)); a 4-d
//! Conv2D kernel is permuted (3, 2, 0, 1).

use std::sync::OnceLock;

use regex::Regex;

/// How a tensor's bytes go from TF's layout to PyTorch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// As they are.
    Same,
    /// Every axis reversed (`numpy.transpose` without axes).
    Reversed,
    /// A Conv2D kernel: (kh, kw, in, out) to PyTorch's (out, in, kh, kw),
    /// axes (3, 2, 0, 1): every axis reversed, then the last two swapped.
    Conv2d,
}

/// The PyTorch name of the TF dataset at `path` of `rank` dimensions, and
/// how its bytes are laid out relative to PyTorch's.
///
/// ```ignore
/// let (name, layout) = pt_name("bert/tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0", 2);
/// assert_eq!(name, "bert.encoder.layer.0.attention.self.query.weight");
/// ```
pub(crate) fn pt_name(path: &str, rank: usize) -> (String, Layout) {
    // The layer's group, then the variable's own name.
    let tf_name = path.split_once('/').map_or(path, |(_, rest)| rest);
    let tf_name = tf_name.replace(":0", "");
    static TRIPLE: OnceLock<Regex> = OnceLock::new();
    let triple = TRIPLE.get_or_init(|| Regex::new(r"/[^/]*___([^/]*)/").expect("valid"));
    let tf_name = triple.replace_all(&tf_name, "/$1/").replace("_._", "/");
    static EMPTY: OnceLock<Regex> = OnceLock::new();
    let empty = EMPTY.get_or_init(|| Regex::new(r"//+").expect("valid"));
    let tf_name = empty.replace_all(&tf_name, "/");
    let mut parts: Vec<String> = tf_name.split('/').map(str::to_string).collect();
    if parts.len() > 1 {
        parts.remove(0); // the model's name
    }
    let last = parts.last().cloned().unwrap_or_default();
    let projs = parts.iter().any(|p| p == "emb_projs" || p == "out_projs");
    let layout = match last.as_str() {
        "kernel" if rank == 4 => Layout::Conv2d,
        "kernel" | "pointwise_kernel" | "depthwise_kernel" => Layout::Reversed,
        _ if projs => Layout::Reversed,
        _ => Layout::Same,
    };
    let renamed = match last.as_str() {
        "kernel" | "embeddings" | "gamma" => "weight".to_string(),
        "beta" => "bias".to_string(),
        "pointwise_kernel" => "pointwise.weight".to_string(),
        "depthwise_kernel" => "depthwise.weight".to_string(),
        other => other.to_string(),
    };
    if let Some(l) = parts.last_mut() {
        *l = renamed;
    }
    (parts.join("."), layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_rules_name_bert_gpt2_and_t5_weights() {
        for (path, rank, name, layout) in [
            (
                "bert/tf_bert_for_masked_lm/bert/encoder/layer_._0/attention/self/query/kernel:0",
                2,
                "bert.encoder.layer.0.attention.self.query.weight",
                Layout::Reversed,
            ),
            (
                "bert/tf_bert_for_masked_lm/bert/embeddings/LayerNorm/gamma:0",
                1,
                "bert.embeddings.LayerNorm.weight",
                Layout::Same,
            ),
            (
                "mlm___cls/tf_bert_for_masked_lm/mlm___cls/predictions/bias:0",
                1,
                "cls.predictions.bias",
                Layout::Same,
            ),
            (
                "transformer/tfgpt2lm_head_model/transformer/h_._1/attn/c_attn/weight:0",
                2,
                "transformer.h.1.attn.c_attn.weight",
                Layout::Same,
            ),
            (
                "decoder/shared/shared/embeddings:0",
                2,
                "shared.weight",
                Layout::Same,
            ),
            ("m/x/conv/kernel:0", 4, "conv.weight", Layout::Conv2d),
            ("m/x/conv/kernel:0", 3, "conv.weight", Layout::Reversed),
            ("final_logits_bias:0", 2, "final_logits_bias", Layout::Same),
        ] {
            assert_eq!(pt_name(path, rank), (name.to_string(), layout), "{path}");
        }
    }
}
