//! The model folder's `config.json` `quantization_config`: what the tensors
//! alone do not say (GPTQ's bit width and checkpoint format, a block size).

use std::path::Path;

use serde::Deserialize;

use super::QuantError;

/// The keys of `quantization_config` that change how tensors are read.
/// Unknown keys are ignored; a missing file or key leaves the defaults the
/// tensors' shapes imply.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct QuantConfig {
    /// `gptq`, `awq`, `fp8`, `compressed-tensors`, `bitsandbytes`, ...
    #[serde(default)]
    pub quant_method: Option<String>,
    /// GPTQ/AWQ bits per weight.
    #[serde(default)]
    pub bits: Option<u32>,
    /// GPTQ/AWQ input columns per group (-1: one group).
    #[serde(default)]
    pub group_size: Option<i64>,
    /// GPTQModel: `gptq` (v1, zeros stored minus one) or `gptq_v2`.
    #[serde(default)]
    pub checkpoint_format: Option<String>,
    /// FP8 (DeepSeek-V3, transformers' fine-grained FP8): rows and columns per scale.
    #[serde(default)]
    pub weight_block_size: Option<[u64; 2]>,
    /// compressed-tensors: the schemes, by group name.
    #[serde(default)]
    pub config_groups: Option<std::collections::BTreeMap<String, ConfigGroup>>,
}

/// A compressed-tensors config group: the keys of its weights' scheme read here.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct ConfigGroup {
    /// The weights' quantization, if the group quantizes weights.
    #[serde(default)]
    pub weights: Option<GroupWeights>,
}

/// A config group's `weights`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct GroupWeights {
    /// Bits per weight.
    #[serde(default)]
    pub num_bits: Option<u32>,
    /// The `block` strategy's rows and columns per scale.
    #[serde(default)]
    pub block_structure: Option<[u64; 2]>,
}

impl QuantConfig {
    /// The weight bit widths compressed-tensors' config groups declare.
    pub(crate) fn group_bits(&self) -> Vec<u32> {
        let mut bits: Vec<u32> = self
            .config_groups
            .iter()
            .flat_map(|g| g.values())
            .filter_map(|g| g.weights.as_ref()?.num_bits)
            .collect();
        bits.sort_unstable();
        bits.dedup();
        bits
    }

    /// The FP8 scale block sizes the config declares: transformers'
    /// `weight_block_size`, then each compressed-tensors group's
    /// `block_structure` (llm-compressor's `FP8_BLOCK` is 128x128, but
    /// any is allowed); DeepSeek-V3's 128x128 when it declares none.
    pub(crate) fn block_sizes(&self) -> Vec<[u64; 2]> {
        let mut sizes: Vec<[u64; 2]> = self.weight_block_size.into_iter().collect();
        for size in self.group_blocks() {
            if !sizes.contains(&size) {
                sizes.push(size);
            }
        }
        if sizes.is_empty() {
            sizes.push([128, 128]);
        }
        sizes
    }

    /// The `block_structure`s compressed-tensors' config groups declare.
    pub(crate) fn group_blocks(&self) -> Vec<[u64; 2]> {
        let groups = self.config_groups.iter().flat_map(|g| g.values());
        let mut sizes: Vec<[u64; 2]> = groups
            .filter_map(|g| g.weights.as_ref()?.block_structure)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }
}

/// The config of the model whose file or index is `input`: the
/// `quantization_config` of the `config.json` beside it, if any.
pub(crate) fn beside(input: &str) -> Result<QuantConfig, QuantError> {
    let Some(path) = path_beside(input) else {
        return Ok(QuantConfig::default());
    };
    // A config is small; a huge one is not a model config.
    let text = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() && m.len() <= 16 << 20 => match std::fs::read(&path) {
            Ok(t) => t,
            Err(_) => return Ok(QuantConfig::default()),
        },
        _ => return Ok(QuantConfig::default()),
    };
    parse(&text)
}

/// Where the `config.json` beside the file or index `input` would be.
pub(crate) fn path_beside(input: &str) -> Option<std::path::PathBuf> {
    Some(Path::new(input).parent()?.join("config.json"))
}

/// Parses a `config.json`'s text.
pub(crate) fn parse(text: &[u8]) -> Result<QuantConfig, QuantError> {
    #[derive(Deserialize)]
    struct Model {
        #[serde(default)]
        quantization_config: Option<QuantConfig>,
    }
    let model: Model =
        serde_json::from_slice(text).map_err(|e| QuantError::Config(e.to_string()))?;
    Ok(model.quantization_config.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_keys_that_matter() {
        let c = parse(
            br#"{"hidden_size": 8, "quantization_config": {"quant_method": "gptq",
            "bits": 8, "group_size": -1, "checkpoint_format": "gptq_v2", "desc_act": true}}"#,
        )
        .unwrap();
        assert_eq!(c.bits, Some(8));
        assert_eq!(c.group_size, Some(-1));
        assert_eq!(c.checkpoint_format.as_deref(), Some("gptq_v2"));
        assert_eq!(parse(b"{}").unwrap(), QuantConfig::default());
        let c = parse(
            br#"{"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group"}},
            "group_1": {"weights": {"num_bits": 8}}, "group_2": {"input_activations": {"num_bits": 8}}}}}"#,
        )
        .unwrap();
        assert_eq!(c.group_bits(), vec![4, 8]);
        assert!(matches!(
            parse(br#"{"quantization_config": {"bits": "four"}}"#),
            Err(QuantError::Config(_))
        ));
    }
}
